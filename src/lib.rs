//! exitpool's core: which exit should this account use, and is that exit still fit to serve.
//!
//! Plain Rust with no knowledge of Python; `src/py/` wraps it behind the `python` feature.

pub mod error;
pub mod exit;
pub mod hash;
pub mod proxy;
pub mod proxy_list;
pub mod ring;

#[cfg(feature = "python")]
mod py;

pub use error::{Error, Result};
pub use exit::Exit;
pub use proxy::ProxyUrl;
pub use ring::Ring;
