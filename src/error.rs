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
}

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadInput(m) | Error::BadProxy(m) | Error::Empty(m) => f.write_str(m),
            Error::DuplicateExit(id) => write!(f, "duplicate exit id {}", crate::mask::shown(id)),
            Error::UnknownExit(id) => write!(f, "no exit with id {}", crate::mask::shown(id)),
        }
    }
}

impl std::error::Error for Error {}
