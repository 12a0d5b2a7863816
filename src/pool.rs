//! The pool: leases, sticky sessions, keyless selection and warm-up over one set of exits.
//!
//! All state sits behind one mutex held for a few hundred nanoseconds per call; a caller that
//! must wait for a free slot sleeps on a condition variable with the lock released.
//! Views (`subset`) are extra rings and member lists over the same exits, sharing every lease,
//! session and counter with the whole pool.

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::lease::{LeaseId, LeaseRec, Leases};
use crate::outcome::{Report, OUTCOMES};
use crate::ring::{Ring, DEFAULT_SALT};
use crate::select::{Members, NoPick, Selector, Strategy};
use crate::session::Sessions;
use crate::warmup::{Pairings, WarmupConfig};
use parking_lot::{Condvar, Mutex};
use rand::rngs::SmallRng;
use rand::SeedableRng;
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
        }
    }
}

impl Config {
    pub fn validate(&self) -> Result<()> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(Error::BadInput(format!("{name} {v} must be a finite number of seconds > 0")))
            }
        };
        positive("session_ttl", self.session_ttl)?;
        positive("lease_ttl", self.lease_ttl)?;
        if !(self.cooldown.is_finite() && self.cooldown >= 0.0) {
            return Err(Error::BadInput(format!("cooldown {} must be a finite number of seconds >= 0", self.cooldown)));
        }
        if self.max_leases == Some(0) {
            return Err(Error::BadInput("max_leases 0 would let no lease through; use None for no limit".into()));
        }
        if let Some(c) = self.balance_factor {
            if !(c.is_finite() && c > 1.0) {
                return Err(Error::BadInput(format!("balance_factor {c} must be a finite number > 1 (HAProxy suggests 1.25 to 2)")));
            }
        }
        if self.replicas == 0 {
            return Err(Error::BadInput("replicas must be at least 1, got 0".into()));
        }
        Ok(())
    }
}

/// Why a lease could not be granted now.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// Every candidate exit is at `max_leases`; waiting may help.
    Full,
    /// The view has no exit in service at all.
    NoExits,
    /// Keyless `lru`: every exit used this site within the cooldown.
    Cooling(f64),
    /// The key's pairing with its exit is new and must wait this long.
    WarmingUp { retry_after: f64, exit_id: String },
    /// The key's live session is bound to an exit that cannot serve it.
    SessionExitLost { key: String, exit_id: String, why: &'static str },
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
    /// A keyless lease, by the pool's strategy.
    Strategy(Strategy),
}

impl Choice {
    pub fn name(self) -> &'static str {
        match self {
            Choice::Session => "session",
            Choice::Ring => "ring",
            Choice::Bounded => "ring_bounded",
            Choice::Strategy(s) => s.name(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Grant {
    pub id: LeaseId,
    pub exit: Arc<Exit>,
    pub choice: Choice,
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
    active: u32,
    benched: bool,
    removed: bool,
    leases: u64,
    outcomes: [u64; 8],
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
    /// Per site, per exit handle: when it last served that site (for `lru`).
    last_used: Vec<Vec<f64>>,
    rng: SmallRng,
    counts: Counts,
    waiters: u32,
}

pub struct Pool {
    state: Mutex<State>,
    freed: Condvar,
    clock: Arc<dyn Clock>,
}

/// The view's members as the selection strategies see them.
struct ViewMembers<'a> {
    members: &'a [u32],
    exits: &'a [ExitSlot],
    max_leases: u32,
    last_used: &'a [f64],
}

impl Members for ViewMembers<'_> {
    fn len(&self) -> usize {
        self.members.len()
    }
    #[inline]
    fn eligible(&self, m: usize) -> bool {
        self.exits[self.members[m] as usize].active < self.max_leases
    }
    #[inline]
    fn weight(&self, m: usize) -> i64 {
        self.exits[self.members[m] as usize].exit.capacity.max(1) as i64
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

/// Per-exit figures for snapshots.
#[derive(Debug, Clone)]
pub struct ExitView {
    pub exit: Arc<Exit>,
    pub active: u32,
    pub benched: bool,
    pub sessions: u32,
    pub leases: u64,
    pub outcomes: [u64; 8],
}

#[derive(Debug, Clone)]
pub struct Snapshot {
    pub now: f64,
    pub exits: Vec<ExitView>,
    pub sessions: usize,
    pub live_leases: usize,
    pub counts: Counts,
}

fn random_seed() -> u64 {
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
            if by_id.insert(e.id.clone(), i as u32).is_some() {
                return Err(Error::DuplicateExit(e.id.clone()));
            }
        }
        let slots: Vec<ExitSlot> = exits
            .into_iter()
            .map(|e| ExitSlot { exit: Arc::new(e), active: 0, benched: false, removed: false, leases: 0, outcomes: [0; 8] })
            .collect();
        let rng = SmallRng::seed_from_u64(cfg.seed.unwrap_or_else(random_seed));
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
            last_used: vec![Vec::new()],
            rng,
            counts: Counts::default(),
            waiters: 0,
        };
        state.view(Vec::new())?;
        Ok(Pool { state: Mutex::new(state), freed: Condvar::new(), clock })
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
        let now = self.clock.now();
        let mut st = self.state.lock();
        let wake = st.expire(now) && st.waiters > 0;
        let r = st.attempt(view, key, site, now);
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
            }
        }
        r
    }

    /// Counts one lease that had to wait `seconds` for its slot. For callers that wait in
    /// slices (the bindings, to let Ctrl-C through) and count the whole wait once.
    pub fn record_wait(&self, seconds: f64) {
        let _ = seconds;
        self.state.lock().counts.waits += 1;
    }

    /// One bounded wait, counting nothing: `Grant::waited` is 0 when no wait was needed.
    pub fn acquire_within(&self, view: u32, key: Option<&str>, site: Option<&str>, timeout: Duration) -> std::result::Result<Grant, Refusal> {
        let started = Instant::now();
        // `None` from Python arrives as a huge timeout; a deadline past the clock's range is "never".
        let deadline = started.checked_add(timeout).unwrap_or_else(|| started + Duration::from_secs(100 * 365 * 86_400));
        let mut st = self.state.lock();
        let mut waited = false;
        loop {
            let now = self.clock.now();
            if st.expire(now) && st.waiters > 0 {
                self.freed.notify_all();
            }
            match st.attempt(view, key, site, now) {
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
    pub fn release(&self, id: LeaseId, report: &Report) -> bool {
        let now = self.clock.now();
        let mut st = self.state.lock();
        // A lease whose time ran out has expired, whether or not anyone looked since.
        let expired = st.expire(now);
        let released = match st.leases.take(id) {
            None => {
                st.counts.ignored_releases += 1;
                false
            }
            Some(rec) => {
                let slot = &mut st.exits[rec.exit as usize];
                slot.active -= 1;
                slot.outcomes[report.outcome as usize] += 1;
                st.counts.released += 1;
                st.counts.outcomes[report.outcome as usize] += 1;
                true
            }
        };
        let wake = (expired || released) && st.waiters > 0;
        drop(st);
        if wake {
            self.freed.notify_all();
        }
        released
    }

    /// Where a key lives now: its live session's exit, else its ring exit. Leases nothing.
    pub fn assign(&self, view: u32, key: &str) -> std::result::Result<Arc<Exit>, Refusal> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        if let Some(s) = st.sessions.live(key, now) {
            return Ok(st.exits[s.exit as usize].exit.clone());
        }
        let h = st.ring_pick(view, key).ok_or(Refusal::NoExits)?.0;
        Ok(st.exits[h as usize].exit.clone())
    }

    /// Stops new sessions on an exit; live ones drain. Returns their keys, which move when
    /// their sessions end.
    pub fn bench(&self, exit_id: &str) -> Result<Vec<String>> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        if !st.exits[h as usize].benched {
            st.exits[h as usize].benched = true;
            st.leave_views(h)?;
        }
        Ok(st.sessions.keys_on(h, now))
    }

    pub fn unbench(&self, exit_id: &str) -> Result<()> {
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        if st.exits[h as usize].benched {
            st.exits[h as usize].benched = false;
            st.join_views(h)?;
        }
        Ok(())
    }

    /// Ends a key's session; its next lease binds afresh from the ring.
    pub fn end_session(&self, key: &str) -> bool {
        self.state.lock().sessions.end(key).is_some()
    }

    pub fn add(&self, exit: Exit) -> Result<()> {
        let mut st = self.state.lock();
        let h = match st.by_id.get(&exit.id).copied() {
            Some(h) if !st.exits[h as usize].removed => return Err(Error::DuplicateExit(exit.id)),
            Some(h) => {
                // The same id again: the same slot, so its history and pairings carry over.
                let slot = &mut st.exits[h as usize];
                slot.exit = Arc::new(exit);
                slot.removed = false;
                slot.benched = false;
                h
            }
            None => {
                let h = st.exits.len() as u32;
                st.by_id.insert(exit.id.clone(), h);
                st.exits.push(ExitSlot { exit: Arc::new(exit), active: 0, benched: false, removed: false, leases: 0, outcomes: [0; 8] });
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
        let slot = &mut st.exits[h as usize];
        slot.removed = true;
        slot.benched = false;
        Ok(slot.exit.clone())
    }

    /// Changes one exit's weight; only its own arcs move.
    pub fn set_capacity(&self, exit_id: &str, capacity: u32) -> Result<()> {
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        let in_service = !st.exits[h as usize].benched;
        if in_service {
            st.leave_views(h)?;
        }
        let slot = &mut st.exits[h as usize];
        let mut exit = (*slot.exit).clone();
        exit.capacity = capacity;
        slot.exit = Arc::new(exit);
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

    pub fn snapshot(&self) -> Snapshot {
        let now = self.clock.now();
        let mut st = self.state.lock();
        if st.expire(now) && st.waiters > 0 {
            self.freed.notify_all();
        }
        let st = &*st;
        let mut sessions_per_exit = vec![0u32; st.exits.len()];
        for (_, s) in st.sessions.iter() {
            if s.expires > now {
                sessions_per_exit[s.exit as usize] += 1;
            }
        }
        let exits = st
            .exits
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.removed)
            .map(|(h, s)| ExitView {
                exit: s.exit.clone(),
                active: s.active,
                benched: s.benched,
                sessions: sessions_per_exit[h],
                leases: s.leases,
                outcomes: s.outcomes,
            })
            .collect();
        Snapshot {
            now,
            exits,
            sessions: sessions_per_exit.iter().map(|&n| n as usize).sum(),
            live_leases: st.leases.live(),
            counts: st.counts.clone(),
        }
    }
}

impl State {
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
        view.ring = Ring::build(self.cfg.replicas, DEFAULT_SALT, members.iter().map(|&h| {
            let e = &self.exits[h as usize].exit;
            (e.id.as_str(), e.capacity, h)
        }))?;
        view.weight_total = members.iter().map(|&h| self.exits[h as usize].exit.capacity.max(1) as u64).sum();
        view.members = members;
        view.selector.reset(view.members.len());
        let id = self.views.len() as u32;
        self.views.push(view);
        self.view_ids.insert(filter, id);
        Ok(id)
    }

    fn join_views(&mut self, h: u32) -> Result<()> {
        let exit = self.exits[h as usize].exit.clone();
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
        self.leases.expire_due(now, |_, rec: LeaseRec| {
            exits[rec.exit as usize].active -= 1;
            counts.expired += 1;
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
        self.last_used.push(Vec::new());
        id
    }

    /// The ring's choice for a new session of `key` in `view`, walking on past exits over
    /// their bound when bounded loads are on.
    fn ring_pick(&self, view: u32, key: &str) -> Option<(u32, Choice)> {
        let v = &self.views[view as usize];
        let first = v.ring.assign(key)?;
        let Some(c) = self.cfg.balance_factor else { return Some((first, Choice::Ring)) };
        // Mirrokni, Thorup and Zadimoghaddam: no exit may carry more than c times its
        // capacity-weighted share of the live sessions, counting the one being placed.
        let total = self.sessions.total() as f64 + 1.0;
        let under = |h: u32| {
            let w = self.exits[h as usize].exit.capacity.max(1) as f64;
            let bound = (c * total * w / v.weight_total.max(1) as f64).ceil();
            (self.sessions.load(h) as f64) < bound
        };
        if under(first) {
            return Some((first, Choice::Ring));
        }
        Some(v.ring.walk(key).find(|&h| under(h)).map_or((first, Choice::Ring), |h| (h, Choice::Bounded)))
    }

    #[inline]
    fn attempt(&mut self, view: u32, key: Option<&str>, site: Option<&str>, now: f64) -> std::result::Result<Grant, Refusal> {
        let max_leases = self.cfg.max_leases.unwrap_or(u32::MAX);
        let site = self.site_id(site);
        let (h, choice) = match key {
            Some(key) => {
                self.sessions.sweep(now, self.cfg.session_ttl / 16.0);
                let (h, choice) = match self.sessions.live(key, now) {
                    Some(s) => {
                        let slot = &self.exits[s.exit as usize];
                        let lost = |why| Refusal::SessionExitLost { key: key.to_owned(), exit_id: slot.exit.id.clone(), why };
                        if slot.removed {
                            return Err(lost("its exit was removed from the pool"));
                        }
                        if view != 0 && !self.views[view as usize].matches(&slot.exit) {
                            return Err(lost("its exit is outside this subset"));
                        }
                        (s.exit, Choice::Session)
                    }
                    None => self.ring_pick(view, key).ok_or(Refusal::NoExits)?,
                };
                if self.exits[h as usize].active >= max_leases {
                    return Err(Refusal::Full);
                }
                if let Some(cfg) = &self.cfg.warmup {
                    if let Err(wait) = self.pairings.admit(cfg, key, h, now) {
                        return Err(Refusal::WarmingUp { retry_after: wait, exit_id: self.exits[h as usize].exit.id.clone() });
                    }
                }
                self.sessions.bind(key, h, now + self.cfg.session_ttl);
                (h, choice)
            }
            None => {
                let strategy = self.cfg.strategy;
                let lru = strategy == Strategy::Lru;
                if lru && self.last_used[site as usize].len() < self.exits.len() {
                    let n = self.exits.len();
                    self.last_used[site as usize].resize(n, f64::NEG_INFINITY);
                }
                let State { views, exits, last_used, rng, cfg, .. } = self;
                let v = &mut views[view as usize];
                let members = ViewMembers { members: &v.members, exits, max_leases, last_used: &last_used[site as usize] };
                let m = v.selector.pick(strategy, &members, rng, lru.then_some((now, cfg.cooldown))).map_err(|e| match e {
                    NoPick::Cooling(wait) => Refusal::Cooling(wait),
                    NoPick::Nothing if v.members.is_empty() => Refusal::NoExits,
                    NoPick::Nothing => Refusal::Full,
                })?;
                let h = v.members[m];
                if lru {
                    last_used[site as usize][h as usize] = now;
                }
                (h, Choice::Strategy(strategy))
            }
        };
        let slot = &mut self.exits[h as usize];
        slot.active += 1;
        slot.leases += 1;
        let exit = slot.exit.clone();
        let id = self.leases.insert(LeaseRec { exit: h, site, started: now, expires: now + self.cfg.lease_ttl });
        self.counts.acquired += 1;
        Ok(Grant { id, exit, choice, waited: 0.0 })
    }
}

/// Names of the outcome counters, in `Counts::outcomes` order.
pub fn outcome_names() -> [&'static str; 8] {
    OUTCOMES.map(|o| o.name())
}
