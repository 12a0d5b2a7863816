//! The pool: leases, sticky sessions, keyless selection and warm-up over one set of exits.
//!
//! All state sits behind one mutex held for a few hundred nanoseconds per call; a caller that
//! must wait for a free slot sleeps on a condition variable with the lock released.
//! Views (`subset`) are extra rings and member lists over the same exits, sharing every lease,
//! session and counter with the whole pool.
//!
//! The rooms: `config` (the pool's configuration and its rules), `grant` (what a lease attempt
//! answers), `state` (the inner decision state behind the mutex), `members` (a view's exits as
//! the selection strategies see them), `exits` (adding, benching, probing and judging exits),
//! `fleet` (fleet mode: the decisions a shared store makes), `snapshot` (the records a reader
//! gets), `document` (the snapshot as one serde document, every derived figure in it),
//! `calibrate` (capacities measured from burned identities), `bound` (room under
//! `max_sessions` and `max_pairings`) and `fork` (the pools' locks
//! across a fork). This file holds the
//! pool and its lease API.

mod bound;
mod calibrate;
mod config;
mod document;
mod exits;
mod fleet;
mod fork;
mod grant;
mod members;
mod persist;
mod snapshot;
mod state;
mod update;

pub use calibrate::Recalibration;
pub use config::{check_max_keys, check_max_leases, Config, DEFAULT_MAX_KEYS};
pub use document::SnapshotDocument;
pub use fleet::RENEW_SLACK;
pub use fork::{after_fork, before_fork};
pub use grant::{Choice, Counts, Grant, Refusal, TOKEN_ROTATED};
pub use snapshot::{
    Cell, EventRecord, ExitRecord, GatewayRecord, GroupFigures, PaceRecord, PoolFigures, Selection, SiteRecord, SlotToken, Snapshot,
    COOLING,
};
pub use update::Update;

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::fork::{Condvar, Mutex};
use crate::gateway::Gateway;
use crate::health::HealthBoard;
use crate::lease::{LeaseId, Leases};
use crate::metrics::Waits;
use crate::outcome::Report;
use crate::seed::random_seed;
use crate::session::Sessions;
use crate::store::Store;
use crate::warmup::Pairings;
use fleet::{FleetLink, LinkState};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use state::{ExitSlot, State};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a pool is made of: exits, and gateways that expand into exits.
#[derive(Debug, Clone)]
pub enum Member {
    Exit(Exit),
    Gateway(Gateway),
}

impl From<Exit> for Member {
    fn from(e: Exit) -> Member {
        Member::Exit(e)
    }
}

impl From<Gateway> for Member {
    fn from(g: Gateway) -> Member {
        Member::Gateway(g)
    }
}

/// The pool's exit slots from its members, in order, and its gateways: each gateway's slots
/// in the token generation of `born` (pool clock; Unix time is `born + unix_offset`).
fn expand(members: Vec<Member>, born: f64, unix_offset: f64) -> (Vec<ExitSlot>, Vec<Arc<Gateway>>) {
    let mut slots = Vec::with_capacity(members.len());
    let mut gateways = Vec::new();
    for m in members {
        match m {
            Member::Exit(e) => slots.push(ExitSlot::new(Exit { gateway: None, ..e })),
            Member::Gateway(g) => {
                let index = gateways.len() as u32;
                let unix = born + unix_offset;
                for slot in 0..g.slots {
                    let generation = g.generation(slot, unix);
                    let rotates_at = g.rotates_at(slot, generation) - unix_offset;
                    slots.push(ExitSlot::for_gateway(g.slot_exit(slot, generation, index), generation, rotates_at));
                }
                gateways.push(Arc::new(g));
            }
        }
    }
    (slots, gateways)
}

pub struct Pool {
    state: Mutex<State>,
    freed: Condvar,
    clock: Arc<dyn Clock>,
    events_published: Arc<std::sync::atomic::AtomicU64>,
    fleet: Option<FleetLink>,
    /// Where the pool keeps its state (`state=`), if it does.
    keeper: persist::KeeperSlot,
}

impl Pool {
    pub fn new(exits: Vec<Exit>, cfg: Config, clock: Arc<dyn Clock>) -> Result<Pool> {
        Pool::of(exits.into_iter().map(Member::Exit).collect(), cfg, clock)
    }

    /// A pool of exits and gateways, in any order: each gateway's slots are exits
    /// `"{gateway_id}-{n}"` here, with the token of their generation now. An id given twice,
    /// across exits and slots alike, is refused.
    pub fn of(members: Vec<Member>, cfg: Config, clock: Arc<dyn Clock>) -> Result<Pool> {
        cfg.validate()?;
        if members.is_empty() {
            return Err(Error::BadInput("a pool needs at least one exit".into()));
        }
        let born = clock.now();
        let unix_offset = clock.unix_offset();
        let (slots, gateways) = expand(members, born, unix_offset);
        let mut by_id = HashMap::with_capacity(slots.len());
        for (i, s) in slots.iter().enumerate() {
            crate::exit::validate_capacity(s.exit.capacity.into())?;
            if by_id.insert(s.exit.id.clone(), i as u32).is_some() {
                return Err(Error::DuplicateExit(s.exit.id.clone()));
            }
        }
        let rng = SmallRng::seed_from_u64(cfg.seed.unwrap_or_else(random_seed));
        let board = HealthBoard::new(cfg.health.clone(), slots.len(), born);
        let (sessions, pairings) = (Sessions::bounded(cfg.max_sessions), Pairings::bounded(cfg.max_pairings));
        let pacer = (!cfg.pacing.is_empty()).then(|| Box::new(crate::pacing::Pacer::new(cfg.pacing.clone())));
        let mut state = State {
            cfg,
            exits: slots,
            by_id,
            views: Vec::new(),
            moved: Default::default(),
            renewed_from: 0.0,
            view_ids: HashMap::new(),
            sessions,
            leases: Leases::default(),
            pairings,
            sites: HashMap::new(),
            site_names: vec!["".into()],
            pacer,
            board,
            last_used: vec![Vec::new()],
            rng,
            counts: Counts::default(),
            waiters: 0,
            site_tallies: Vec::new(),
            waits: Waits::default(),
            rate_prev: (born, 0),
            rate_mark: (born, 0),
            gateways,
            gateway_books: Vec::new(),
            unix_offset,
        };
        // One pass over the exits, not one per gateway.
        let mut slots_of: Vec<Vec<u32>> = vec![Vec::new(); state.gateways.len()];
        for (h, slot) in state.exits.iter().enumerate() {
            if let Some(link) = slot.exit.gateway {
                slots_of[link.gateway as usize].push(h as u32);
            }
        }
        for (g, handles) in slots_of.iter().enumerate() {
            state.gateway_joined(g as u32, handles, born);
        }
        state.view(Vec::new())?;
        let events_published = state.board.events.published();
        Ok(Pool { state: Mutex::new(state), freed: Condvar::new(), clock, events_published, fleet: None, keeper: Default::default() })
    }

    /// A pool that shares leases, sessions, pairings, health verdicts and counters with every
    /// pool on the same store.
    pub fn with_store(exits: Vec<Exit>, cfg: Config, clock: Arc<dyn Clock>, store: Arc<dyn Store>) -> Result<Pool> {
        Pool::of_with_store(exits.into_iter().map(Member::Exit).collect(), cfg, clock, store)
    }

    /// [`Pool::of`] sharing its state through a store, as [`Pool::with_store`].
    pub fn of_with_store(members: Vec<Member>, cfg: Config, clock: Arc<dyn Clock>, store: Arc<dyn Store>) -> Result<Pool> {
        let mut pool = Pool::of(members, cfg, clock)?;
        let now = pool.clock.now();
        let origin = {
            let mut st = pool.state.lock();
            st.board.outbox = Some(Vec::new());
            st.rng.random::<u64>() | 1
        };
        pool.fleet = Some(FleetLink { store, origin, link: Mutex::new(LinkState { online: true, next_refresh: now, seen: 0 }) });
        Ok(pool)
    }

    /// Whether calls may wait on a network store (and so must not hold up other threads).
    pub fn is_shared(&self) -> bool {
        self.fleet.is_some()
    }

    /// The store's description (credentials masked) and whether it is answering: not while
    /// released leases wait to be handed back to it (their slots stay held fleet-wide).
    pub fn store_status(&self) -> Option<(String, bool)> {
        let fl = self.fleet.as_ref()?;
        self.stuck(fl, fl.store.backlog(), self.clock.now());
        Some((fl.store.describe(), fl.link.lock().online))
    }

    pub fn now(&self) -> f64 {
        self.clock.now()
    }

    pub fn config(&self) -> Config {
        self.state.lock().cfg.clone()
    }

    /// The view over exits carrying every given tag (created once, then shared).
    pub fn subset(&self, mut filter: Vec<(String, String)>) -> Result<u32> {
        filter.sort();
        filter.dedup();
        self.state.lock().view(filter)
    }

    /// One attempt, without waiting.
    pub fn try_acquire(&self, view: u32, key: Option<&str>, site: Option<&str>) -> std::result::Result<Grant, Refusal> {
        self.try_acquire_avoiding(view, key, site, &[])
    }

    /// One attempt whose keyless pick passes over the exits named in `avoid` (a page retried
    /// after a ban must not land where it was banned). A keyed lease goes to its session's or
    /// its ring's exit and ignores `avoid`: moving an account is never a side effect.
    pub fn try_acquire_avoiding(
        &self,
        view: u32,
        key: Option<&str>,
        site: Option<&str>,
        avoid: &[&str],
    ) -> std::result::Result<Grant, Refusal> {
        if let Some(fl) = &self.fleet {
            let r = self.shared_attempt(fl, view, key, site, avoid);
            if r.is_ok() {
                self.state.lock().waits.immediate += 1;
            }
            return r;
        }
        let now = self.clock.now();
        let mut st = self.state.lock();
        let wake = st.expire(now) && st.waiters > 0;
        let r = st.attempt(view, key, site, avoid, now);
        if r.is_ok() {
            st.waits.immediate += 1;
        }
        drop(st);
        if wake {
            self.freed.notify_all();
        }
        r
    }

    /// Attempts until granted, refused for a reason waiting cannot fix, or `timeout` passes
    /// while every candidate is full. A grant that had to wait is counted as a wait.
    pub fn acquire(&self, view: u32, key: Option<&str>, site: Option<&str>, timeout: Duration) -> std::result::Result<Grant, Refusal> {
        let r = self.acquire_within(view, key, site, timeout);
        if let Ok(g) = &r {
            if g.waited > 0.0 {
                self.record_wait(g.waited);
            } else {
                self.state.lock().waits.immediate += 1;
            }
        }
        r
    }

    /// Counts one lease that had to wait `seconds` for its slot. For callers that wait in
    /// slices (the bindings, to let Ctrl-C through) and count the whole wait once.
    pub fn record_wait(&self, seconds: f64) {
        let mut st = self.state.lock();
        st.waits.waited.record(seconds);
        st.waits.waited_total += 1;
    }

    /// One bounded wait, counting nothing: `Grant::waited` is 0 when no wait was needed.
    pub fn acquire_within(
        &self,
        view: u32,
        key: Option<&str>,
        site: Option<&str>,
        timeout: Duration,
    ) -> std::result::Result<Grant, Refusal> {
        self.acquire_within_avoiding(view, key, site, &[], timeout)
    }

    /// [`Pool::acquire_within`] with a keyless pick that passes over `avoid`, as in
    /// [`Pool::try_acquire_avoiding`].
    pub fn acquire_within_avoiding(
        &self,
        view: u32,
        key: Option<&str>,
        site: Option<&str>,
        avoid: &[&str],
        timeout: Duration,
    ) -> std::result::Result<Grant, Refusal> {
        let started = Instant::now();
        // `None` from Python arrives as a huge timeout; a deadline past the clock's range is "never".
        let deadline = started.checked_add(timeout).unwrap_or_else(|| started + Duration::from_secs(100 * 365 * 86_400));
        if let Some(fl) = &self.fleet {
            // Slots free in other processes too, which no condition variable hears: poll,
            // from 2 ms doubling to 50 ms.
            let mut pause = Duration::from_millis(2);
            loop {
                let attempt = self.shared_attempt(fl, view, key, site, avoid);
                if let Some(wake) = attempt.as_ref().err().and_then(Refusal::paced).and_then(|w| paced_wake(w, deadline)) {
                    std::thread::sleep(wake.saturating_duration_since(Instant::now()));
                    pause = pause.max(Duration::from_millis(4));
                    continue;
                }
                match attempt {
                    Err(Refusal::Full) if Instant::now() < deadline => {
                        std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
                        pause = (pause * 2).min(Duration::from_millis(50));
                    }
                    Ok(mut grant) => {
                        let waited = started.elapsed().as_secs_f64();
                        grant.waited = if pause > Duration::from_millis(2) { waited } else { 0.0 };
                        return Ok(grant);
                    }
                    other => return other,
                }
            }
        }
        let mut st = self.state.lock();
        let mut waited = false;
        loop {
            let now = self.clock.now();
            if st.expire(now) && st.waiters > 0 {
                self.freed.notify_all();
            }
            let attempt = st.attempt(view, key, site, avoid, now);
            // Pacing frees budget by time alone: a wait that fits in the timeout is waited.
            if let Some(wake) = attempt.as_ref().err().and_then(Refusal::paced).and_then(|w| paced_wake(w, deadline)) {
                waited = true;
                st = self.freed.wait_until(st, wake).0;
                continue;
            }
            match attempt {
                Err(Refusal::Full) if Instant::now() < deadline => {
                    st.waiters += 1;
                    waited = true;
                    // Slots also free by expiry, which no release announces: look again soon.
                    let wake = deadline.min(Instant::now() + Duration::from_millis(250));
                    st = self.freed.wait_until(st, wake).0;
                    st.waiters -= 1;
                }
                Ok(mut grant) => {
                    grant.waited = if waited { started.elapsed().as_secs_f64() } else { 0.0 };
                    return Ok(grant);
                }
                other => return other,
            }
        }
    }

    /// Ends a lease with its outcome. `false` if it had already ended (expired, or released
    /// twice): such a release changes nothing.
    #[inline]
    pub fn release(&self, id: LeaseId, report: &Report) -> bool {
        self.end(id, Some(report))
    }

    /// Ends a lease that carries no evidence about its exit: an acquire whose caller was gone
    /// by the time it was granted (a cancelled task), or a release whose report was bad input.
    /// Its slot is freed (fleet-wide too) and its trial slots handed back, as on expiry; no
    /// breaker and no outcome count hears of it.
    pub fn release_unused(&self, id: LeaseId) -> bool {
        self.end(id, None)
    }

    /// Whether a lease is live now: granted, not released, and not past its `lease_ttl` by
    /// the pool's clock (an expired lease's slot may be someone else's already).
    pub fn is_live(&self, id: LeaseId) -> bool {
        let now = self.clock.now();
        self.state.lock().leases.get(id).is_some_and(|rec| rec.expires > now)
    }

    #[inline]
    pub(super) fn end(&self, id: LeaseId, report: Option<&Report>) -> bool {
        let now = self.clock.now();
        let mut st = self.state.lock();
        if let Some(rec) = st.leases.get(id) {
            st.prefetch(rec.exit, rec.site);
        }
        // A lease whose time ran out has expired, whether or not anyone looked since.
        let expired = st.expire(now);
        let mut remote = None;
        let released = match st.leases.take(id) {
            None => {
                st.counts.ignored_releases += 1;
                false
            }
            // No report: no evidence. The slot and the trial slots go back, as on expiry.
            Some(rec) if report.is_none() => {
                st.exits[rec.exit as usize].active -= 1;
                st.lease_ended(rec.exit);
                st.counts.released += 1;
                st.board.abandon(rec.exit, rec.site, rec.trial);
                if rec.remote != 0 {
                    remote = Some((st.exits[rec.exit as usize].exit.clone(), rec.remote));
                }
                true
            }
            Some(rec) => {
                let report = report.unwrap_or(&Report::SUCCESS);
                let slot = &mut st.exits[rec.exit as usize];
                slot.active -= 1;
                slot.tally.record(report.outcome, report.latency);
                st.lease_ended(rec.exit);
                if rec.site != 0 {
                    st.site_tally(rec.site, rec.exit).record(report.outcome, report.latency);
                }
                st.counts.released += 1;
                st.counts.outcomes[report.outcome as usize] += 1;
                if rec.identity != 0 {
                    let burned = matches!(report.outcome, crate::outcome::Outcome::Block | crate::outcome::Outcome::Captcha);
                    let entry = st.exits[rec.exit as usize].identities.entry(rec.identity).or_insert((now, false));
                    *entry = (now, entry.1 || burned);
                }
                let in_service = st.views[0].members.len() as u32;
                let jitter = st.rng.random::<f64>();
                st.board.report(rec.exit, rec.site, report, rec.trial, in_service, now, jitter);
                if st.pacer.is_some() {
                    st.pace_learned(rec.exit, rec.site, report, now);
                }
                if rec.remote != 0 {
                    remote = Some((st.exits[rec.exit as usize].exit.clone(), rec.remote));
                }
                true
            }
        };
        let wake = (expired || released) && st.waiters > 0;
        // A report that changed a verdict (rarely) has one to publish.
        let verdicts = st.board.outbox.as_ref().is_some_and(|o| !o.is_empty());
        drop(st);
        if wake {
            self.freed.notify_all();
        }
        if let (Some(fl), Some((exit, id))) = (&self.fleet, remote) {
            // The fleet's slot ends whatever the answer: a late one was reclaimed already.
            let r = fl.store.hand_back(&exit.id, id, report.map(|r| r.outcome));
            self.stuck(fl, r, now);
        }
        if let (Some(fl), true) = (&self.fleet, verdicts) {
            self.publish_verdicts(fl, now);
        }
        released
    }

    /// Where a key lives now: its live session's exit, else its ring exit. Leases nothing.
    pub fn assign(&self, view: u32, key: &str) -> std::result::Result<Arc<Exit>, Refusal> {
        let now = self.clock.now();
        if let Some(fl) = &self.fleet {
            let r = fl.store.session(key);
            if self.heard(fl, r.as_ref().map(drop).map_err(Clone::clone), now) {
                let st = self.state.lock();
                if let Some(h) = r.ok().flatten().and_then(|e| st.by_id.get(&e).copied()) {
                    return Ok(st.exits[h as usize].exit.clone());
                }
                return st.ring_pick(view, key, 0, now).map(|(h, _)| st.exits[h as usize].exit.clone());
            }
        }
        let mut st = self.state.lock();
        let h = match st.sessions.live(key, now) {
            Some(s) => s.exit,
            None => st.ring_pick(view, key, 0, now)?.0,
        };
        st.refresh(h, now);
        Ok(st.exits[h as usize].exit.clone())
    }

    /// Ends a key's session; its next lease binds afresh from the ring.
    pub fn end_session(&self, key: &str) -> bool {
        let now = self.clock.now();
        // A session past its TTL had ended already, whether or not it was swept.
        let local = self.state.lock().sessions.end(key).is_some_and(|s| s.expires > now);
        if let Some(fl) = &self.fleet {
            let r = fl.store.end_session(key);
            if self.heard(fl, r.as_ref().map(drop).map_err(Clone::clone), self.clock.now()) {
                return r.unwrap_or(false) || local;
            }
        }
        local
    }

    /// The sequence number the next event will get, without taking the pool's lock.
    #[inline]
    pub fn event_seq(&self) -> u64 {
        self.events_published.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// When to try again for a pacing wait of `wait` seconds, if it ends before `deadline`:
/// waiting past the deadline would only fail later, so the refusal is answered at once.
fn paced_wake(wait: f64, deadline: Instant) -> Option<Instant> {
    let wake = Instant::now().checked_add(Duration::try_from_secs_f64(wait).ok()?)?;
    (wake <= deadline).then_some(wake)
}
