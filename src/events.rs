//! Events: every state change and notable decision, with its reason in words and figures, in
//! a bounded buffer that readers page through by sequence number.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    StateChanged,
    EjectionRefused,
    SiteIncidentOpened,
    SiteIncidentClosed,
    GlobalIncidentOpened,
    GlobalIncidentClosed,
    SessionLost,
    LeaseExpired,
    WarmingUp,
    Benched,
    Unbenched,
    Recalibrated,
    Drifted,
    ProbeFailed,
    /// The shared store stopped answering: this worker serves from its own state.
    StoreUnavailable,
    /// The shared store answers again: this worker rejoins the fleet.
    StoreRejoined,
    /// Idle sessions ended early to keep `max_sessions`.
    SessionsEvicted,
    /// Warm-up pairings forgotten early to keep `max_pairings`.
    PairingsEvicted,
    /// A gateway (an exit group) failed as a whole: its breaker took all its slots out.
    GatewayDown,
    /// A gateway's breaker closed: all its slots are back.
    GatewayUp,
    /// A gateway answered 407: its credentials are wrong (configuration, not a bad exit), and
    /// its breaker took all its slots out.
    GatewayCredentialsRejected,
    /// A gateway slot moved to its next token (its sessions end at their next lease).
    TokenRotated,
    /// A probe saw a gateway slot present a new IP within one token's lifetime: the provider
    /// did not hold the session's exit.
    StickyBroken,
    /// Fewer than `panic_threshold` of the exits are in service: the pool serves from all of
    /// them (`to` "panic"), or is back above it (`to` "normal").
    Panic,
    /// `Pool::update` applied a new list of exits (or a watched list could not be read).
    ExitsUpdated,
    /// A watched list or config file changed but could not be read: the old list stays.
    ExitsReloadFailed,
    /// `state=`: the saved state was resumed; there was none yet; or it could not be used
    /// (unreadable, corrupt, foreign) and the pool started clean.
    StateResumed,
    StateNew,
    StateDiscarded,
    /// `state=`: a save failed (the pool carries on; the next save tries again).
    StateSaveFailed,
    /// A site answered an exit 429: that (exit, site) pair's learned rate was cut (pacing).
    PaceDecreased,
}

impl EventKind {
    pub fn name(self) -> &'static str {
        match self {
            EventKind::StateChanged => "state_changed",
            EventKind::EjectionRefused => "ejection_refused",
            EventKind::SiteIncidentOpened => "site_incident_opened",
            EventKind::SiteIncidentClosed => "site_incident_closed",
            EventKind::GlobalIncidentOpened => "global_incident_opened",
            EventKind::GlobalIncidentClosed => "global_incident_closed",
            EventKind::SessionLost => "session_lost",
            EventKind::LeaseExpired => "lease_expired",
            EventKind::WarmingUp => "warming_up",
            EventKind::Benched => "benched",
            EventKind::Unbenched => "unbenched",
            EventKind::Recalibrated => "recalibrated",
            EventKind::Drifted => "exit_drifted",
            EventKind::ProbeFailed => "probe_failed",
            EventKind::StoreUnavailable => "store_unavailable",
            EventKind::StoreRejoined => "store_rejoined",
            EventKind::SessionsEvicted => "sessions_evicted",
            EventKind::PairingsEvicted => "pairings_evicted",
            EventKind::GatewayDown => "gateway_down",
            EventKind::GatewayUp => "gateway_up",
            EventKind::GatewayCredentialsRejected => "gateway_credentials_rejected",
            EventKind::TokenRotated => "token_rotated",
            EventKind::StickyBroken => "sticky_broken",
            EventKind::Panic => "panic",
            EventKind::ExitsUpdated => "exits_updated",
            EventKind::ExitsReloadFailed => "exits_reload_failed",
            EventKind::StateResumed => "state_resumed",
            EventKind::StateNew => "state_new",
            EventKind::StateDiscarded => "state_discarded",
            EventKind::StateSaveFailed => "state_save_failed",
            EventKind::PaceDecreased => "pace_decreased",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub seq: u64,
    pub time: f64,
    pub kind: EventKind,
    /// Exit handle and site id; the pool turns them into names.
    pub exit: Option<u32>,
    pub site: Option<u32>,
    /// A breaker's change of state, by name.
    pub from: Option<&'static str>,
    pub to: Option<&'static str>,
    pub message: String,
}

pub struct Events {
    buf: VecDeque<Event>,
    cap: usize,
    next: u64,
    /// `next`, readable without the pool's lock, so that "anything new?" costs one load.
    published: Arc<AtomicU64>,
}

impl Events {
    pub fn new(cap: usize) -> Events {
        Events { buf: VecDeque::with_capacity(cap.min(1024)), cap, next: 0, published: Arc::new(AtomicU64::new(0)) }
    }

    pub fn push(&mut self, time: f64, kind: EventKind, exit: Option<u32>, site: Option<u32>, message: String) {
        self.push_event(Event { seq: 0, time, kind, exit, site, from: None, to: None, message });
    }

    /// Appends an event, numbering it.
    pub fn push_event(&mut self, mut e: Event) {
        e.seq = self.next;
        self.next += 1;
        self.published.store(self.next, Ordering::Release);
        if self.buf.len() == self.cap {
            self.buf.pop_front();
        }
        self.buf.push_back(e);
    }

    /// Events with a sequence number of at least `since`, oldest first.
    pub fn since(&self, since: u64) -> impl Iterator<Item = &Event> {
        let skip = self.buf.front().map_or(0, |f| since.saturating_sub(f.seq) as usize);
        self.buf.iter().skip(skip)
    }

    /// The sequence number the next event will get.
    #[cfg(test)]
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// A lock-free view of `next_seq`.
    pub fn published(&self) -> Arc<AtomicU64> {
        self.published.clone()
    }
}

/// Which events a reader (the bindings' logger and callbacks) has handed on, so that each
/// event is delivered once however many threads notice it: the first to see new events claims
/// them all; the others, and later calls with nothing new, get nothing.
#[derive(Debug, Default)]
pub struct Delivered(AtomicU64);

impl Delivered {
    /// The range of events up to `published` (a `next_seq`) that this caller now owns, if
    /// any: exactly that range, since another thread may already own the events after it.
    /// Costs one atomic load when nothing happened, which is nearly always.
    #[inline]
    pub fn claim(&self, published: u64) -> Option<std::ops::Range<u64>> {
        let from = self.0.load(Ordering::Acquire);
        if published <= from || self.0.compare_exchange(from, published, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return None;
        }
        Some(from..published)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_range_is_claimed_once() {
        let d = Delivered::default();
        assert_eq!(d.claim(0), None, "nothing published");
        assert_eq!(d.claim(3), Some(0..3));
        assert_eq!(d.claim(3), None, "claimed already");
        assert_eq!(d.claim(2), None, "an older view claims nothing");
        assert_eq!(d.claim(5), Some(3..5));
    }

    #[test]
    fn racing_claimers_share_out_every_event_once() {
        let d = Delivered::default();
        let claimed = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (d, claimed) = (&d, &claimed);
                s.spawn(move || {
                    for seq in 1..=1000u64 {
                        if let Some(r) = d.claim(seq + t % 2) {
                            claimed.lock().unwrap().extend(r);
                        }
                    }
                });
            }
        });
        let mut all = claimed.into_inner().unwrap();
        all.sort();
        assert_eq!(all, (0..1001).collect::<Vec<u64>>());
    }

    #[test]
    fn bounded_and_paged_by_sequence() {
        let mut ev = Events::new(3);
        for i in 0..5 {
            ev.push(i as f64, EventKind::Benched, None, None, format!("e{i}"));
        }
        let all: Vec<u64> = ev.since(0).map(|e| e.seq).collect();
        assert_eq!(all, [2, 3, 4]);
        let later: Vec<u64> = ev.since(4).map(|e| e.seq).collect();
        assert_eq!(later, [4]);
        assert_eq!(ev.since(9).count(), 0);
        assert_eq!(ev.next_seq(), 5);
    }
}
