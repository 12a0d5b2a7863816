//! What a lease attempt answers: a grant and how its exit was chosen, or why there is none;
//! and the pool's lease counts.

use crate::exit::Exit;
use crate::health::State as Health;
use crate::lease::LeaseId;
use crate::select::Strategy;
use std::sync::Arc;

/// Why a lease could not be granted now.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// Every candidate exit is at `max_leases`; waiting may help.
    Full,
    /// The view has no exit in service at all.
    NoExits,
    /// Every exit that could serve is quarantined or dead for this lease's site: waiting
    /// for a release would not help.
    OutOfService,
    /// Slow down for this site: retry after `wait` seconds. `why` says which rule asked.
    Cooling { wait: f64, why: &'static str },
    /// The key's pairing with its exit is new and must wait this long.
    WarmingUp { retry_after: f64, exit_id: String },
    /// The key's live session is bound to an exit that cannot serve it.
    SessionExitLost { key: String, exit_id: String, why: &'static str },
}

pub(super) const LRU_COOLDOWN: &str = "every exit used this site within the lru cooldown";
pub(super) const RATE_LIMITED_ONE: &str = "the session's exit was rate-limited by this site (429)";
pub(super) const RATE_LIMITED_ALL: &str = "every exit that could serve was rate-limited by this site (429)";
/// Why a session ended when its gateway slot's token rotated under it: the provider's
/// session is over, so the pool's is too (the key's next lease binds afresh).
pub const TOKEN_ROTATED: &str = "its gateway session expired (token rotated)";
/// Why a lease waits for pacing: the exit (a session's) or every exit that could serve has
/// spent its request budget for the site (see `Refusal::paced`).
pub const PACED_ONE: &str = "the session's exit has no request budget left for this site (pacing)";
pub const PACED_ALL: &str = "every exit that could serve has no request budget left for this site (pacing)";
pub(super) const INCIDENT: &str = "this site has an open incident, so its leases are spaced out";

impl Refusal {
    /// The wait a pacing refusal asks for: waiting it out gets the lease (budget frees by
    /// time alone), so the sync acquire waits it within its timeout as it waits for a slot.
    #[inline]
    pub fn paced(&self) -> Option<f64> {
        match self {
            Refusal::Cooling { wait, why } if *why == PACED_ONE || *why == PACED_ALL => Some(*wait),
            _ => None,
        }
    }
}

/// How a lease's exit was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// The key's live session.
    Session,
    /// A new session, from the ring.
    Ring,
    /// A new session that walked past loaded exits (bounded loads).
    Bounded,
    /// A new session whose ring exit could not serve the site, so the next one clockwise did.
    Next,
    /// A keyless lease, by the pool's strategy.
    Strategy(Strategy),
}

impl Choice {
    pub fn name(self) -> &'static str {
        match self {
            Choice::Session => "session",
            Choice::Ring => "ring",
            Choice::Bounded => "ring_bounded",
            Choice::Next => "ring_next",
            Choice::Strategy(s) => s.name(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Grant {
    pub id: LeaseId,
    pub exit: Arc<Exit>,
    pub choice: Choice,
    /// The exit's health for the lease's site when it was chosen.
    pub state: Health,
    /// Seconds spent waiting for a slot.
    pub waited: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub acquired: u64,
    pub released: u64,
    pub expired: u64,
    /// Releases that arrived after expiry or twice, and were ignored.
    pub ignored_releases: u64,
    pub outcomes: [u64; 8],
    pub waits: u64,
    /// Idle sessions ended early to keep `max_sessions`.
    pub evicted_sessions: u64,
    /// Warm-up pairings forgotten early to keep `max_pairings`.
    pub evicted_pairings: u64,
}
