//! exitpool's core: which exit should this account use, and is that exit still fit to serve.
//!
//! Plain Rust with no knowledge of Python; `src/py/` wraps it behind the `python` feature.

pub mod acquire;
pub mod clock;
pub mod document;
pub mod error;
pub mod events;
pub mod exit;
pub mod fleet;
pub mod hash;
pub mod health;
pub mod lease;
pub mod metrics;
pub mod outcome;
pub mod pool;
pub mod proxy;
pub mod proxy_list;
pub mod ring;
pub mod select;
pub mod session;
pub mod store;
pub mod warmup;

#[cfg(feature = "python")]
mod py;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Error, Result};
pub use exit::Exit;
pub use outcome::{Outcome, Report};
pub use pool::{Config, Grant, Pool, Refusal};
pub use proxy::ProxyUrl;
pub use ring::Ring;
pub use select::Strategy;
