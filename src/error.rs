//! The core's one error type. Every message names the offending value with credentials
//! already masked, because the message travels verbatim into Python exceptions and logs.

use std::fmt;

/// What went wrong, as plain data; the bindings map each kind to one Python exception once.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// Input that can never be valid: the message names the value (masked) and the rule.
    BadInput(String),
    /// A proxy URL or proxy-list line that does not parse.
    BadProxy(String),
    /// The same exit id given twice.
    DuplicateExit(String),
    /// An exit id the pool or ring does not hold.
    UnknownExit(String),
    /// An operation that needs at least one exit met none.
    Empty(String),
    /// A setting refused, with the key it is about as data (see [`Setting`]).
    Setting(Setting),
}

/// A refused setting: the key path it is about (`["health", "window"]`), for a config file to
/// name the key and its line without reading the message. `message` names the key in words
/// ("health window 70 must be ..."); from `problem_at` on it is about the value alone.
/// `also` is the other side of a rule between two settings ("max_ejection is below
/// base_ejection"), so a file that wrote only that one is blamed there.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    pub key: Vec<&'static str>,
    pub also: Vec<&'static str>,
    pub message: String,
    pub problem_at: usize,
}

impl Error {
    /// `key` (written as words) followed by `problem`.
    pub fn setting(key: &[&'static str], problem: impl fmt::Display) -> Error {
        let message = format!("{} {problem}", key.join(" "));
        let problem_at = key.join(" ").len() + 1;
        Error::Setting(Setting { key: key.to_vec(), also: Vec::new(), message, problem_at })
    }

    /// A refusal about `key` whose message does not start with the key's name.
    pub fn setting_whole(key: &[&'static str], message: String) -> Error {
        Error::Setting(Setting { key: key.to_vec(), also: Vec::new(), message, problem_at: 0 })
    }

    /// The same refusal, naming the other setting of its rule.
    pub fn also(mut self, key: &[&'static str]) -> Error {
        if let Error::Setting(s) = &mut self {
            s.also = key.to_vec();
        }
        self
    }
}

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadInput(m) | Error::BadProxy(m) | Error::Empty(m) => f.write_str(m),
            Error::Setting(s) => f.write_str(&s.message),
            Error::DuplicateExit(id) => write!(f, "duplicate exit id {}", crate::mask::shown(id)),
            Error::UnknownExit(id) => write!(f, "no exit with id {}", crate::mask::shown(id)),
        }
    }
}

impl std::error::Error for Error {}
