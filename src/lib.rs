//! exitpool's core: which exit should this account use, and is that exit still fit to serve.
//!
//! Plain Rust with no knowledge of Python; `src/py/` wraps it behind the `python` feature.
//! Every module is private: the public API is what this file re-exports.
//!
//! Module dependencies run one way, without cycles: `seed`, `hash`, `events` and
//! `proxy_syntax` use no other module; `mask` uses `proxy_syntax`; `error` uses `mask`; the
//! rest build on those; `store` uses `health`; `pacing` uses `outcome`; `pool` uses everything but the proxy parsers;
//! `acquire` (waiting for a slot) builds on `pool`.

mod acquire;
mod bound;
mod clock;
mod config_file;
mod error;
mod events;
mod exit;
mod fork;
mod gateway;
mod hash;
mod health;
mod lease;
mod mask;
mod metrics;
mod outcome;
mod pacing;
mod persist;
mod pool;
mod prefetch;
mod proxy;
mod proxy_list;
mod proxy_syntax;
mod ring;
mod seed;
mod select;
mod session;
mod store;
mod warmup;

#[cfg(feature = "python")]
mod py;

pub use acquire::{avoid_list, wait_budget, wait_for_slot, waits_for, WaitStart, INTERRUPT_CHECK};
pub use clock::{check_wait, Clock, ManualClock, SystemClock};
pub use config_file::{dotted, ConfigFile, ExitTable, Located, Seg, Settings, Warmup};
pub use error::{Error, Result, Setting};
pub use events::Delivered;
pub use exit::Exit;
pub use gateway::presets::{Preset, ALL as PRESETS};
pub use gateway::token::Alphabet;
pub use gateway::{Gateway, GatewayLink, GatewaySpec, MAX_SLOTS};
pub use health::{Breaker, Ejection, HealthConfig, Reason, Signal, State, Transition};
pub use lease::LeaseId;
pub use mask::{mask_raw, scrub, MASK};
pub use metrics::Tally;
pub use outcome::{ErrorKind, Outcome, Report, BLOCK_STATUSES};
pub use pacing::{PacingConfig, Rate};
pub use pool::{
    after_fork, before_fork, check_max_keys, check_max_leases, Cell, Choice, Config, Counts, EventRecord, ExitRecord, GatewayRecord, Grant,
    GroupFigures, Member, PaceRecord, Pool, PoolFigures, Recalibration, Refusal, Selection, SiteRecord, SlotToken, Snapshot,
    SnapshotDocument, Update, COOLING, DEFAULT_MAX_KEYS, RENEW_SLACK, TOKEN_ROTATED,
};
pub use proxy::ProxyUrl;
pub use proxy_list::parse as parse_proxy_list;
pub use proxy_syntax::Scheme;
pub use ring::{check_capacities, Ring, DEFAULT_REPLICAS, DEFAULT_SALT, MAX_POINTS, MAX_REPLICAS};
pub use select::Strategy;
pub use store::{
    flush_all, open as open_store, ExitCounts, MemoryStore, Pace, RedisStore, Store, StoreError, StoreResult, Take, Taken, Verdict,
};
pub use warmup::WarmupConfig;
