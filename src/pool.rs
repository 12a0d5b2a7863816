//! The pool: leases, sticky sessions, keyless selection and warm-up over one set of exits.
//!
//! All state sits behind one mutex held for a few hundred nanoseconds per call; a caller that
//! must wait for a free slot sleeps on a condition variable with the lock released.
//! Views (`subset`) are extra rings and member lists over the same exits, sharing every lease,
//! session and counter with the whole pool.

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::events::EventKind;
use crate::exit::Exit;
use crate::fleet::{Admit, Fleet, Pending, Probe, SITE_VERDICT};
use crate::health::{HealthConfig, Reason, State as Health};
use crate::lease::{LeaseId, LeaseRec, Leases};
use crate::metrics::{Tally, Waits};
use crate::outcome::Report;
use crate::ring::{Ring, DEFAULT_SALT};
use crate::select::{Members, NoPick, Selector, Strategy};
use crate::session::Sessions;
use crate::store::{ExitCounts, Store, StoreError, Take, Taken, Verdict};
use crate::warmup::{Pairings, WarmupConfig};
use parking_lot::{Condvar, Mutex};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Config {
    pub strategy: Strategy,
    pub replicas: u32,
    pub session_ttl: f64,
    pub lease_ttl: f64,
    pub max_leases: Option<u32>,
    pub balance_factor: Option<f64>,
    pub warmup: Option<WarmupConfig>,
    /// The `lru` strategy's per-site cooldown (8 s, the balancing article's figure).
    pub cooldown: f64,
    pub seed: Option<u64>,
    pub health: HealthConfig,
    /// Track each exit's distinct identities and burn verdicts over 24 h, for `recalibrate`.
    pub calibrate: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            strategy: Strategy::Weighted,
            replicas: crate::ring::DEFAULT_REPLICAS,
            session_ttl: 900.0,
            lease_ttl: 120.0,
            max_leases: None,
            balance_factor: None,
            warmup: None,
            cooldown: 8.0,
            seed: None,
            health: HealthConfig::default(),
            calibrate: false,
        }
    }
}

/// `max_leases` in `1..=u32::MAX` (0 would let no lease through); wide enough for any integer
/// a caller or a config file can give, so that this is its only range check.
pub fn check_max_leases(n: i128) -> Result<u32> {
    match u32::try_from(n) {
        Ok(m) if m >= 1 => Ok(m),
        _ => Err(Error::setting(&["max_leases"], format!("{n} is outside 1..={} (leave it out for no limit)", u32::MAX))),
    }
}

impl Config {
    pub fn validate(&self) -> Result<()> {
        let positive = |name: &'static str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(Error::setting(&[name], format!("{v} must be a finite number of seconds > 0")))
            }
        };
        positive("session_ttl", self.session_ttl)?;
        positive("lease_ttl", self.lease_ttl)?;
        if !(self.cooldown.is_finite() && self.cooldown >= 0.0) {
            return Err(Error::setting(&["cooldown"], format!("{} must be a finite number of seconds >= 0", self.cooldown)));
        }
        for (name, v) in [("session_ttl", self.session_ttl), ("lease_ttl", self.lease_ttl), ("cooldown", self.cooldown)] {
            crate::clock::check_ceiling(&[name], v)?;
        }
        if let Some(m) = self.max_leases {
            check_max_leases(m.into())?;
        }
        if let Some(c) = self.balance_factor {
            if !(c.is_finite() && c > 1.0) {
                return Err(Error::setting(&["balance_factor"], format!("{c} must be a finite number > 1 (HAProxy suggests 1.25 to 2)")));
            }
        }
        crate::ring::check_replicas(self.replicas.into())?;
        self.health.validate()
    }
}

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

const LRU_COOLDOWN: &str = "every exit used this site within the lru cooldown";
const RATE_LIMITED_ONE: &str = "the session's exit was rate-limited by this site (429)";
const RATE_LIMITED_ALL: &str = "every exit that could serve was rate-limited by this site (429)";
const INCIDENT: &str = "this site has an open incident, so its leases are spaced out";

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
}

struct ExitSlot {
    exit: Arc<Exit>,
    /// Identity (key hash) -> (last served, burned by a block or captcha), when calibrating.
    identities: HashMap<u64, (f64, bool)>,
    active: u32,
    /// When the exit last took a lease (pool clock), for choosing idle exits to probe.
    last_lease: f64,
    benched: bool,
    removed: bool,
    tally: Tally,
}

struct View {
    filter: Vec<(String, String)>,
    /// Handles of the matching exits in service, ascending.
    members: Vec<u32>,
    ring: Ring,
    weight_total: u64,
    selector: Selector,
}

impl View {
    fn matches(&self, exit: &Exit) -> bool {
        self.filter.iter().all(|(k, v)| exit.tag(k) == Some(v.as_str()))
    }
}

struct State {
    cfg: Config,
    exits: Vec<ExitSlot>,
    by_id: HashMap<String, u32>,
    views: Vec<View>,
    view_ids: HashMap<Vec<(String, String)>, u32>,
    sessions: Sessions,
    leases: Leases,
    pairings: Pairings,
    /// Site name -> id; 0 is "no site".
    sites: HashMap<Box<str>, u32>,
    site_names: Vec<Box<str>>,
    fleet: Fleet,
    /// Per site, per exit handle: when it last served that site (for `lru`).
    last_used: Vec<Vec<f64>>,
    rng: SmallRng,
    counts: Counts,
    waiters: u32,
    /// Per site, per exit handle: that pair's counts and latencies.
    site_tallies: Vec<Vec<Tally>>,
    waits: Waits,
    rate_prev: (f64, u64),
    rate_mark: (f64, u64),
}

pub struct Pool {
    state: Mutex<State>,
    freed: Condvar,
    clock: Arc<dyn Clock>,
    events_published: Arc<std::sync::atomic::AtomicU64>,
    shared: Option<Shared>,
}

/// A pool's link to the fleet's store. The pool's own state stays complete: it is where the
/// store's answers are recorded, and what the pool serves from while the store is away.
struct Shared {
    store: Arc<dyn Store>,
    /// This pool's name on its verdicts, so it does not apply its own.
    origin: u64,
    link: Mutex<Link>,
}

struct Link {
    online: bool,
    /// When the local copy of the fleet's health is next refreshed (pool clock).
    next_refresh: f64,
    /// The last verdict applied.
    seen: u64,
}

/// The store's name for the breakers of leases without a site (no host name has a control
/// character; the empty name is the tunnel).
const UNSCOPED: &str = "\u{1}";
/// How often the local copy of the fleet's health is refreshed: at most one round trip a
/// second for it, whatever the lease rate.
const HEALTH_REFRESH: f64 = 1.0;
/// With a store, a worker extends a key's session (its own copy and the fleet's, together)
/// only once this share of `session_ttl` has passed since it last did: a key leased in a loop
/// then costs the store no write per lease, and its session lapses at most this much early.
pub const RENEW_SLACK: f64 = 1.0 / 64.0;
/// A keyless lease offers the store its pick and this many more, so that one full exit
/// elsewhere in the fleet costs no second round trip.
const KEYLESS_FALLBACKS: usize = 3;

/// The view's members as the selection strategies see them.
struct ViewMembers<'a> {
    members: &'a [u32],
    exits: &'a [ExitSlot],
    max_leases: u32,
    last_used: &'a [f64],
    fleet: &'a Fleet,
    site: u32,
    now: f64,
}

/// A view's members less the exits a keyless retry must pass over. A type of its own, so the
/// common pick, with nothing to avoid, runs the strategies exactly as it did without it.
struct Avoiding<'a> {
    inner: ViewMembers<'a>,
    avoid: &'a [u32],
}

impl Members for Avoiding<'_> {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn eligible(&self, m: usize) -> bool {
        !self.avoid.contains(&self.inner.members[m]) && self.inner.eligible(m)
    }
    fn weight(&self, m: usize) -> i64 {
        self.inner.weight(m)
    }
    fn active(&self, m: usize) -> u32 {
        self.inner.active(m)
    }
    fn last_used(&self, m: usize) -> f64 {
        self.inner.last_used(m)
    }
}

/// Weights go to the strategies as integers; this many units stand for one unit of capacity,
/// so health can shade a weight finely.
const WEIGHT_SCALE: f64 = 1000.0;

impl Members for ViewMembers<'_> {
    fn len(&self) -> usize {
        self.members.len()
    }
    #[inline]
    fn eligible(&self, m: usize) -> bool {
        let h = self.members[m];
        self.exits[h as usize].active < self.max_leases && self.fleet.admits(h, self.site, self.now) == Admit::Yes
    }
    #[inline]
    fn weight(&self, m: usize) -> i64 {
        let h = self.members[m];
        let capacity = self.exits[h as usize].exit.capacity.max(1) as f64;
        // Round half up by hand: weights are never negative, and `f64::round` is a libm call
        // on baseline x86-64 (no SSE4.1) that perf put at 8% of a keyless pair.
        ((capacity * self.fleet.weight(h, self.site) * WEIGHT_SCALE + 0.5) as i64).max(1)
    }
    #[inline]
    fn active(&self, m: usize) -> u32 {
        self.exits[self.members[m] as usize].active
    }
    #[inline]
    fn last_used(&self, m: usize) -> f64 {
        self.last_used.get(self.members[m] as usize).copied().unwrap_or(f64::NEG_INFINITY)
    }
}

/// One event, with names resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct EventView {
    pub seq: u64,
    pub time: f64,
    pub kind: &'static str,
    pub exit_id: Option<String>,
    pub site: Option<String>,
    pub from: Option<&'static str>,
    pub to: Option<&'static str>,
    pub message: String,
}

/// One capacity that `recalibrate` changed (0: benched).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recalibration {
    pub exit_id: String,
    pub old: u32,
    pub new: u32,
    pub served: u32,
    pub safe: u32,
}

/// Per-exit figures for snapshots.
#[derive(Debug, Clone)]
pub struct ExitView {
    pub exit: Arc<Exit>,
    /// The tunnel's state: the exit's state for every site.
    pub state: Health,
    pub state_since: f64,
    pub quarantines: u32,
    pub quarantined_seconds: f64,
    pub active: u32,
    pub benched: bool,
    pub sessions: u32,
    pub tally: Tally,
    /// The share of its capacity the exit gets now (health and adaptive weight).
    pub weight: f64,
}

/// The name a state is shown by: "cooling" for an exit resting after a 429 (cooling ends by
/// time, not by evidence, so it is no breaker state), else the breaker's state. An exit out of
/// service shows that instead: it would not serve when its cooling ends either.
pub const COOLING: &str = "cooling";

fn shown_state(health: Health, cooling: bool) -> &'static str {
    if cooling && !health.is_ejected() {
        COOLING
    } else {
        health.name()
    }
}

/// One cell of the exit x site matrix.
#[derive(Debug, Clone)]
pub struct Cell {
    pub state: Health,
    /// Resting after a 429 for this site (see [`COOLING`]).
    pub cooling: bool,
    pub tally: Tally,
    pub quarantines: u32,
    pub quarantined_seconds: f64,
}

impl Cell {
    /// The cell's state as shown: its breaker state, or "cooling".
    pub fn state_name(&self) -> &'static str {
        shown_state(self.state, self.cooling)
    }
}

#[derive(Debug, Clone)]
pub struct SiteView {
    pub site: String,
    pub incident: bool,
    /// Indexed like `Snapshot::exits`; `None` where the exit has not served the site.
    pub cells: Vec<Option<Cell>>,
}

/// Pool-wide figures.
#[derive(Debug, Clone, Default)]
pub struct PoolFigures {
    /// Exits per health state, in `Health::ALL` order (benched exits counted too).
    pub states: [u32; 5],
    pub in_service: u32,
    pub benched: u32,
    /// Leases per second over the last one to two minutes.
    pub throughput: f64,
    /// Gini coefficient of leases over the exits in service.
    pub gini: f64,
    pub ejected_fraction: f64,
    pub trials: u64,
    pub trials_recovered: u64,
    pub wait_p50: f64,
    pub wait_p99: f64,
    pub incidents: Vec<String>,
    pub global_incident: bool,
}

#[derive(Debug, Clone)]
pub struct Snapshot {
    pub now: f64,
    pub exits: Vec<ExitView>,
    pub sites: Vec<SiteView>,
    pub pool: PoolFigures,
    pub sessions: usize,
    pub live_leases: usize,
    pub counts: Counts,
}

pub(crate) fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.finish()
}

impl Pool {
    pub fn new(exits: Vec<Exit>, cfg: Config, clock: Arc<dyn Clock>) -> Result<Pool> {
        cfg.validate()?;
        if exits.is_empty() {
            return Err(Error::BadInput("a pool needs at least one exit".into()));
        }
        let mut by_id = HashMap::with_capacity(exits.len());
        for (i, e) in exits.iter().enumerate() {
            crate::exit::validate_capacity(e.capacity.into())?;
            if by_id.insert(e.id.clone(), i as u32).is_some() {
                return Err(Error::DuplicateExit(e.id.clone()));
            }
        }
        let slots: Vec<ExitSlot> = exits
            .into_iter()
            .map(|e| ExitSlot {
                exit: Arc::new(e),
                identities: HashMap::new(),
                active: 0,
                last_lease: f64::NEG_INFINITY,
                benched: false,
                removed: false,
                tally: Tally::default(),
            })
            .collect();
        let rng = SmallRng::seed_from_u64(cfg.seed.unwrap_or_else(random_seed));
        let born = clock.now();
        let fleet = Fleet::new(cfg.health.clone(), slots.len(), born);
        let mut state = State {
            cfg,
            exits: slots,
            by_id,
            views: Vec::new(),
            view_ids: HashMap::new(),
            sessions: Sessions::default(),
            leases: Leases::default(),
            pairings: Pairings::default(),
            sites: HashMap::new(),
            site_names: vec!["".into()],
            fleet,
            last_used: vec![Vec::new()],
            rng,
            counts: Counts::default(),
            waiters: 0,
            site_tallies: Vec::new(),
            waits: Waits::default(),
            rate_prev: (born, 0),
            rate_mark: (born, 0),
        };
        state.view(Vec::new())?;
        let events_published = state.fleet.events.published();
        Ok(Pool { state: Mutex::new(state), freed: Condvar::new(), clock, events_published, shared: None })
    }

    /// A pool that shares leases, sessions, pairings, health verdicts and counters with every
    /// pool on the same store.
    pub fn with_store(exits: Vec<Exit>, cfg: Config, clock: Arc<dyn Clock>, store: Arc<dyn Store>) -> Result<Pool> {
        let mut pool = Pool::new(exits, cfg, clock)?;
        let now = pool.clock.now();
        let origin = {
            let mut st = pool.state.lock();
            st.fleet.outbox = Some(Vec::new());
            st.rng.random::<u64>() | 1
        };
        pool.shared = Some(Shared { store, origin, link: Mutex::new(Link { online: true, next_refresh: now, seen: 0 }) });
        Ok(pool)
    }

    /// Whether calls may wait on a network store (and so must not hold up other threads).
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// The store's description (credentials masked) and whether it is answering: not while
    /// released leases wait to be handed back to it (their slots stay held fleet-wide).
    pub fn store_status(&self) -> Option<(String, bool)> {
        let sh = self.shared.as_ref()?;
        self.stuck(sh, sh.store.backlog(), self.clock.now());
        Some((sh.store.describe(), sh.link.lock().online))
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
        if let Some(sh) = &self.shared {
            let r = self.shared_attempt(sh, view, key, site, avoid);
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
        if let Some(sh) = &self.shared {
            // Slots free in other processes too, which no condition variable hears: poll,
            // from 2 ms doubling to 50 ms.
            let mut pause = Duration::from_millis(2);
            loop {
                match self.shared_attempt(sh, view, key, site, avoid) {
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
            match st.attempt(view, key, site, avoid, now) {
                Err(Refusal::Full) if Instant::now() < deadline => {
                    st.waiters += 1;
                    waited = true;
                    // Slots also free by expiry, which no release announces: look again soon.
                    let wake = deadline.min(Instant::now() + Duration::from_millis(250));
                    self.freed.wait_until(&mut st, wake);
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
    fn end(&self, id: LeaseId, report: Option<&Report>) -> bool {
        let now = self.clock.now();
        let mut st = self.state.lock();
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
                st.counts.released += 1;
                st.fleet.abandon(rec.exit, rec.site, rec.trial);
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
                st.fleet.report(rec.exit, rec.site, report, rec.trial, in_service, now, jitter);
                if rec.remote != 0 {
                    remote = Some((st.exits[rec.exit as usize].exit.clone(), rec.remote));
                }
                true
            }
        };
        let wake = (expired || released) && st.waiters > 0;
        // A report that changed a verdict (rarely) has one to publish.
        let verdicts = st.fleet.outbox.as_ref().is_some_and(|o| !o.is_empty());
        drop(st);
        if wake {
            self.freed.notify_all();
        }
        if let (Some(sh), Some((exit, id))) = (&self.shared, remote) {
            // The fleet's slot ends whatever the answer: a late one was reclaimed already.
            let r = sh.store.hand_back(&exit.id, id, report.map(|r| r.outcome));
            self.stuck(sh, r, now);
        }
        if let (Some(sh), true) = (&self.shared, verdicts) {
            self.publish_verdicts(sh, now);
        }
        released
    }

    /// Where a key lives now: its live session's exit, else its ring exit. Leases nothing.
    pub fn assign(&self, view: u32, key: &str) -> std::result::Result<Arc<Exit>, Refusal> {
        let now = self.clock.now();
        if let Some(sh) = &self.shared {
            let r = sh.store.session(key);
            if self.heard(sh, r.as_ref().map(drop).map_err(Clone::clone), now) {
                let st = self.state.lock();
                if let Some(h) = r.ok().flatten().and_then(|e| st.by_id.get(&e).copied()) {
                    return Ok(st.exits[h as usize].exit.clone());
                }
                return st.ring_pick(view, key, 0, now).map(|(h, _)| st.exits[h as usize].exit.clone());
            }
        }
        let mut st = self.state.lock();
        if let Some(s) = st.sessions.live(key, now) {
            return Ok(st.exits[s.exit as usize].exit.clone());
        }
        let h = st.ring_pick(view, key, 0, now)?.0;
        Ok(st.exits[h as usize].exit.clone())
    }

    /// Stops new sessions on an exit; live ones drain. Returns their keys, which move when
    /// their sessions end.
    pub fn bench(&self, exit_id: &str) -> Result<Vec<String>> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        let keys = st.sessions.keys_on(h, now);
        if !st.exits[h as usize].benched {
            st.exits[h as usize].benched = true;
            st.leave_views(h)?;
            st.fleet.events.push(
                now,
                EventKind::Benched,
                Some(h),
                None,
                format!("benched: no new sessions; {} live sessions drain", keys.len()),
            );
        }
        Ok(keys)
    }

    pub fn unbench(&self, exit_id: &str) -> Result<()> {
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        if st.exits[h as usize].benched {
            st.check_room(&st.exits[h as usize].exit)?;
            st.exits[h as usize].benched = false;
            st.join_views(h)?;
            let now = self.clock.now();
            st.fleet.events.push(now, EventKind::Unbenched, Some(h), None, "back in the ring".to_owned());
        }
        Ok(())
    }

    /// Ends a key's session; its next lease binds afresh from the ring.
    pub fn end_session(&self, key: &str) -> bool {
        let now = self.clock.now();
        // A session past its TTL had ended already, whether or not it was swept.
        let local = self.state.lock().sessions.end(key).is_some_and(|s| s.expires > now);
        if let Some(sh) = &self.shared {
            let r = sh.store.end_session(key);
            if self.heard(sh, r.as_ref().map(drop).map_err(Clone::clone), self.clock.now()) {
                return r.unwrap_or(false) || local;
            }
        }
        local
    }

    pub fn add(&self, exit: Exit) -> Result<()> {
        crate::exit::validate_capacity(exit.capacity.into())?;
        let mut st = self.state.lock();
        if st.by_id.get(&exit.id).is_none_or(|&h| st.exits[h as usize].removed) {
            st.check_room(&exit)?;
        }
        let h = match st.by_id.get(&exit.id).copied() {
            Some(h) if !st.exits[h as usize].removed => return Err(Error::DuplicateExit(exit.id)),
            Some(h) => {
                // The same id again: the same slot, so its history and pairings carry over;
                // its health starts afresh.
                let slot = &mut st.exits[h as usize];
                slot.exit = Arc::new(exit);
                slot.removed = false;
                slot.benched = false;
                let now = self.clock.now();
                st.fleet.forget(h, now);
                h
            }
            None => {
                let h = st.exits.len() as u32;
                st.fleet.ensure_exit(h, self.clock.now());
                st.by_id.insert(exit.id.clone(), h);
                st.exits.push(ExitSlot {
                    exit: Arc::new(exit),
                    identities: HashMap::new(),
                    active: 0,
                    last_lease: f64::NEG_INFINITY,
                    benched: false,
                    removed: false,
                    tally: Tally::default(),
                });
                h
            }
        };
        st.join_views(h)
    }

    /// Takes an exit out for good. Live sessions on it get `SessionExitLost` at their next
    /// lease; live leases may still be released.
    pub fn remove(&self, exit_id: &str) -> Result<Arc<Exit>> {
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        if !st.exits[h as usize].benched {
            st.leave_views(h)?;
        }
        let now = self.clock.now();
        st.fleet.forget(h, now);
        let slot = &mut st.exits[h as usize];
        slot.removed = true;
        slot.benched = false;
        Ok(slot.exit.clone())
    }

    /// Changes one exit's weight; only its own arcs move.
    pub fn set_capacity(&self, exit_id: &str, capacity: u32) -> Result<()> {
        let capacity = crate::exit::validate_capacity(capacity.into())?;
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        let in_service = !st.exits[h as usize].benched;
        let resized = Exit { capacity, ..(*st.exits[h as usize].exit).clone() };
        if in_service {
            st.check_room(&resized)?;
            st.leave_views(h)?;
        }
        st.exits[h as usize].exit = Arc::new(resized);
        if in_service {
            st.join_views(h)?;
        }
        Ok(())
    }

    pub fn exit(&self, exit_id: &str) -> Result<Arc<Exit>> {
        let st = self.state.lock();
        let h = st.handle(exit_id)?;
        Ok(st.exits[h as usize].exit.clone())
    }

    /// Exits of a view that are in service, in handle order.
    pub fn members(&self, view: u32) -> Vec<Arc<Exit>> {
        let st = self.state.lock();
        st.views[view as usize].members.iter().map(|&h| st.exits[h as usize].exit.clone()).collect()
    }

    /// The exits a probe loop should check now: quarantined ones whose backoff is over (now
    /// probing, with no trial out), dead ones, and exits in service idle for `idle` seconds.
    pub fn probe_due(&self, idle: f64) -> Vec<Arc<Exit>> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        st.fleet.poll(now);
        let st = &*st;
        st.views[0]
            .members
            .iter()
            .filter(|&&h| {
                let b = st.fleet.tunnel_breaker(h);
                match b.state() {
                    Health::Probing => b.trials_out() == 0,
                    Health::Dead => true,
                    Health::Quarantined => false,
                    Health::Healthy | Health::Degraded => now - st.exits[h as usize].last_lease >= idle,
                }
            })
            .map(|&h| st.exits[h as usize].exit.clone())
            .collect()
    }

    /// Feeds an active probe's verdict into the exit's tunnel health. `observed_ip` that
    /// differs from the exit's `ip` means its token now lands elsewhere: that is an event and
    /// a failure, since an account leased there would present a new address.
    pub fn record_probe(&self, exit_id: &str, ok: bool, observed_ip: Option<std::net::IpAddr>, detail: &str) -> Result<bool> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        let expected = st.exits[h as usize].exit.ip;
        let drifted = matches!((expected, observed_ip), (Some(e), Some(o)) if e != o);
        if drifted {
            st.fleet.events.push(
                now,
                EventKind::Drifted,
                Some(h),
                None,
                format!(
                    "probe saw {} where {} was expected: the exit's token lands elsewhere now",
                    observed_ip.map(|i| i.to_string()).unwrap_or_default(),
                    expected.map(|i| i.to_string()).unwrap_or_default()
                ),
            );
        }
        if !ok && !detail.is_empty() {
            st.fleet.events.push(now, EventKind::ProbeFailed, Some(h), None, format!("probe failed: {detail}"));
        }
        let in_service = st.views[0].members.len() as u32;
        let jitter = st.rng.random::<f64>();
        let verdict = match (ok, drifted) {
            (_, true) => Probe::Drifted,
            (true, false) => Probe::Ok,
            (false, false) => Probe::Failed,
        };
        st.fleet.probe(h, verdict, in_service, now, jitter);
        drop(st);
        if let Some(sh) = &self.shared {
            self.publish_verdicts(sh, now);
        }
        Ok(drifted)
    }

    /// An exit's health: for a site, the worse of its tunnel's state and its state there.
    pub fn state(&self, exit_id: &str, site: Option<&str>) -> Result<Health> {
        if let Some(sh) = &self.shared {
            self.sync_health(sh);
        }
        let now = self.clock.now();
        let mut st = self.state.lock();
        st.fleet.poll(now);
        let h = st.handle(exit_id)?;
        // Without a site: the state leases without a site meet (site 0), which is what
        // decides whether such a lease may use the exit.
        let site = match site {
            None => Some(0),
            Some(s) => st.sites.get(s).copied(),
        };
        Ok(st.fleet.state(h, site))
    }

    /// [`Pool::state`] by name, with "cooling" where a 429 has the exit resting for that site
    /// (or, without a site, for leases without one) while its breakers would still admit it:
    /// a cooling exit takes no lease for the site until its cooling ends.
    pub fn state_name(&self, exit_id: &str, site: Option<&str>) -> Result<&'static str> {
        let health = self.state(exit_id, site)?;
        let now = self.clock.now();
        let st = self.state.lock();
        let h = st.handle(exit_id)?;
        let site = match site {
            None => Some(0),
            Some(s) => st.sites.get(s).copied(),
        };
        let cooling = site.is_some_and(|s| matches!(st.fleet.admits(h, s, now), Admit::Cooling(_)));
        Ok(shown_state(health, cooling))
    }

    /// Puts an exit back in service everywhere (healthy), whatever its state.
    pub fn revive(&self, exit_id: &str) -> Result<()> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        st.fleet.revive(h, now);
        drop(st);
        if let Some(sh) = &self.shared {
            self.publish_verdicts(sh, now);
        }
        Ok(())
    }

    /// The sequence number the next event will get, without taking the pool's lock.
    #[inline]
    pub fn event_seq(&self) -> u64 {
        self.events_published.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Events with a sequence number of at least `since`, oldest first.
    pub fn events(&self, since: u64) -> Vec<EventView> {
        let st = self.state.lock();
        st.fleet
            .events
            .since(since)
            .map(|e| EventView {
                seq: e.seq,
                time: e.time,
                kind: e.kind.name(),
                exit_id: e.exit.map(|h| st.exits[h as usize].exit.id.clone()),
                site: e.site.map(|s| st.site_names[s as usize].to_string()),
                from: e.from.map(Health::name),
                to: e.to.map(Health::name),
                message: e.message.clone(),
            })
            .collect()
    }

    /// Sets each exit's capacity from what it carried over the last 24 h: the distinct
    /// identities it served without a block or captcha verdict, clamped to [1, 6]. An exit
    /// that burned every identity it served is benched; one that served none keeps its
    /// capacity. Only changed exits' arcs move. Needs `Config::calibrate`.
    pub fn recalibrate(&self) -> Result<Vec<Recalibration>> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        if !st.cfg.calibrate {
            return Err(Error::BadInput("recalibrate needs a pool made with calibrate=True".into()));
        }
        let mut changes = Vec::new();
        for h in 0..st.exits.len() as u32 {
            let slot = &mut st.exits[h as usize];
            if slot.removed || slot.benched {
                continue;
            }
            slot.identities.retain(|_, (seen, _)| now - *seen <= CALIBRATION_HORIZON);
            let served = slot.identities.len() as u32;
            if served == 0 {
                continue;
            }
            let safe = slot.identities.values().filter(|(_, burned)| !burned).count() as u32;
            let old = slot.exit.capacity;
            let id = slot.exit.id.clone();
            if safe == 0 {
                slot.benched = true;
                st.leave_views(h)?;
                st.fleet.events.push(
                    now,
                    EventKind::Benched,
                    Some(h),
                    None,
                    format!("measured capacity 0: all {served} identities served in 24 h were burned"),
                );
                changes.push(Recalibration { exit_id: id, old, new: 0, served, safe });
                continue;
            }
            let new = safe.min(CALIBRATED_MAX);
            if new != old {
                let resized = Exit { capacity: new, ..(*slot.exit).clone() };
                st.check_room(&resized)?;
                st.leave_views(h)?;
                st.exits[h as usize].exit = Arc::new(resized);
                st.join_views(h)?;
                st.fleet.events.push(
                    now,
                    EventKind::Recalibrated,
                    Some(h),
                    None,
                    format!("capacity {old} -> {new}: {safe} of {served} identities served in 24 h without a block or captcha"),
                );
                changes.push(Recalibration { exit_id: id, old, new, served, safe });
            }
        }
        Ok(changes)
    }

    pub fn snapshot(&self) -> Snapshot {
        if let Some(sh) = &self.shared {
            self.sync_health(sh);
        }
        let now = self.clock.now();
        let mut guard = self.state.lock();
        if guard.expire(now) && guard.waiters > 0 {
            self.freed.notify_all();
        }
        guard.fleet.poll(now);
        // Throughput is measured between marks at least a minute apart.
        let acquired = guard.counts.acquired;
        if now - guard.rate_mark.0 >= 60.0 {
            guard.rate_prev = guard.rate_mark;
            guard.rate_mark = (now, acquired);
        }
        let st = &*guard;
        let mut sessions_per_exit = vec![0u32; st.exits.len()];
        for (_, s) in st.sessions.iter() {
            if s.expires > now {
                sessions_per_exit[s.exit as usize] += 1;
            }
        }
        let listed: Vec<u32> = (0..st.exits.len() as u32).filter(|&h| !st.exits[h as usize].removed).collect();
        let exits: Vec<ExitView> = listed
            .iter()
            .map(|&h| {
                let s = &st.exits[h as usize];
                let b = st.fleet.tunnel_breaker(h);
                ExitView {
                    exit: s.exit.clone(),
                    state: b.state(),
                    state_since: b.since(),
                    quarantines: b.quarantines,
                    quarantined_seconds: b.total_quarantined(now),
                    active: s.active,
                    benched: s.benched,
                    sessions: sessions_per_exit[h as usize],
                    tally: s.tally.clone(),
                    weight: st.fleet.weight(h, 0),
                }
            })
            .collect();
        let sites: Vec<SiteView> = (1..st.site_names.len() as u32)
            .map(|site| SiteView {
                site: st.site_names[site as usize].to_string(),
                incident: st.fleet.incident_open(site),
                cells: listed
                    .iter()
                    .map(|&h| {
                        let tally = st.site_tallies.get(site as usize).and_then(|t| t.get(h as usize)).filter(|t| t.reports() > 0)?;
                        let b = st.fleet.site_breaker(h, site);
                        Some(Cell {
                            state: st.fleet.state(h, Some(site)),
                            cooling: matches!(st.fleet.admits(h, site, now), Admit::Cooling(_)),
                            tally: tally.clone(),
                            quarantines: b.map_or(0, |b| b.quarantines),
                            quarantined_seconds: b.map_or(0.0, |b| b.total_quarantined(now)),
                        })
                    })
                    .collect(),
            })
            .collect();
        let mut figures = PoolFigures::default();
        for e in &exits {
            figures.states[Health::ALL.iter().position(|s| *s == e.state).unwrap_or(0)] += 1;
            figures.benched += e.benched as u32;
        }
        figures.in_service = st.views[0].members.len() as u32;
        let (t0, a0) = st.rate_prev;
        figures.throughput = if now > t0 { (acquired - a0) as f64 / (now - t0) } else { 0.0 };
        let mut loads: Vec<u64> = st.views[0].members.iter().map(|&h| st.exits[h as usize].tally.leases).collect();
        figures.gini = crate::metrics::gini(&mut loads);
        figures.ejected_fraction = if figures.in_service == 0 { 0.0 } else { st.fleet.ejected() as f64 / figures.in_service as f64 };
        (figures.trials, figures.trials_recovered) = st.fleet.trials();
        figures.wait_p50 = st.waits.quantile(0.5);
        figures.wait_p99 = st.waits.quantile(0.99);
        figures.incidents =
            st.fleet.open_incidents().into_iter().filter(|&s| s != 0).map(|s| st.site_names[s as usize].to_string()).collect();
        figures.global_incident = st.fleet.global_incident_open();
        Snapshot {
            now,
            exits,
            sites,
            pool: figures,
            sessions: sessions_per_exit.iter().map(|&n| n as usize).sum(),
            live_leases: st.leases.live(),
            counts: Counts { waits: st.waits.waited_total, ..st.counts.clone() },
        }
    }
}

/// Fleet mode: the decisions made by the shared store.
impl Pool {
    /// One lease attempt through the store: decide locally (ring, sessions known here, health,
    /// strategy), let the store take the slot atomically (one round trip), then record what it
    /// granted. The pool's lock is not held while the store is asked. When the store cannot
    /// be reached, the pool's own state decides, as in a pool of its own.
    fn shared_attempt(
        &self,
        sh: &Shared,
        view: u32,
        key: Option<&str>,
        site: Option<&str>,
        avoid: &[&str],
    ) -> std::result::Result<Grant, Refusal> {
        self.sync_health(sh);
        let now = self.clock.now();
        // While the store is away it answers at once (it retries the server once a second).
        self.shared_take(sh, view, key, site, avoid, now).unwrap_or_else(|| self.state.lock().attempt(view, key, site, avoid, now))
    }

    /// `None` when the store could not be asked.
    fn shared_take(
        &self,
        sh: &Shared,
        view: u32,
        key: Option<&str>,
        site: Option<&str>,
        avoid: &[&str],
        now: f64,
    ) -> Option<std::result::Result<Grant, Refusal>> {
        let mut st = self.state.lock();
        if st.expire(now) && st.waiters > 0 {
            self.freed.notify_all();
        }
        let site_id = st.site_id(site);
        let avoid = st.avoided(key, avoid);
        let (h, choice) = match (st.decide(view, key, site_id, &avoid, now, false), key) {
            (Ok(d), _) => d,
            (Err(r), None) => return Some(Err(r)),
            (Err(r), Some(k)) => {
                // Nothing on the ring for a new session; but the key may have a live one,
                // which only the store knows, and which must be reported, not hidden.
                drop(st);
                let bound = sh.store.session(k);
                if !self.heard(sh, bound.as_ref().map(drop).map_err(Clone::clone), now) {
                    return None;
                }
                let Some(exit) = bound.ok().flatten() else { return Some(Err(r)) };
                st = self.state.lock();
                match st.adopt(view, key, &exit, site_id, now, Choice::Session) {
                    Ok(d) => d,
                    Err(r) => return Some(Err(r)),
                }
            }
        };
        let mut candidates = vec![st.exits[h as usize].exit.clone()];
        if key.is_none() {
            st.fallbacks(view, h, site_id, &avoid, now, &mut candidates);
        }
        let (max_leases, lease_ttl, session_ttl, warmup) = (st.cfg.max_leases, st.cfg.lease_ttl, st.cfg.session_ttl, st.cfg.warmup);
        let renew = key.is_none_or(|k| st.sessions.live(k, now).is_none_or(|s| s.expires - now <= session_ttl * (1.0 - RENEW_SLACK)));
        drop(st);
        let (mut h, mut choice) = (h, choice);
        // A key whose session another worker bound elsewhere is asked for again, once, for
        // that exit, after this worker has checked the exit can serve here.
        for _ in 0..2 {
            let ids: Vec<&str> = candidates.iter().map(|e| e.id.as_str()).collect();
            let take = Take { key, candidates: &ids, max_leases, lease_ttl, session_ttl, renew, warmup };
            let taken = sh.store.take(&take);
            if !self.heard(sh, taken.as_ref().map(drop).map_err(Clone::clone), now) {
                return None;
            }
            match taken.ok()? {
                Taken::Elsewhere { exit } => {
                    let st = &mut *self.state.lock();
                    match st.adopt(view, key, &exit, site_id, now, Choice::Session) {
                        Ok((h2, c2)) => {
                            (h, choice) = (h2, c2);
                            candidates = vec![st.exits[h2 as usize].exit.clone()];
                        }
                        Err(r) => return Some(Err(r)),
                    }
                }
                Taken::Full { .. } => return Some(Err(Refusal::Full)),
                Taken::WarmingUp { exit, wait } => {
                    let mut st = self.state.lock();
                    let eh = st.by_id.get(&exit).copied();
                    st.fleet.events.push(
                        now,
                        EventKind::WarmingUp,
                        eh,
                        (site_id != 0).then_some(site_id),
                        format!("a new pairing of key {:?} must wait {wait:.3} s (warm-up ramp, fleet-wide)", key.unwrap_or("")),
                    );
                    return Some(Err(Refusal::WarmingUp { retry_after: wait, exit_id: exit }));
                }
                Taken::Granted { exit, lease, session } => {
                    let mut st = self.state.lock();
                    // A keyless lease may have gone to one of the fallbacks.
                    let adopted = if exit == ids[0] { Ok((h, choice)) } else { st.adopt(view, key, &exit, site_id, now, choice) };
                    return Some(match adopted {
                        Ok((h, choice)) => {
                            let choice = if session { Choice::Session } else { choice };
                            if let Some(key) = key {
                                if st.sessions.live(key, now).is_some_and(|s| s.exit != h) {
                                    // Another worker bound this key meanwhile: the fleet's binding wins.
                                    st.sessions.end(key);
                                }
                                // Unrenewed, the fleet's copy kept its expiry: so does this one.
                                if renew || !session || st.sessions.live(key, now).is_none() {
                                    st.sessions.bind(key, h, now + session_ttl);
                                }
                            }
                            Ok(st.commit(h, choice, key, site_id, now, lease))
                        }
                        Err(refusal) => {
                            drop(st);
                            let r = sh.store.hand_back(&exit, lease, None);
                            self.stuck(sh, r, now);
                            Err(refusal)
                        }
                    });
                }
            }
        }
        // The session moved again meanwhile: as busy as full, for a moment.
        Some(Err(Refusal::Full))
    }

    /// Records whether the store answered, announcing a change either way; true if it did.
    fn heard(&self, sh: &Shared, r: std::result::Result<(), StoreError>, now: f64) -> bool {
        let mut link = sh.link.lock();
        match r {
            Ok(()) => {
                if !link.online {
                    link.online = true;
                    link.next_refresh = now;
                    drop(link);
                    let msg = format!("{} answers again: rejoining the fleet", sh.store.describe());
                    self.state.lock().fleet.events.push(now, EventKind::StoreRejoined, None, None, msg);
                }
                true
            }
            Err(StoreError::Unavailable(why)) | Err(StoreError::Protocol(why)) => {
                if link.online {
                    link.online = false;
                    drop(link);
                    let msg = format!("{why}; serving from this worker's own state until it answers");
                    self.state.lock().fleet.events.push(now, EventKind::StoreUnavailable, None, None, msg);
                }
                false
            }
        }
    }

    /// Records a failure the store reports without having been asked anything (a hand-back
    /// kept because the store did not take it): `Ok` there says nothing of whether it answers.
    fn stuck(&self, sh: &Shared, r: std::result::Result<(), StoreError>, now: f64) {
        if r.is_err() {
            self.heard(sh, r, now);
        }
    }

    /// Brings the local copy of the fleet's health up to date, at most once a second.
    fn sync_health(&self, sh: &Shared) {
        let now = self.clock.now();
        let since = {
            let mut link = sh.link.lock();
            if now < link.next_refresh || !link.online {
                return;
            }
            link.next_refresh = now + HEALTH_REFRESH;
            link.seen
        };
        let r = sh.store.verdicts(since);
        if !self.heard(sh, r.as_ref().map(drop).map_err(Clone::clone), now) {
            return;
        }
        let Ok((verdicts, last)) = r else { return };
        let mut st = self.state.lock();
        for v in verdicts.iter().filter(|v| v.origin != sh.origin) {
            if v.exit.is_empty() {
                if !v.site.is_empty() && v.site != UNSCOPED {
                    let site = st.site_id(Some(&v.site));
                    st.fleet.impose_incident(site, v.state == Health::Quarantined, v.hold, now);
                }
                continue;
            }
            let Some(&h) = st.by_id.get(&v.exit) else { continue };
            if st.exits[h as usize].removed {
                continue;
            }
            let site = match v.site.as_str() {
                "" => None,
                UNSCOPED => Some(0),
                name => Some(st.site_id(Some(name))),
            };
            st.fleet.impose(h, site, v.state, v.hold, now, Reason::Fleet);
        }
        drop(st);
        let mut link = sh.link.lock();
        link.seen = link.seen.max(last);
    }

    /// Sends this worker's new verdicts to the fleet. An ejection the fleet-wide cap refuses
    /// is turned into reduced weight here, as a local refusal would have been.
    fn publish_verdicts(&self, sh: &Shared, now: f64) {
        let (pending, cap) = {
            let mut st = self.state.lock();
            let Some(outbox) = st.fleet.outbox.as_mut() else { return };
            if outbox.is_empty() {
                return;
            }
            let pending: Vec<_> = std::mem::take(outbox);
            let in_service = st.views[0].members.len() as u32;
            let cap = st.fleet.ejection_cap(in_service);
            let named: Vec<_> = pending
                .into_iter()
                .map(|Pending { exit: h, site, state, hold }| {
                    let v = Verdict {
                        // A site's own verdict (an incident) names no exit.
                        exit: if h == SITE_VERDICT { String::new() } else { st.exits[h as usize].exit.id.clone() },
                        site: match site {
                            None => String::new(),
                            Some(0) => UNSCOPED.to_owned(),
                            Some(s) => st.site_names[s as usize].to_string(),
                        },
                        state,
                        hold,
                        origin: sh.origin,
                        seq: 0,
                    };
                    (h, site, v)
                })
                .collect();
            (named, cap)
        };
        for (h, site, v) in pending {
            let r = sh.store.publish(&v, cap);
            if !self.heard(sh, r.as_ref().map(drop).map_err(Clone::clone), now) {
                return;
            }
            if r == Ok(false) && h != SITE_VERDICT {
                let mut st = self.state.lock();
                if st.fleet.state(h, site) == v.state {
                    st.fleet.impose(h, site, Health::Degraded, 0.0, now, Reason::FleetCapRefused);
                }
            }
        }
    }

    /// Fleet-wide figures for these exits, if there is a store and it answers.
    pub fn fleet_counts(&self, ids: &[&str]) -> Option<Vec<ExitCounts>> {
        let sh = self.shared.as_ref()?;
        let r = sh.store.counts(ids);
        self.heard(sh, r.as_ref().map(drop).map_err(Clone::clone), self.clock.now());
        r.ok()
    }
}

impl State {
    fn site_tally(&mut self, site: u32, h: u32) -> &mut Tally {
        if self.site_tallies.len() <= site as usize {
            self.site_tallies.resize_with(site as usize + 1, Vec::new);
        }
        let row = &mut self.site_tallies[site as usize];
        if row.len() <= h as usize {
            row.resize_with(h as usize + 1, Tally::default);
        }
        &mut row[h as usize]
    }

    fn handle(&self, exit_id: &str) -> Result<u32> {
        match self.by_id.get(exit_id) {
            Some(&h) if !self.exits[h as usize].removed => Ok(h),
            _ => Err(Error::UnknownExit(exit_id.to_owned())),
        }
    }

    fn view(&mut self, filter: Vec<(String, String)>) -> Result<u32> {
        if let Some(&v) = self.view_ids.get(&filter) {
            return Ok(v);
        }
        let mut view = View {
            filter: filter.clone(),
            members: Vec::new(),
            ring: Ring::new(self.cfg.replicas, DEFAULT_SALT)?,
            weight_total: 0,
            selector: Selector::default(),
        };
        let members: Vec<u32> = (0..self.exits.len() as u32)
            .filter(|&h| {
                let s = &self.exits[h as usize];
                !s.removed && !s.benched && view.matches(&s.exit)
            })
            .collect();
        view.ring = Ring::build(
            self.cfg.replicas,
            DEFAULT_SALT,
            members.iter().map(|&h| {
                let e = &self.exits[h as usize].exit;
                (e.id.as_str(), e.capacity, h)
            }),
        )?;
        view.weight_total = members.iter().map(|&h| self.exits[h as usize].exit.capacity.max(1) as u64).sum();
        view.members = members;
        view.selector.reset(view.members.len());
        let id = self.views.len() as u32;
        self.views.push(view);
        self.view_ids.insert(filter, id);
        Ok(id)
    }

    /// Refuses, before any view changes, an exit whose points would overfill a view's ring.
    fn check_room(&self, exit: &Exit) -> Result<()> {
        self.views.iter().filter(|v| v.matches(exit)).try_for_each(|v| v.ring.check_room(&exit.id, exit.capacity))
    }

    fn join_views(&mut self, h: u32) -> Result<()> {
        let exit = self.exits[h as usize].exit.clone();
        self.check_room(&exit)?;
        for view in self.views.iter_mut().filter(|v| v.matches(&exit)) {
            if let Err(pos) = view.members.binary_search(&h) {
                view.ring.add(&exit.id, exit.capacity, h)?;
                view.members.insert(pos, h);
                view.weight_total += exit.capacity.max(1) as u64;
                view.selector.reset(view.members.len());
            }
        }
        Ok(())
    }

    fn leave_views(&mut self, h: u32) -> Result<()> {
        let exit = self.exits[h as usize].exit.clone();
        for view in self.views.iter_mut() {
            if let Ok(pos) = view.members.binary_search(&h) {
                view.ring.remove(&exit.id)?;
                view.members.remove(pos);
                view.weight_total -= exit.capacity.max(1) as u64;
                view.selector.reset(view.members.len());
            }
        }
        Ok(())
    }

    /// Expires overdue leases; true if any slot was freed.
    #[inline]
    fn expire(&mut self, now: f64) -> bool {
        let mut freed = false;
        let exits = &mut self.exits;
        let counts = &mut self.counts;
        let fleet = &mut self.fleet;
        let lease_ttl = self.cfg.lease_ttl;
        self.leases.expire_due(now, |_, rec: LeaseRec| {
            exits[rec.exit as usize].active -= 1;
            counts.expired += 1;
            fleet.abandon(rec.exit, rec.site, rec.trial);
            fleet.events.push(
                now,
                EventKind::LeaseExpired,
                Some(rec.exit),
                (rec.site != 0).then_some(rec.site),
                format!("a lease taken at {:.3} was not released within lease_ttl {lease_ttl} s; its slot is free again", rec.started),
            );
            freed = true;
        });
        freed
    }

    fn site_id(&mut self, site: Option<&str>) -> u32 {
        let Some(site) = site else { return 0 };
        if let Some(&id) = self.sites.get(site) {
            return id;
        }
        let id = self.sites.len() as u32 + 1;
        self.sites.insert(site.into(), id);
        self.site_names.push(site.into());
        self.last_used.push(Vec::new());
        self.fleet.ensure_site(id);
        id
    }

    /// The exit for a new session of `key` in `view`: its ring exit when that exit may serve
    /// the site (and is under its bound, with bounded loads), else the next one clockwise that
    /// is. The walk happens only when the ring exit is out, so the common case costs one lookup.
    fn ring_pick(&self, view: u32, key: &str, site: u32, now: f64) -> std::result::Result<(u32, Choice), Refusal> {
        let v = &self.views[view as usize];
        let first = v.ring.assign(key).ok_or(Refusal::NoExits)?;
        let admitted = |h: u32| self.fleet.admits(h, site, now) == Admit::Yes;
        // Mirrokni, Thorup and Zadimoghaddam: no exit may carry more than c times its
        // capacity-weighted share of the live sessions, counting the one being placed.
        let total = self.sessions.total() as f64 + 1.0;
        let under = |h: u32| match self.cfg.balance_factor {
            None => true,
            Some(c) => {
                let w = self.exits[h as usize].exit.capacity.max(1) as f64;
                (self.sessions.load(h) as f64) < (c * total * w / v.weight_total.max(1) as f64).ceil()
            }
        };
        if admitted(first) && under(first) {
            return Ok((first, Choice::Ring));
        }
        let walked = if admitted(first) { Choice::Bounded } else { Choice::Next };
        if let Some(h) = v.ring.walk(key).find(|&h| admitted(h) && under(h)) {
            return Ok((h, walked));
        }
        if let Some(h) = v.ring.walk(key).find(|&h| admitted(h)) {
            return Ok((h, Choice::Next));
        }
        Err(self.why_none(view, site, &[], now))
    }

    /// Why no member of the view could take a lease: cooling (retry later), full (a release
    /// will free a slot, or a probing exit's trial will come back), or out of service.
    fn why_none(&self, view: u32, site: u32, avoid: &[u32], now: f64) -> Refusal {
        if let Some(wait) = self.soonest_cool(view, site, now) {
            return Refusal::Cooling { wait, why: RATE_LIMITED_ALL };
        }
        let max_leases = self.cfg.max_leases.unwrap_or(u32::MAX);
        let waitable = self.views[view as usize]
            .members
            .iter()
            .filter(|h| !avoid.contains(h))
            .any(|&h| self.exits[h as usize].active >= max_leases || self.fleet.state(h, Some(site)) == Health::Probing);
        if waitable {
            Refusal::Full
        } else {
            Refusal::OutOfService
        }
    }

    /// The soonest a cooling member of the view may serve the site again, if any is cooling.
    fn soonest_cool(&self, view: u32, site: u32, now: f64) -> Option<f64> {
        self.views[view as usize]
            .members
            .iter()
            .filter_map(|&h| match self.fleet.admits(h, site, now) {
                Admit::Cooling(until) => Some(until - now),
                _ => None,
            })
            .fold(None, |m: Option<f64>, w| Some(m.map_or(w, |m| m.min(w))))
    }

    #[inline]
    fn attempt(
        &mut self,
        view: u32,
        key: Option<&str>,
        site: Option<&str>,
        avoid: &[&str],
        now: f64,
    ) -> std::result::Result<Grant, Refusal> {
        let site = self.site_id(site);
        let avoid = self.avoided(key, avoid);
        let (h, choice) = self.decide(view, key, site, &avoid, now, true)?;
        if let Some(key) = key {
            if let Some(cfg) = &self.cfg.warmup {
                if let Err(wait) = self.pairings.admit(cfg, key, h, now) {
                    self.fleet.events.push(
                        now,
                        EventKind::WarmingUp,
                        Some(h),
                        (site != 0).then_some(site),
                        format!("a new pairing of key {key:?} must wait {wait:.3} s (warm-up ramp)"),
                    );
                    return Err(Refusal::WarmingUp { retry_after: wait, exit_id: self.exits[h as usize].exit.id.clone() });
                }
            }
            self.sessions.bind(key, h, now + self.cfg.session_ttl);
        }
        Ok(self.commit(h, choice, key, site, now, 0))
    }

    /// Where a lease would go now, deciding nothing yet: the key's session exit or its ring
    /// exit, or the strategy's pick for a keyless lease. Refuses for the reasons the caller
    /// can act on (a lost session, cooling, full, nothing in service). With a shared store the
    /// store knows the sessions (`local_sessions` false): another worker may have ended one.
    #[inline]
    fn decide(
        &mut self,
        view: u32,
        key: Option<&str>,
        site: u32,
        avoid: &[u32],
        now: f64,
        local_sessions: bool,
    ) -> std::result::Result<(u32, Choice), Refusal> {
        let max_leases = self.cfg.max_leases.unwrap_or(u32::MAX);
        self.fleet.poll(now);
        self.fleet.gate_check(site, now).map_err(|wait| Refusal::Cooling { wait, why: INCIDENT })?;
        match key {
            Some(key) => {
                self.sessions.sweep(now, self.cfg.session_ttl / 16.0);
                let live = if local_sessions { self.sessions.live(key, now) } else { None };
                let (h, choice) = match live {
                    Some(s) => (self.session_exit(view, key, s.exit, site, now)?, Choice::Session),
                    None => self.ring_pick(view, key, site, now)?,
                };
                if self.exits[h as usize].active >= max_leases {
                    return Err(Refusal::Full);
                }
                Ok((h, choice))
            }
            None => {
                let strategy = self.cfg.strategy;
                let lru = strategy == Strategy::Lru;
                if lru && self.last_used[site as usize].len() < self.exits.len() {
                    let n = self.exits.len();
                    self.last_used[site as usize].resize(n, f64::NEG_INFINITY);
                }
                let State { views, exits, last_used, rng, cfg, fleet, .. } = self;
                let v = &mut views[view as usize];
                let members =
                    ViewMembers { members: &v.members, exits, max_leases, last_used: &last_used[site as usize], fleet, site, now };
                let lru_clock = lru.then_some((now, cfg.cooldown));
                let picked = if avoid.is_empty() {
                    v.selector.pick(strategy, &members, rng, lru_clock)
                } else {
                    v.selector.pick(strategy, &Avoiding { inner: members, avoid }, rng, lru_clock)
                };
                let m = match picked {
                    Ok(m) => m,
                    Err(NoPick::Cooling(wait)) => return Err(Refusal::Cooling { wait, why: LRU_COOLDOWN }),
                    Err(NoPick::Nothing) if v.members.is_empty() => return Err(Refusal::NoExits),
                    Err(NoPick::Nothing) => return Err(self.why_none(view, site, avoid, now)),
                };
                let h = v.members[m];
                if lru {
                    last_used[site as usize][h as usize] = now;
                }
                Ok((h, Choice::Strategy(strategy)))
            }
        }
    }

    /// A live session's exit, if it can serve: a session never moves, so an exit that cannot
    /// is reported (`SessionExitLost`), never silently replaced.
    fn session_exit(&mut self, view: u32, key: &str, h: u32, site: u32, now: f64) -> std::result::Result<u32, Refusal> {
        let slot = &self.exits[h as usize];
        let why = if slot.removed {
            Some("its exit was removed from the pool")
        } else if view != 0 && !self.views[view as usize].matches(&slot.exit) {
            Some("its exit is outside this subset")
        } else {
            self.fleet.lost(h, site)
        };
        if let Some(why) = why {
            let exit_id = slot.exit.id.clone();
            self.fleet.events.push(
                now,
                EventKind::SessionLost,
                Some(h),
                (site != 0).then_some(site),
                format!("session of key {key:?}: {why}; not moved"),
            );
            return Err(Refusal::SessionExitLost { key: key.to_owned(), exit_id, why });
        }
        match self.fleet.admits(h, site, now) {
            Admit::Yes => Ok(h),
            Admit::Cooling(until) => Err(Refusal::Cooling { wait: until - now, why: RATE_LIMITED_ONE }),
            // Probing with every trial out: wait for one to come back.
            Admit::No(_) => Err(Refusal::Full),
        }
    }

    /// Other members of the view that could take a keyless lease for the site, fewest local
    /// leases first, for the store to try when the pick is full fleet-wide.
    fn fallbacks(&self, view: u32, picked: u32, site: u32, avoid: &[u32], now: f64, out: &mut Vec<Arc<Exit>>) {
        let max_leases = self.cfg.max_leases.unwrap_or(u32::MAX);
        let mut more: Vec<u32> = self.views[view as usize]
            .members
            .iter()
            .copied()
            .filter(|&h| {
                h != picked
                    && !avoid.contains(&h)
                    && self.exits[h as usize].active < max_leases
                    && self.fleet.admits(h, site, now) == Admit::Yes
            })
            .collect();
        more.sort_by_key(|&h| self.exits[h as usize].active);
        out.extend(more.into_iter().take(KEYLESS_FALLBACKS).map(|h| self.exits[h as usize].exit.clone()));
    }

    /// The handles of the exits a keyless pick must pass over (none for a keyed lease); ids
    /// no longer in the pool are dropped. Empty, it allocates nothing.
    fn avoided(&self, key: Option<&str>, avoid: &[&str]) -> Vec<u32> {
        match key {
            Some(_) => Vec::new(),
            None => avoid.iter().filter_map(|id| self.by_id.get(*id).copied()).collect(),
        }
    }

    /// The store granted a slot on another exit than the one decided here: for a keyless
    /// lease, one of the fallbacks; for a keyed one, the exit of a session another worker
    /// bound, which must be able to serve here too.
    fn adopt(
        &mut self,
        view: u32,
        key: Option<&str>,
        exit: &str,
        site: u32,
        now: f64,
        choice: Choice,
    ) -> std::result::Result<(u32, Choice), Refusal> {
        let Some(&h) = self.by_id.get(exit) else {
            let key = key.unwrap_or("").to_owned();
            return Err(Refusal::SessionExitLost { key, exit_id: exit.to_owned(), why: "its exit is not in this worker's pool" });
        };
        match key {
            None => Ok((h, choice)),
            Some(key) => Ok((self.session_exit(view, key, h, site, now)?, Choice::Session)),
        }
    }

    /// Records a lease of exit `h` (`remote`: its id in the shared store, 0 if none).
    #[inline]
    fn commit(&mut self, h: u32, choice: Choice, key: Option<&str>, site: u32, now: f64, remote: u64) -> Grant {
        self.fleet.gate_pass(site, now);
        let state = self.fleet.state(h, Some(site));
        let trial = self.fleet.on_lease(h, site);
        let slot = &mut self.exits[h as usize];
        slot.active += 1;
        slot.last_lease = now;
        slot.tally.leases += 1;
        let exit = slot.exit.clone();
        let identity = match key {
            Some(k) if self.cfg.calibrate => identity_of(k),
            _ => 0,
        };
        let id = self.leases.insert(LeaseRec { exit: h, site, trial, identity, remote, started: now, expires: now + self.cfg.lease_ttl });
        self.counts.acquired += 1;
        Grant { id, exit, choice, state, waited: 0.0 }
    }
}

/// A key's identity for capacity measurement: any stable 64-bit hash will do, and 0 is
/// kept for "no key".
fn identity_of(key: &str) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish().max(1)
}

/// One day: the horizon of capacity measurement (the ring article's rolling 24 h).
const CALIBRATION_HORIZON: f64 = 86_400.0;
/// Measured capacities are clamped here (the ring article's [1, 6]).
const CALIBRATED_MAX: u32 = 6;
