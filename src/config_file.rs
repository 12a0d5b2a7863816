//! `Pool.from_config`'s TOML file, read with serde: the keywords of `Pool(...)` at the top
//! level, `[health]` and `[warmup]` as the core's own configuration objects, and `[[exit]]`
//! tables. Every error carries its key path and line as data ([`Located`]): the path comes from
//! where the deserializer stands, the line from the span `toml` keeps for every key.
//!
//! The deserializer here walks `toml`'s spanned tree itself so that every message is ours:
//! values are shown masked (a proxy URL pasted into the wrong key keeps its password), and
//! integers are read whole, so that the core can name its own range for any size.

use crate::error::Error;
use crate::exit::{validate_capacity, validate_id, Exit};
use crate::health::HealthConfig;
use crate::mask::shown;
use crate::proxy::ProxyUrl;
use crate::warmup::WarmupConfig;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// One step of a key path: a key, or an index in an array of tables.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// A problem at a key of the file: `loc` (empty for the whole file), its line when known.
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    pub loc: Vec<Seg>,
    pub line: Option<usize>,
    pub problem: String,
}

impl Located {
    fn within(mut self, seg: Seg, line: usize) -> Located {
        self.loc.insert(0, seg);
        self.line.get_or_insert(line);
        self
    }
}

impl fmt::Display for Located {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.problem)
    }
}

impl std::error::Error for Located {}

impl de::Error for Located {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Located { loc: Vec::new(), line: None, problem: msg.to_string() }
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        Located {
            loc: vec![Seg::Key(field.to_owned())],
            line: None,
            problem: format!("unknown key (the keys are {})", expected.join(", ")),
        }
    }

    fn missing_field(field: &'static str) -> Self {
        <Located as de::Error>::custom(format_args!("needs {field}"))
    }

    // serde's own wording would show a string as written: a proxy URL pasted into the wrong key
    // would show its password. Every value a message shows goes through `unexpected`.
    fn invalid_type(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        <Located as de::Error>::custom(format_args!("must be {exp}, got {}", unexpected(unexp)))
    }

    fn invalid_value(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        <Located as de::Error>::invalid_type(unexp, exp)
    }
}

/// A value as a message shows it: strings masked, the rest in the file's words.
fn unexpected(u: de::Unexpected<'_>) -> String {
    match u {
        de::Unexpected::Str(s) => format!("the string {}", shown(s)),
        de::Unexpected::Char(c) => format!("the string {}", shown(&c.to_string())),
        de::Unexpected::Map => "a table".into(),
        de::Unexpected::Seq => "an array".into(),
        de::Unexpected::Bytes(_) => "bytes".into(),
        de::Unexpected::Bool(b) => b.to_string(),
        de::Unexpected::Signed(n) => n.to_string(),
        de::Unexpected::Unsigned(n) => n.to_string(),
        de::Unexpected::Float(x) => x.to_string(),
        other => other.to_string(),
    }
}

/// What a visitor expects, in its own words (`a proxy URL string`).
fn expected(v: &dyn de::Expected) -> String {
    v.to_string()
}

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

/// `health.window`, `exit[1].proxy`; a key that is no bare word is shown quoted and masked.
pub fn dotted(loc: &[Seg]) -> String {
    let mut out = String::new();
    for seg in loc {
        match seg {
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
            Seg::Key(k) => {
                let bare = !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&if bare { k.clone() } else { shown(k) });
            }
        }
    }
    if out.is_empty() {
        "(top level)".into()
    } else {
        out
    }
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

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
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

fn collect_lines(text: &str, table: &DeTable<'_>, at: &mut Vec<Seg>, out: &mut HashMap<Vec<Seg>, usize>) {
    for (k, v) in table.iter() {
        at.push(Seg::Key(k.get_ref().to_string()));
        out.entry(at.clone()).or_insert(line_of(text, k.span().start));
        collect_value(text, v, at, out);
        at.pop();
    }
}

fn collect_value(text: &str, v: &Spanned<DeValue<'_>>, at: &mut Vec<Seg>, out: &mut HashMap<Vec<Seg>, usize>) {
    match v.get_ref() {
        DeValue::Table(t) => collect_lines(text, t, at, out),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                at.push(Seg::Index(i));
                out.entry(at.clone()).or_insert(line_of(text, item.span().start));
                collect_value(text, item, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

/// A value of the spanned tree as serde sees it.
struct Node<'a, 'i> {
    text: &'a str,
    value: Option<&'a Spanned<DeValue<'i>>>,
    table: Option<&'a DeTable<'i>>,
}

impl<'a, 'i> Node<'a, 'i> {
    fn table(text: &'a str, doc: &'a Spanned<DeTable<'i>>) -> Node<'a, 'i> {
        Node { text, value: None, table: Some(doc.get_ref()) }
    }

    fn value(text: &'a str, value: &'a Spanned<DeValue<'i>>) -> Node<'a, 'i> {
        let table = match value.get_ref() {
            DeValue::Table(t) => Some(t),
            _ => None,
        };
        Node { text, value: Some(value), table }
    }

    /// The value as a message shows it: numbers and booleans as written, strings masked.
    fn kind(&self) -> String {
        match self.value.map(|v| v.get_ref()) {
            None | Some(DeValue::Table(_)) => "a table".into(),
            Some(DeValue::Array(_)) => "an array".into(),
            Some(DeValue::Boolean(b)) => b.to_string(),
            Some(DeValue::Integer(n)) => n.to_string(),
            Some(DeValue::Float(x)) => x.as_str().to_owned(),
            Some(DeValue::String(s)) => format!("the string {}", shown(s)),
            Some(DeValue::Datetime(_)) => "a date or time".into(),
        }
    }

    fn wrong(&self, what: &str) -> Located {
        <Located as de::Error>::custom(format_args!("must be {what}, got {}", self.kind()))
    }

    fn integer(&self) -> Option<i128> {
        match self.value.map(|v| v.get_ref()) {
            Some(DeValue::Integer(n)) => i128::from_str_radix(&n.as_str().replace('_', ""), n.radix()).ok(),
            _ => None,
        }
    }

    fn float(&self) -> Option<f64> {
        match self.value.map(|v| v.get_ref()) {
            Some(DeValue::Float(x)) => x.as_str().replace('_', "").parse().ok(),
            Some(DeValue::Integer(_)) => self.integer().map(|n| n as f64),
            _ => None,
        }
    }

    fn whole<T: TryFrom<i128>>(&self) -> Result<T, Located> {
        let n = self.integer().ok_or_else(|| self.wrong("a whole number"))?;
        T::try_from(n).map_err(|_| <Located as de::Error>::custom(format_args!("{n} is outside 0..={}", u32::MAX)))
    }
}

impl<'de, 'a, 'i> de::Deserializer<'de> for Node<'a, 'i> {
    type Error = Located;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Located> {
        if let Some(t) = self.table {
            return v.visit_map(Entries { text: self.text, iter: t.iter(), pending: None });
        }
        match self.value.map(|x| x.get_ref()) {
            Some(DeValue::Boolean(b)) => v.visit_bool(*b),
            Some(DeValue::Integer(_)) => match self.integer().and_then(|n| i64::try_from(n).ok()) {
                Some(n) => v.visit_i64(n),
                None => Err(self.wrong("an integer that fits 64 bits")),
            },
            Some(DeValue::Float(_)) => v.visit_f64(self.float().unwrap_or(f64::NAN)),
            Some(DeValue::String(s)) => v.visit_str(s),
            Some(DeValue::Array(items)) => v.visit_seq(Items { text: self.text, iter: items.iter().enumerate() }),
            _ => Err(self.wrong("a value")),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Located> {
        match self.value.map(|x| x.get_ref()) {
            Some(DeValue::Boolean(b)) => v.visit_bool(*b),
            _ => Err(self.wrong("true or false")),
        }
    }

    fn deserialize_f64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Located> {
        match self.float() {
            Some(x) => v.visit_f64(x),
            None => Err(self.wrong("a number")),
        }
    }

    fn deserialize_u32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Located> {
        v.visit_u32(self.whole()?)
    }

    fn deserialize_i128<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Located> {
        v.visit_i128(self.whole()?)
    }

    fn deserialize_i64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Located> {
        v.visit_i64(self.whole()?)
    }

    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Located> {
        match self.value.map(|x| x.get_ref()) {
            Some(DeValue::String(s)) => v.visit_str(s),
            _ => Err(self.wrong(&expected(&v))),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Located> {
        self.deserialize_string(v)
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Located> {
        v.visit_some(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Located> {
        match self.value.map(|x| x.get_ref()) {
            Some(DeValue::Array(items)) if items.iter().all(|i| i.get_ref().is_table()) => {
                v.visit_seq(Items { text: self.text, iter: items.iter().enumerate() })
            }
            _ => Err(self.wrong(&expected(&v))),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Located> {
        match self.table {
            Some(t) => v.visit_map(Entries { text: self.text, iter: t.iter(), pending: None }),
            None => Err(self.wrong("a table")),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(self, name: &'static str, _f: &'static [&'static str], v: V) -> Result<V::Value, Located> {
        match self.table {
            Some(_) => self.deserialize_map(v),
            None if name == "HealthConfig" => Err(self.wrong("a [health] table")),
            None => Err(self.wrong("a table")),
        }
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 u8 u16 u64 u128 f32 char bytes byte_buf unit unit_struct newtype_struct tuple tuple_struct enum identifier ignored_any
    }
}

struct Entries<'a, 'i, I> {
    text: &'a str,
    iter: I,
    pending: Option<(Seg, usize, &'a Spanned<DeValue<'i>>)>,
}

impl<'de, 'a, 'i: 'a, I> MapAccess<'de> for Entries<'a, 'i, I>
where
    I: Iterator<Item = (&'a Spanned<std::borrow::Cow<'i, str>>, &'a Spanned<DeValue<'i>>)>,
{
    type Error = Located;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Located> {
        let Some((k, v)) = self.iter.next() else { return Ok(None) };
        let line = line_of(self.text, k.span().start);
        let name: &str = k.get_ref();
        self.pending = Some((Seg::Key(name.to_owned()), line, v));
        seed.deserialize(name.into_deserializer()).map(Some).map_err(|e: Located| Located { line: Some(line), ..e })
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Located> {
        let (seg, line, v) = self.pending.take().expect("a value follows its key");
        seed.deserialize(Node::value(self.text, v)).map_err(|e| e.within(seg, line))
    }
}

struct Items<'a, I> {
    text: &'a str,
    iter: I,
}

impl<'de, 'a, 'i: 'a, I> SeqAccess<'de> for Items<'a, I>
where
    I: Iterator<Item = (usize, &'a Spanned<DeValue<'i>>)>,
{
    type Error = Located;

    fn next_element_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, Located> {
        let Some((i, v)) = self.iter.next() else { return Ok(None) };
        let line = line_of(self.text, v.span().start);
        seed.deserialize(Node::value(self.text, v)).map(Some).map_err(|e| e.within(Seg::Index(i), line))
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
