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
use crate::health::HealthConfig;
use crate::mask::shown;
use crate::proxy::ProxyUrl;
use crate::warmup::WarmupConfig;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
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

/// `exit` is only ever `[[exit]]` tables: `exit = 5` or a bare `[exit.tags]` is told so.
fn exit_tables<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<Vec<ExitTable>>, D::Error> {
    struct Tables;
    impl<'de> Visitor<'de> for Tables {
        type Value = Vec<ExitTable>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("[[exit]] tables")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<ExitTable>, A::Error> {
            let mut out = Vec::new();
            while let Some(t) = seq.next_element()? {
                out.push(t);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(Tables).map(Some)
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
    pub calibrate: Option<bool>,
    pub store: Option<String>,
    pub namespace: Option<String>,
    #[serde(default, deserialize_with = "path_text")]
    pub exits_file: Option<String>,
    #[serde(default, deserialize_with = "exit_tables")]
    pub exit: Option<Vec<ExitTable>>,
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
        let mut file = ConfigFile { settings, exits: Vec::new(), lines };
        for (i, table) in exits.into_iter().enumerate() {
            let exit = file.exit(i, table)?;
            file.exits.push(exit);
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

    /// The exits of the file: those of `exits_file` (read by the caller) then the tables'; an
    /// id used twice, or no exit at all, is an error.
    pub fn all_exits(&self, listed: Vec<Exit>) -> Result<Vec<Exit>, Located> {
        let mut seen: HashMap<String, Vec<Seg>> = HashMap::new();
        let from_list = listed.len();
        let mut out = listed;
        out.extend(self.exits.iter().cloned());
        for (n, e) in out.iter().enumerate() {
            let loc = if n < from_list { vec![key("exits_file")] } else { vec![key("exit"), Seg::Index(n - from_list)] };
            if let Some(first) = seen.get(&e.id) {
                return Err(self.at(loc, format!("duplicate exit id {} (also at {})", shown(&e.id), dotted(first))));
            }
            seen.insert(e.id.clone(), loc);
        }
        if out.is_empty() {
            let loc = if self.settings.exits_file.is_some() { vec![key("exits_file")] } else { Vec::new() };
            return Err(self.at(loc, "no exits: set exits_file or add [[exit]] tables"));
        }
        Ok(out)
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
