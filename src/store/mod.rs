//! The fleet's shared state: the one seam through which pools in many processes agree.
//!
//! A pool always keeps its own state in memory; that is all a single process needs, and it is
//! what a fleet falls back on when the shared store cannot be reached. With a store, the
//! decisions that must agree across workers are made where the store lives, each one atomic:
//! taking a lease slot under the fleet-wide ceiling (with the key's sticky session and warm-up
//! pairing), giving it back, and publishing a health verdict under the fleet-wide ejection cap.
//! The ring needs none of this: every worker computes the same assignment from the same exits.
//!
//! Two implementations pass one behavioural suite (`tests/store.rs`): `MemoryStore`, shared by
//! the pools of one process, and `RedisStore`, shared by every process that names the same
//! server and namespace. Both keep time by their own clock (Redis's `TIME` for Redis), since
//! workers' clocks do not agree; durations cross the seam, never instants.

mod memory;
mod redis;

pub use self::memory::MemoryStore;
pub(crate) use self::redis::before_fork;
pub use self::redis::{flush_all, RedisStore};

use crate::error::{Error, Result};
use crate::health::State;
use crate::outcome::Outcome;
use crate::warmup::WarmupConfig;
use std::fmt;
use std::sync::Arc;

/// One request for a lease slot.
#[derive(Debug, Clone)]
pub struct Take<'a> {
    /// The account; with a live session on another exit than the candidate, `Elsewhere`.
    pub key: Option<&'a str>,
    /// Exit ids in order of preference: the first under its ceiling is taken.
    pub candidates: &'a [&'a str],
    pub max_leases: Option<u32>,
    pub lease_ttl: f64,
    pub session_ttl: f64,
    /// Whether a live session on the candidate is extended to `session_ttl`. A worker that
    /// extended it moments ago (see `pool::RENEW_SLACK`) need not again: the lease pair then
    /// saves the store a write, and the session lapses at most that slack early.
    pub renew: bool,
    pub warmup: Option<WarmupConfig>,
    /// The token generation of the first candidate (a gateway slot's; 0 for a plain exit),
    /// stored with a session bound there. A live session on it bound in an older generation
    /// lost its provider session with its token: it ends (`Rotated`), once, for the fleet.
    pub generation: u64,
    /// With `generation`: a session whose token rotated moves to the new one quietly instead.
    pub rebind: bool,
    /// The site's pacing, if it is paced: a candidate without budget is passed over.
    pub pace: Option<Pace<'a>>,
}

/// Pacing for one take: the fleet shares each (exit, site) pair's budget (its GCRA's
/// theoretical arrival time, on the store's clock); each worker spends it at the rate it
/// learned itself.
#[derive(Debug, Clone, Copy)]
pub struct Pace<'a> {
    pub site: &'a str,
    /// Per candidate, in order: the emission interval and the burst tolerance, in seconds.
    pub spacing: &'a [(f64, f64)],
}

#[derive(Debug, Clone, PartialEq)]
pub enum Taken {
    /// A slot on `exit`; `session` when a live session chose it rather than the candidates.
    Granted { exit: String, lease: u64, session: bool },
    /// Every candidate (or the session's exit) is at its ceiling.
    Full { exit: Option<String> },
    /// The key's live session is on `exit`, not on the candidate: nothing was taken or
    /// extended, so that the pool can first check the exit may serve (a session never
    /// moves; a lease the pool would refuse must not keep the session alive either).
    Elsewhere { exit: String },
    /// The pairing of key and exit is new and must wait this long (warm-up).
    WarmingUp { exit: String, wait: f64 },
    /// Every candidate with room (or the session's exit) has spent its budget for the site:
    /// the soonest one fits again in `wait` seconds (pacing).
    Paced { exit: String, wait: f64 },
    /// The key's session on `exit` was bound in an older token generation than the take's:
    /// the store ended it (nothing taken); the key's next take binds afresh.
    Rotated { exit: String },
}

/// A health verdict one worker reached, for every worker to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// `""` for a verdict about the site itself: a site incident, open (quarantined) or
    /// closed (healthy).
    pub exit: String,
    /// `""` for the exit's tunnel, else the site the verdict is about.
    pub site: String,
    pub state: State,
    /// Seconds the state holds from when it was published (a quarantine's backoff); infinite
    /// for dead, 0 for states that end by evidence rather than by time.
    pub hold: f64,
    /// Which pool published it, so that a pool does not apply its own verdicts twice.
    pub origin: u64,
    /// Store-assigned order; a pool asks for the verdicts after the last one it saw.
    pub seq: u64,
    /// A verdict on the pair's pace rather than its health: a 429 cut the rate the publisher
    /// learned for (exit, site) to this many requests a second, and `hold` is what is left of
    /// its `Retry-After`. Kept beside the pair's health verdict, never in its place, and it
    /// takes no exit out (`state` is unused).
    pub pace: Option<f64>,
}

/// Fleet-wide figures for one exit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExitCounts {
    /// Leases live now, in every process.
    pub active: u64,
    pub leases: u64,
    /// Released leases by outcome (`Outcome as usize`).
    pub outcomes: [u64; 8],
}

#[derive(Debug, Clone, PartialEq)]
pub enum StoreError {
    /// The store cannot be reached (or did not answer in time): the pool serves from its
    /// own state until it can.
    Unavailable(String),
    /// The store answered something this version does not understand.
    Protocol(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Unavailable(why) => write!(f, "store unavailable: {why}"),
            StoreError::Protocol(why) => write!(f, "store protocol error: {why}"),
        }
    }
}

pub type StoreResult<T> = std::result::Result<T, StoreError>;

pub trait Store: Send + Sync {
    /// What to call the store in messages, credentials masked.
    fn describe(&self) -> String;
    fn take(&self, t: &Take<'_>) -> StoreResult<Taken>;
    /// Ends a lease, counting its outcome (`None`: handed back unused); `false` if it had
    /// already ended (expired, or given back before).
    fn give_back(&self, exit: &str, lease: u64, outcome: Option<Outcome>) -> StoreResult<bool>;
    /// `give_back` without waiting for the answer, for callers that do not need it (a pool's
    /// release): a store over a network sends it with its next command (inside the next
    /// take's script run), or by itself within milliseconds if no command comes, so a lease
    /// pair costs one round trip instead of two.
    ///
    /// A hand-back that cannot be sent yet is kept and sent when the store answers; `Err`
    /// then says so (the release itself is done either way).
    fn hand_back(&self, exit: &str, lease: u64, outcome: Option<Outcome>) -> StoreResult<()> {
        self.give_back(exit, lease, outcome).map(drop)
    }
    /// `Err` while released leases wait to be handed back because the store did not take
    /// them: their slots stay held fleet-wide until it does, which the pool must not hide.
    fn backlog(&self) -> StoreResult<()> {
        Ok(())
    }
    /// The exit of the key's live session, if any.
    fn session(&self, key: &str) -> StoreResult<Option<String>>;
    fn end_session(&self, key: &str) -> StoreResult<bool>;
    /// Publishes a verdict; an ejection that would put more than `cap` exits out of service
    /// fleet-wide (for the verdict's site, counting tunnel ejections) is refused: `Ok(false)`.
    fn publish(&self, v: &Verdict, cap: u32) -> StoreResult<bool>;
    /// The verdicts published after `since`, the newest per (exit, site), with their holds
    /// measured from now, and the sequence number to ask from next.
    fn verdicts(&self, since: u64) -> StoreResult<(Vec<Verdict>, u64)>;
    fn counts(&self, exits: &[&str]) -> StoreResult<Vec<ExitCounts>>;
}

/// Opens the store a pool was given: `memory://NAME` (shared by the pools of this process that
/// name it, on the clock of the pool that made it, so a `ManualClock` drives its TTLs too) or
/// `redis://`, `rediss://`, `unix://`, `redis+unix://`, `redis+sentinel://`, `redis+cluster://`
/// (on the server's clock).
pub fn open(url: &str, namespace: &str, clock: Arc<dyn crate::clock::Clock>) -> Result<Arc<dyn Store>> {
    if namespace.is_empty() || namespace.len() > 200 || namespace.chars().any(|c| c.is_control() || c == '{' || c == '}') {
        return Err(Error::setting(
            &["namespace"],
            format!("{namespace:?} must be 1 to 200 characters, without braces or control characters"),
        ));
    }
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("memory") => Ok(MemoryStore::named(&url["memory://".len()..], namespace, clock)),
        Some("redis" | "rediss" | "unix" | "redis+unix" | "redis+sentinel" | "redis+cluster") => {
            Ok(Arc::new(RedisStore::open(url, namespace)?))
        }
        _ => Err(Error::setting(
            &["store"],
            format!(
                "{} is not a store URL: use memory://NAME, redis://host:port/db, rediss://..., unix:///path, \
                 redis+sentinel://host:port,host:port/master or redis+cluster://host:port,host:port",
                crate::mask::mask_raw(url)
            ),
        )),
    }
}

/// The state names that cross the seam.
pub(crate) fn state_code(s: State) -> &'static str {
    s.name()
}

pub(crate) fn state_of(name: &str) -> Option<State> {
    State::ALL.into_iter().find(|s| s.name() == name)
}

/// Whether a state takes the exit out of service for the ejection cap.
pub(crate) fn ejects(s: State) -> bool {
    s.holds_a_cap_slot()
}
