//! Where in the file an error is: the key path ([`Seg`]s) and line, carried as data, and the
//! words serde's errors are put in (every value shown masked).

use crate::mask::shown;
use serde::de;
use std::fmt;

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
    pub(super) fn within(mut self, seg: Seg, line: usize) -> Located {
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
pub(super) fn unexpected(u: de::Unexpected<'_>) -> String {
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
pub(super) fn expected(v: &dyn de::Expected) -> String {
    v.to_string()
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
