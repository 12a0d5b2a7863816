//! `Pool.from_config`'s TOML file, read with serde: the keywords of `Pool(...)` at the top
//! level, `[health]` and `[warmup]` as the core's own configuration objects, and `[[exit]]`
//! tables. Every error carries its key path and line as data ([`Located`]): the path comes from
//! where the deserializer stands, the line from the span `toml` keeps for every key.
//!
//! The deserializer (`spanned`) walks `toml`'s spanned tree itself so that every message is ours:
//! values are shown masked (a proxy URL pasted into the wrong key keeps its password), and
//! integers are read whole, so that the core can name its own range for any size.

mod located;
mod spanned;

pub use located::{dotted, Located, Seg};
use spanned::{collect_lines, line_of, Node};

use crate::error::Error;
use crate::exit::{validate_capacity, validate_id, Exit};
use crate::gateway::{Gateway, GatewaySpec};
use crate::health::HealthConfig;
use crate::mask::shown;
use crate::proxy::ProxyUrl;
use crate::warmup::WarmupConfig;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::marker::PhantomData;
use toml::de::DeTable;

/// A string setting whose wrong type is described by what the key holds, not "a string".
struct Text(&'static str);

impl Visitor<'_> for Text {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<String, E> {
        Ok(s.to_owned())
    }
}

fn proxy_url<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_string(Text("a proxy URL string")).map(Some)
}

fn ip_text<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_string(Text("an IP address string")).map(Some)
}

fn path_text<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_string(Text("a path (relative to this file)")).map(Some)
}

/// An array of tables (`[[exit]]`, `[[gateway]]`), named so in a wrong-type message: `exit = 5`
/// or a bare `[exit.tags]` is told what the key holds.
struct Tables<T>(&'static str, PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for Tables<T> {
    type Value = Vec<T>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut out = Vec::new();
        while let Some(t) = seq.next_element()? {
            out.push(t);
        }
        Ok(out)
    }
}

fn exit_tables<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<Vec<ExitTable>>, D::Error> {
    d.deserialize_seq(Tables("[[exit]] tables", PhantomData)).map(Some)
}

fn gateway_tables<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<Vec<GatewayTable>>, D::Error> {
    d.deserialize_seq(Tables("[[gateway]] tables", PhantomData)).map(Some)
}

fn template_text<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_string(Text("a template string ({user}, {password}, {session}, {lifetime}, {TAG})")).map(Some)
}

/// `warmup = true`, `warmup = 1800` (a ramp in seconds) or a `[warmup]` table.
#[derive(Debug, Clone, PartialEq)]
pub enum Warmup {
    Switch(bool),
    Ramp(f64),
    Table(WarmupConfig),
}

impl<'de> Deserialize<'de> for Warmup {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Warmup, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Warmup;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true, false, a ramp in seconds or a [warmup] table")
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Warmup, E> {
                Ok(Warmup::Switch(b))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Warmup, E> {
                Ok(Warmup::Ramp(n as f64))
            }
            fn visit_f64<E: de::Error>(self, x: f64) -> Result<Warmup, E> {
                Ok(Warmup::Ramp(x))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Warmup, A::Error> {
                WarmupConfig::deserialize(de::value::MapAccessDeserializer::new(map)).map(Warmup::Table)
            }
        }
        d.deserialize_any(V)
    }
}

/// The top level of the file: `Pool(...)`'s keywords and the two sources of exits. Integers
/// stay wide so that the core judges their range, whatever their size.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub strategy: Option<String>,
    pub replicas: Option<i128>,
    pub session_ttl: Option<f64>,
    pub lease_ttl: Option<f64>,
    pub max_leases: Option<i128>,
    pub balance_factor: Option<f64>,
    pub warmup: Option<Warmup>,
    pub max_sessions: Option<i128>,
    pub max_pairings: Option<i128>,
    pub seed: Option<i128>,
    pub cooldown: Option<f64>,
    pub health: Option<HealthConfig>,
    /// `[pacing]`: site = "rate", as `Pool(pacing=...)` (judged there).
    pub pacing: Option<BTreeMap<String, String>>,
    pub calibrate: Option<bool>,
    pub store: Option<String>,
    pub namespace: Option<String>,
    /// `Pool(state=...)`: relative to the file, as `exits_file` is.
    #[serde(default, deserialize_with = "path_text")]
    pub state: Option<String>,
    pub state_interval: Option<f64>,
    #[serde(default, deserialize_with = "path_text")]
    pub exits_file: Option<String>,
    #[serde(default, deserialize_with = "exit_tables")]
    pub exit: Option<Vec<ExitTable>>,
    #[serde(default, deserialize_with = "gateway_tables")]
    pub gateway: Option<Vec<GatewayTable>>,
}

/// A `[[gateway]]` table: the keywords of `Gateway(...)`, judged by the core's `Gateway::new`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayTable {
    pub id: Option<String>,
    #[serde(default, deserialize_with = "proxy_url")]
    pub proxy: Option<String>,
    pub slots: Option<i128>,
    #[serde(default, deserialize_with = "template_text")]
    pub username: Option<String>,
    #[serde(default, deserialize_with = "template_text")]
    pub password: Option<String>,
    pub lifetime: Option<f64>,
    pub margin: Option<f64>,
    pub capacity: Option<i128>,
    pub tags: Option<BTreeMap<String, String>>,
    pub preset: Option<String>,
    pub rebind: Option<bool>,
    pub session_alphabet: Option<String>,
    pub session_length: Option<i128>,
}

/// An `[[exit]]` table as written; each field is judged by the core on its own, so that an
/// error names the field.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExitTable {
    pub id: Option<String>,
    #[serde(default, deserialize_with = "proxy_url")]
    pub proxy: Option<String>,
    #[serde(default, deserialize_with = "ip_text")]
    pub ip: Option<String>,
    pub capacity: Option<i128>,
    pub tags: Option<BTreeMap<String, String>>,
}

/// A parsed file: its settings, the exits of its `[[exit]]` tables, and the line of every key.
#[derive(Debug)]
pub struct ConfigFile {
    pub settings: Settings,
    pub exits: Vec<Exit>,
    /// The `[[gateway]]` tables, as written (for `Gateway`'s pickling) and as checked.
    pub gateways: Vec<(GatewaySpec, Gateway)>,
    lines: HashMap<Vec<Seg>, usize>,
}

impl ConfigFile {
    /// Parses and type-checks `text` (a BOM allowed), and builds the `[[exit]]` exits.
    pub fn parse(text: &str) -> Result<ConfigFile, Located> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let doc = DeTable::parse(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            let at = e.span().and_then(|s| text.get(s)).map(str::trim).filter(|t| !t.is_empty());
            // The parser's message is its own words; what it stopped at is the user's text,
            // shown masked as the core masks raw text (a duplicated `["http://u:pw@h:1"]`).
            let at = at.map(|t| format!(": `{}`", crate::mask::mask_raw(&truncated(t)))).unwrap_or_default();
            Located { loc: Vec::new(), line, problem: format!("invalid TOML: {}{at}", masked_words(e.message().trim())) }
        })?;
        let mut lines = HashMap::new();
        collect_lines(text, doc.get_ref(), &mut Vec::new(), &mut lines);
        let mut settings = Settings::deserialize(Node::table(text, &doc))?;
        let exits = settings.exit.take().unwrap_or_default();
        let gateways = settings.gateway.take().unwrap_or_default();
        let mut file = ConfigFile { settings, exits: Vec::new(), gateways: Vec::new(), lines };
        for (i, table) in exits.into_iter().enumerate() {
            let exit = file.exit(i, table)?;
            file.exits.push(exit);
        }
        for (i, table) in gateways.into_iter().enumerate() {
            let gateway = file.gateway(i, table)?;
            file.gateways.push(gateway);
        }
        Ok(file)
    }

    /// The line of `loc`, else of its nearest enclosing key that has one.
    pub fn line(&self, loc: &[Seg]) -> Option<usize> {
        (1..=loc.len()).rev().find_map(|n| self.lines.get(&loc[..n]).copied())
    }

    /// Whether the file wrote this key.
    pub fn wrote(&self, loc: &[Seg]) -> bool {
        self.lines.contains_key(loc)
    }

    /// A problem at `loc`, with its line.
    pub fn at(&self, loc: Vec<Seg>, problem: impl Into<String>) -> Located {
        Located { line: self.line(&loc), loc, problem: problem.into() }
    }

    /// A refusal of the core, placed at the key it names: its own key if the file wrote it,
    /// else the other side of its rule; the value part of the message when placed at its own key.
    pub fn place(&self, e: &Error) -> Located {
        let Error::Setting(s) = e else { return Located { loc: Vec::new(), line: None, problem: e.to_string() } };
        let own: Vec<Seg> = s.key.iter().map(|k| Seg::Key((*k).into())).collect();
        let other: Vec<Seg> = s.also.iter().map(|k| Seg::Key((*k).into())).collect();
        if !self.wrote(&own) && !other.is_empty() && self.wrote(&other) {
            return self.at(other, s.message.clone());
        }
        self.at(own, s.message[s.problem_at..].to_owned())
    }

    /// The exits of the file: those of `exits_file` (read by the caller) then the tables'; the
    /// gateways are [`ConfigFile::gateways`]. An id used twice (a gateway's slot ids
    /// `"{id}-{n}"` included, and a gateway id given twice), or no exit at all, is an error
    /// naming both places.
    pub fn all_exits(&self, listed: Vec<Exit>) -> Result<Vec<Exit>, Located> {
        let mut seen: HashMap<String, String> = HashMap::new();
        let from_list = listed.len();
        let mut out = listed;
        out.extend(self.exits.iter().cloned());
        for (n, e) in out.iter().enumerate() {
            let loc = if n < from_list { vec![key("exits_file")] } else { vec![key("exit"), Seg::Index(n - from_list)] };
            if let Some(first) = seen.get(&e.id) {
                return Err(self.at(loc, format!("duplicate exit id {} (also at {first})", shown(&e.id))));
            }
            seen.insert(e.id.clone(), dotted(&loc));
        }
        let mut gateway_ids: HashMap<&str, String> = HashMap::new();
        for (i, (_, g)) in self.gateways.iter().enumerate() {
            let loc = vec![key("gateway"), Seg::Index(i)];
            let here = dotted(&loc);
            if let Some(first) = gateway_ids.insert(&g.id, here.clone()) {
                return Err(self.at(loc, format!("duplicate gateway id {} (also at {first})", shown(&g.id))));
            }
            for slot in 0..g.slots {
                let id = g.slot_id(slot);
                let this = format!("{here}, slot {slot} of gateway {}", shown(&g.id));
                if let Some(first) = seen.insert(id.clone(), this.clone()) {
                    return Err(self.at(loc, format!("duplicate exit id {} ({this}; also at {first})", shown(&id))));
                }
            }
        }
        if out.is_empty() && self.gateways.is_empty() {
            let loc = if self.settings.exits_file.is_some() { vec![key("exits_file")] } else { Vec::new() };
            return Err(self.at(loc, "no exits: set exits_file or add [[exit]] or [[gateway]] tables"));
        }
        Ok(out)
    }

    /// A `[[gateway]]` table as the core's `Gateway`; a refusal is placed at the key it is about.
    fn gateway(&self, i: usize, t: GatewayTable) -> Result<(GatewaySpec, Gateway), Located> {
        let table = || vec![key("gateway"), Seg::Index(i)];
        let at = |field: &str| vec![key("gateway"), Seg::Index(i), key(field)];
        let (Some(id), Some(proxy)) = (t.id, t.proxy) else {
            return Err(self.at(table(), "needs an id and a proxy (the gateway's URL: http, https, socks5 or socks5h)"));
        };
        ProxyUrl::parse(&proxy).map_err(|e| self.at(at("proxy"), without_key(e)))?;
        let Some(slots) = t.slots else { return Err(self.at(table(), "needs slots (how many sticky sessions it holds)")) };
        // Counts stay wide until here; the core names its own range for any i64.
        let count = |n: Option<i128>| n.map(|n| n.clamp(i64::MIN.into(), i64::MAX.into()) as i64);
        let spec = GatewaySpec {
            id,
            proxy,
            slots: count(Some(slots)).unwrap_or_default(),
            username: t.username,
            password: t.password,
            lifetime: t.lifetime,
            margin: t.margin,
            capacity: count(t.capacity).unwrap_or(1),
            tags: t.tags.unwrap_or_default().into_iter().collect(),
            preset: t.preset,
            session_alphabet: t.session_alphabet,
            session_length: count(t.session_length),
            rebind: t.rebind.unwrap_or(false),
        };
        match Gateway::new(spec.clone()) {
            Ok(g) => Ok((spec, g)),
            Err(e) => {
                let message = e.to_string();
                let field = gateway_field(&message);
                let loc = if self.wrote(&at(field)) { at(field) } else { table() };
                Err(self.at(loc, message))
            }
        }
    }

    fn exit(&self, i: usize, t: ExitTable) -> Result<Exit, Located> {
        let at = |field: &str| vec![key("exit"), Seg::Index(i), key(field)];
        let fail = |field: &str, e: Error| self.at(at(field), without_key(e));
        let Some(proxy) = t.proxy else {
            return Err(self.at(vec![key("exit"), Seg::Index(i)], "needs a proxy (a URL: http, https, socks5 or socks5h)"));
        };
        let parsed = ProxyUrl::parse(&proxy).map_err(|e| fail("proxy", e))?;
        let id = match t.id {
            Some(id) => validate_id(&id).map_err(|e| fail("id", e))?,
            // As in proxy lists: `user@host:port`, which survives a password change. An id made
            // from the proxy that the core refuses is the proxy's fault: there is no id to blame.
            None => {
                let id = match parsed.username() {
                    Some(user) => format!("{user}@{}:{}", parsed.host(), parsed.port()),
                    None => format!("{}:{}", parsed.host(), parsed.port()),
                };
                validate_id(&id).map_err(|e| {
                    self.at(at("proxy"), format!("{} (the id an [[exit]] without `id` gets: user@host:port of its proxy)", without_key(e)))
                })?
            }
        };
        let capacity = t.capacity.unwrap_or(1);
        let capacity = i64::try_from(capacity)
            .map_err(|_| Error::setting(&["capacity"], format!("{capacity} is outside 1..={}", crate::exit::MAX_CAPACITY)))
            .and_then(validate_capacity)
            .map_err(|e| fail("capacity", e))?;
        let tags: Vec<(String, String)> = t.tags.unwrap_or_default().into_iter().collect();
        Exit::new(&id, &proxy, None, capacity.into(), tags.clone())
            .map_err(|e| self.at(vec![key("exit"), Seg::Index(i)], e.to_string()))?;
        Exit::new(&id, &proxy, t.ip.as_deref(), capacity.into(), tags).map_err(|e| fail("ip", e))
    }
}

/// The `[[gateway]]` key a refusal of `Gateway::new` is about, from the words it starts with
/// after the gateway's name (`gateway "resi": margin 600 must be ...`).
fn gateway_field(message: &str) -> &'static str {
    let problem = message.split_once("\": ").map_or(message, |(_, p)| p);
    let problem = problem.strip_prefix("the ").unwrap_or(problem);
    const FIELDS: [&str; 10] =
        ["slots ", "capacity", "preset", "lifetime", "margin", "session_alphabet", "session_length", "username", "password", "gateway id"];
    match FIELDS.iter().find(|f| problem.starts_with(**f)) {
        Some(&"gateway id") => "id",
        Some(f) => f.trim_end(),
        // "N slots but neither the username nor the password template has {session}".
        None if problem.contains("slots but neither") => "username",
        None => "id",
    }
}

/// A core error about one field, as the message after that field's key.
fn without_key(e: Error) -> String {
    match e {
        Error::Setting(s) => s.message[s.problem_at..].to_owned(),
        e => e.to_string(),
    }
}

fn key(k: &str) -> Seg {
    Seg::Key(k.to_owned())
}

/// A parser's message may quote the text it stopped at: every word is masked.
fn masked_words(m: &str) -> String {
    m.split(' ').map(crate::mask::mask_raw).collect::<Vec<_>>().join(" ")
}

/// At most 80 characters of the user's text, for a message.
fn truncated(t: &str) -> String {
    match t.char_indices().nth(77) {
        Some((i, _)) => format!("{}...", &t[..i]),
        None => t.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> (String, Option<usize>, String) {
        let e = ConfigFile::parse(text).unwrap_err();
        (dotted(&e.loc), e.line, e.problem)
    }

    #[test]
    fn reads_every_section() {
        let f =
            ConfigFile::parse("strategy = \"lru\"\nwarmup = 900\n[health]\nwindow = 32\n[[exit]]\nproxy = \"http://u:pw@gw.example:1\"\n")
                .unwrap();
        assert_eq!(f.settings.strategy.as_deref(), Some("lru"));
        assert_eq!(f.settings.warmup, Some(Warmup::Ramp(900.0)));
        assert_eq!(f.settings.health.as_ref().map(|h| (h.window, h.consecutive)), Some((32, 5.0)));
        assert_eq!(f.exits[0].id, "u@gw.example:1");
        assert_eq!(f.line(&[key("health"), key("window")]), Some(4));
    }

    #[test]
    fn errors_carry_their_key_path_and_line() {
        assert_eq!(err("x = 1\n[health]\nwindow = \"8\"\n"), ("x".into(), Some(1), err("x = 1\n").2));
        let (loc, line, problem) = err("[health]\nconsecutive = 5\nwindow = \"8\"\n");
        assert_eq!((loc.as_str(), line, problem.as_str()), ("health.window", Some(3), "must be a whole number, got the string \"8\""));
        let (loc, line, problem) = err("[health]\nconsecutve = 3\n");
        assert_eq!((loc.as_str(), line), ("health.consecutve", Some(2)));
        assert!(problem.starts_with("unknown key (the keys are consecutive, "), "{problem}");
        let (loc, line, problem) = err("[[exit]]\nproxy = \"http://u:pw@h:1\"\n[[exit]]\nproxy = \"ftp://u:secret@h:1\"\n");
        assert_eq!((loc.as_str(), line), ("exit[1].proxy", Some(4)));
        assert!(problem.contains("[secure]") && !problem.contains("secret"), "{problem}");
        assert_eq!(err("strategy = \n").1, Some(1));
    }

    #[test]
    fn every_value_a_message_shows_is_masked() {
        // serde's own wrong-type message (the Warmup visitor) and the parser's duplicate key.
        let (loc, _, problem) = err("warmup = \"http://user:secret@h:1\"\n");
        assert_eq!(loc, "warmup");
        assert_eq!(problem, "must be true, false, a ramp in seconds or a [warmup] table, got the string \"http://user:[secure]@h:1\"");
        let (_, line, problem) = err("[\"socks5://user:secret@h:1\"]\n[\"socks5://user:secret@h:1\"]\n");
        assert_eq!(line, Some(2));
        assert!(
            problem.starts_with("invalid TOML: duplicate key: `") && problem.contains("[secure]") && !problem.contains("secret"),
            "{problem}"
        );
    }

    #[test]
    fn a_wrong_type_is_told_what_the_key_holds() {
        assert_eq!(err("[[exit]]\nproxy = 8000\n").2, "must be a proxy URL string, got 8000");
        assert_eq!(err("exits_file = [\"a\"]\n").2, "must be a path (relative to this file), got an array");
        assert_eq!(err("exit = 5\n").2, "must be [[exit]] tables, got 5");
        assert_eq!(err("[exit.tags]\na = \"b\"\n").2, "must be [[exit]] tables, got a table");
        assert_eq!(err("gateway = \"gw\"\n").2, "must be [[gateway]] tables, got the string \"gw\"");
    }

    const GATEWAY: &str = "[[exit]]\nid = \"dc-1\"\nproxy = \"http://10.0.0.7:3128\"\n\n[[gateway]]\nid = \"resi\"\n\
        proxy = \"http://customer-c1:s3cret@gw.provider.example:7777\"\nslots = 3\n\
        username = \"{user}-cc-{country}-session-{session}\"\nlifetime = 600\nmargin = 30\ncapacity = 2\n\
        rebind = true\nsession_alphabet = \"lower\"\nsession_length = 12\ntags = { country = \"de\" }\n";

    #[test]
    fn a_gateway_table_takes_every_keyword_of_gateway() {
        let f = ConfigFile::parse(GATEWAY).unwrap();
        let (spec, g) = &f.gateways[0];
        assert_eq!(
            (g.id.as_str(), g.slots, g.lifetime, g.margin, g.capacity, g.rebind, g.length),
            ("resi", 3, Some(600.0), 30.0, 2, true, 12)
        );
        assert_eq!(g.alphabet.name(), "lower");
        assert_eq!(spec.tags, [("country".to_owned(), "de".to_owned())]);
        let exit = g.slot_exit(1, 7, 0);
        assert_eq!(exit.proxy.username().unwrap(), format!("customer-c1-cc-de-session-{}", g.token(1, 7)));
        let all = f.all_exits(Vec::new()).unwrap();
        assert_eq!(all.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), ["dc-1"]);
        let preset = "[[gateway]]\nid = \"ox\"\nproxy = \"http://c:pw@pr.oxylabs.io:7777\"\nslots = 2\npreset = \"oxylabs\"\n";
        let f = ConfigFile::parse(preset).unwrap();
        assert_eq!(f.gateways[0].1.lifetime, Some(600.0));
        assert!(f.all_exits(Vec::new()).unwrap().is_empty(), "a file of gateways alone has exits enough");
    }

    #[test]
    fn a_bad_gateway_value_names_its_key_and_line_with_the_password_masked() {
        let cases: [(&str, &str, &str, usize, &str); 9] = [
            ("slots = 3", "slots = 0", "gateway[0].slots", 8, "slots 0 is outside 1..=100000"),
            ("margin = 30", "margin = 600", "gateway[0].margin", 11, "margin 600 must be"),
            ("lifetime = 600", "lifetime = 0.5", "gateway[0].lifetime", 10, "lifetime 0.5 must be"),
            ("capacity = 2", "capacity = 0", "gateway[0].capacity", 12, "capacity 0 is outside"),
            ("session_length = 12", "session_length = 99", "gateway[0].session_length", 15, "session_length 99 is outside"),
            ("session_alphabet = \"lower\"", "session_alphabet = \"hex\"", "gateway[0].session_alphabet", 14, "session_alphabet \"hex\""),
            ("-session-{session}", "-{city}-{session}", "gateway[0].username", 9, "names the tag {city}"),
            ("slots = 3", "slots = 3\npreset = \"nope\"", "gateway[0].preset", 9, "preset \"nope\" is not one of"),
            ("gw.provider.example:7777", "gw.provider.example:99999", "gateway[0].proxy", 7, "99999"),
        ];
        for (from, to, loc, line, needle) in cases {
            let (l, n, problem) = err(&GATEWAY.replace(from, to));
            assert_eq!((l.as_str(), n), (loc, Some(line)), "{problem}");
            assert!(problem.contains(needle) && !problem.contains("s3cret"), "{needle:?} not in {problem:?}");
        }
        let (l, n, problem) = err(&GATEWAY.replace("slots = 3", "slots = 3\npassword = \"s3cret_{bad name}\""));
        assert_eq!((l.as_str(), n), ("gateway[0].password", Some(9)));
        assert!(problem.contains("password template: unknown placeholder") && !problem.contains("s3cret"), "{problem}");
        let (l, _, problem) = err(&GATEWAY.replace("slots = 3", "slots = \"3\""));
        assert_eq!((l.as_str(), problem.as_str()), ("gateway[0].slots", "must be a whole number, got the string \"3\""));
        let (l, _, problem) = err(&GATEWAY.replace("rebind = true", "rebnd = true"));
        assert!(l == "gateway[0].rebnd" && problem.contains("session_alphabet"), "{problem}");
        assert_eq!(err(&GATEWAY.replace("slots = 3\n", "")).0, "gateway[0]");
    }

    #[test]
    fn an_id_used_twice_across_exits_and_gateways_names_both() {
        let f = ConfigFile::parse(&GATEWAY.replace("\"dc-1\"", "\"resi-2\"")).unwrap();
        let e = f.all_exits(Vec::new()).unwrap_err();
        assert_eq!((dotted(&e.loc), e.line), ("gateway[0]".into(), Some(5)));
        assert_eq!(e.problem, "duplicate exit id \"resi-2\" (gateway[0], slot 2 of gateway \"resi\"; also at exit[0])");
        let twice = format!("{GATEWAY}{}", &GATEWAY[GATEWAY.find("[[gateway]]").unwrap()..]);
        let e = ConfigFile::parse(&twice).unwrap().all_exits(Vec::new()).unwrap_err();
        assert_eq!((dotted(&e.loc), e.problem.as_str()), ("gateway[1]".into(), "duplicate gateway id \"resi\" (also at gateway[0])"));
        let listed = vec![Exit::new("resi-0", "http://10.0.0.9:1", None, 1, Vec::new()).unwrap()];
        let e = ConfigFile::parse(GATEWAY).unwrap().all_exits(listed).unwrap_err();
        assert!(e.problem.ends_with("also at exits_file)"), "{}", e.problem);
    }

    #[test]
    fn a_core_refusal_is_placed_at_the_key_the_file_wrote() {
        let f = ConfigFile::parse("[health]\nconsecutive = 5\nmin_calls = 30\n").unwrap();
        let e = f.settings.health.as_ref().unwrap().validate().unwrap_err();
        let placed = f.place(&e);
        assert_eq!((dotted(&placed.loc), placed.line), ("health.min_calls".into(), Some(3)));
        let f = ConfigFile::parse("[health]\nwindow = 70\n").unwrap();
        let placed = f.place(&f.settings.health.as_ref().unwrap().validate().unwrap_err());
        assert_eq!(
            (dotted(&placed.loc), placed.line, placed.problem.as_str()),
            ("health.window".into(), Some(2), "70 must be 1..=64 and min_calls 10 at most the window")
        );
    }
}
