//! A serde deserializer over `toml`'s spanned tree, so that every message is ours (values
//! masked, integers read whole) and every error knows its key path; and the line of every key.

use super::located::{expected, Located, Seg};
use crate::mask::shown;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use std::collections::HashMap;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

pub(super) fn collect_lines(text: &str, table: &DeTable<'_>, at: &mut Vec<Seg>, out: &mut HashMap<Vec<Seg>, usize>) {
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
pub(super) struct Node<'a, 'i> {
    text: &'a str,
    value: Option<&'a Spanned<DeValue<'i>>>,
    table: Option<&'a DeTable<'i>>,
}

impl<'a, 'i> Node<'a, 'i> {
    pub(super) fn table(text: &'a str, doc: &'a Spanned<DeTable<'i>>) -> Node<'a, 'i> {
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

pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}
