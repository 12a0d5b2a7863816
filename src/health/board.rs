//! The pool-wide health board: every breaker, and the safeguards that judge them together.
//!
//! One breaker per exit for its tunnel and one per (exit, site). A single exit's trip is
//! the breaker's call; whether it may eject is the board's. Hard evidence (a tunnel breaker's
//! trip: refused or broken connections, a drift) always ejects: dead is not an outlier. Soft
//! evidence (an (exit, site) breaker's trip: blocks, captchas, timeouts) ejects at most
//! `max_ejected` of the pool at once (one always may) and leaves `min_in_service` serving.
//! When most exits fail one site at once the site is at fault (a site incident): nobody is
//! punished for it and that site's leases are spaced out instead. When most tunnels fail at
//! once the fault is ours (network, probes) and no tunnel is judged. When fewer than
//! `panic_threshold` of the exits are left in service, the pool panics and serves from all.

use super::draw::{Draw, Gate, SiteGate};
use super::incidents::Incident;
use super::{Breaker, Ejection, HealthConfig, Reason, Signal, State, Transition};
use crate::events::{Event, EventKind, Events};
use crate::outcome::{Outcome, Report};
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// When a quarantined breaker (exit `h`'s tunnel, or its breaker for `site`; with `site`
/// [`GROUP_DUE`], the breaker of exit group `h`) is due a look.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Due {
    at: f64,
    h: u32,
    site: Option<u32>,
}

/// The `site` of a group's [`Due`]: no site id gets this far (a sentinel rather than another
/// field, so that the heap every quarantine goes through keeps its size and its comparison).
pub(super) const GROUP_DUE: u32 = u32::MAX;

impl Eq for Due {}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> Ordering {
        self.at.total_cmp(&other.at).then(self.h.cmp(&other.h)).then(self.site.cmp(&other.site))
    }
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What a lease gets from an exit's health for one site.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admit {
    Yes,
    /// Out of service (quarantined or dead, or a probing exit with its trials all out).
    No(State),
    /// Cooling for this site after a 429, until this time.
    Cooling(f64),
}

/// An active probe's verdict on an exit's tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Ok,
    Failed,
    /// It answered, but from another address than the exit's `ip`.
    Drifted,
    /// The proxy answered 407 Proxy Authentication Required: for a gateway's slot, the
    /// gateway refuses its credentials (its group goes out); for an exit of its own, a failure.
    // The pool's probes send it once gateways are wired in (issue 16).
    #[allow(dead_code)]
    CredentialsRejected,
}

/// The half-open periods a lease went out in as a trial, per breaker (0: not a trial there).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trial {
    pub tunnel: u32,
    pub site: u32,
}

impl Trial {
    pub fn any(self) -> bool {
        self.tunnel != 0 || self.site != 0
    }
}

/// The exit handle that marks an outbox verdict as being about the site itself (an incident).
pub const SITE_VERDICT: u32 = u32::MAX;

/// A verdict of this worker's, waiting to be published to the fleet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutboxVerdict {
    /// An exit handle, or `SITE_VERDICT`.
    pub exit: u32,
    /// `None` for the exit's tunnel.
    pub site: Option<u32>,
    pub state: State,
    /// Seconds the state holds (infinite for dead, 0 for states that end by evidence).
    pub hold: f64,
    /// A pace cut instead (`Verdict::pace`): the rate a 429 cut the pair to.
    pub pace: Option<f64>,
}

#[derive(Debug, Default)]
pub(super) struct SiteHealth {
    breakers: Vec<Breaker>,
    /// Per exit: its breaker's state and its cooldown, what a pick reads (see `SiteGate`);
    /// kept in step with `breakers` by `sync`.
    gates: Vec<SiteGate>,
    /// When each exit last got a 429 from the site (`-inf`: never): a block soon after is the
    /// site punishing that exit's pace, not the site failing (see `PACE_BAN_MEMORY`).
    limited_at: Vec<f64>,
    pub(super) failing: u32,
    ejected: u32,
    pub(super) incident: Option<Incident>,
    pub(super) incidents: u32,
    /// Fewer than `panic_threshold` of the exits serve this site, counting those out for
    /// their tunnel and those out for the site: its exits out for the site serve it again.
    panic: bool,
}

impl SiteHealth {
    /// Exit `h`'s gate, made if the exit has none yet.
    fn gate_mut(&mut self, h: u32) -> &mut SiteGate {
        let hu = h as usize;
        if self.gates.len() <= hu {
            self.gates.resize(hu + 1, SiteGate::default());
        }
        &mut self.gates[hu]
    }

    /// Exit `h`'s gate takes its breaker's state: called wherever that state changes.
    fn sync(&mut self, h: u32) {
        if let Some(state) = self.breakers.get(h as usize).map(Breaker::state) {
            self.gate_mut(h).state = state;
        }
    }
}

/// The recent outcomes of one exit over every site, for adaptive weights.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Recent {
    ok_bits: u64,
    calls: u32,
    latency: f64,
    latencies: u32,
}

/// Calls the adaptive weight looks back over, and how many it needs before it moves off
/// neutral (the balancing article: the last 500 requests, neutral under 20).
const RECENT_WINDOW: u32 = 64;
const RECENT_MIN: u32 = 20;
/// Latency at which the weight starts to fall (the article's 1500 ms).
const LATENCY_PAR: f64 = 1.5;
/// Adaptive weight bounds, as shares of an exit's capacity.
const WEIGHT_FLOOR: f64 = 0.05;
/// In panic, the share of its weight an exit out of service for its tunnel serves at: a
/// probing exit's, so that the exits still believed healthy take most of the traffic.
const PANIC_WEIGHT: f64 = 0.1;
/// How long after a 429 on a pair a block on it is the site banning that exit for its pace
/// (sites count strikes over a window, fail2ban's `findtime` is ten minutes by default): such
/// a block is evidence against the exit, never that the site fails, so bans that follow
/// rate limits on most exits do not make a site incident (which would excuse every exit and
/// hold the site's leases while the exits are what is wrong), nor keep one open once the site
/// is back (an exit banned before the incident answered 503 during it, then 403 for good).
const PACE_BAN_MEMORY: f64 = 600.0;

pub struct HealthBoard {
    pub cfg: HealthConfig,
    pub(super) tunnel: Vec<Breaker>,
    pub(super) sites: Vec<SiteHealth>,
    pub(super) recent: Vec<Recent>,
    /// Per exit: what a keyless pick asks about it (see `super::draw`), kept current by every
    /// report, transition and lease so that a pick reads one record per exit.
    draw: Vec<Draw>,
    pub(super) tunnel_failing: u32,
    tunnel_ejected: u32,
    /// Tunnel breakers of exits in no group quarantined or dead: the exits hard evidence
    /// holds out (a gateway's slots are judged for panic by the gateway's breaker).
    pub(super) tunnel_out: u32,
    /// Exits in the pool's service (its ring's members), as the pool last said.
    members: u32,
    /// Fewer than `panic_threshold` of `members` in service: every exit admits, whatever its
    /// tunnel or gateway says. Judged when those change, so that a lease reads one field.
    panic: bool,
    /// The least tunnel weight factor an exit gets: `PANIC_WEIGHT` in panic, else 0.
    panic_floor: f64,
    pub(super) global_incident: Option<f64>,
    /// Exit groups (a gateway's slots), group id `g` at `g - 1`; none in a pool without.
    pub(super) groups: Vec<super::Group>,
    next_poll: f64,
    /// Quarantines by when they end, soonest first (entries of breakers that changed since
    /// are dropped when they come up).
    due: BinaryHeap<Reverse<Due>>,
    /// When the pool was made: a site breaker created on a site's first report has been
    /// healthy since then, not since that report (so no hold time applies to it).
    born: f64,
    trials: u64,
    trial_successes: u64,
    /// Moves whenever a tunnel may have started admitting leases again (a transition, a trial
    /// handed back): selection looks at the exits it parked as out of service only then.
    pub readmissions: u64,
    pub events: Events,
    /// With a shared store: this worker's verdicts not yet published. `None` in a pool of its
    /// own, which pays nothing for it.
    pub outbox: Option<Vec<OutboxVerdict>>,
}

impl HealthBoard {
    pub fn new(cfg: HealthConfig, exits: usize, now: f64) -> HealthBoard {
        HealthBoard {
            cfg,
            tunnel: vec![Breaker::new(now); exits],
            sites: vec![SiteHealth::default()],
            recent: vec![Recent::default(); exits],
            draw: vec![Draw::default(); exits],
            tunnel_failing: 0,
            tunnel_ejected: 0,
            tunnel_out: 0,
            members: exits as u32,
            panic: false,
            panic_floor: 0.0,
            global_incident: None,
            groups: Vec::new(),
            next_poll: f64::INFINITY,
            due: BinaryHeap::new(),
            born: now,
            trials: 0,
            trial_successes: 0,
            readmissions: 0,
            events: Events::new(1000),
            outbox: None,
        }
    }

    /// Makes room for exit handle `h` (a new exit starts healthy).
    pub fn ensure_exit(&mut self, h: u32, now: f64) {
        let n = h as usize + 1;
        if self.tunnel.len() < n {
            self.tunnel.resize(n, Breaker::new(now));
            self.recent.resize(n, Recent::default());
            self.draw.resize(n, Draw::default());
        }
    }

    pub fn ensure_site(&mut self, site: u32) {
        if self.sites.len() <= site as usize {
            self.sites.resize_with(site as usize + 1, SiteHealth::default);
        }
    }

    /// Turns quarantines whose backoff is over into half-open trials. Costs one comparison
    /// until the earliest quarantine ends, then O(log n) for each one that ended: a pool of
    /// 100,000 exits with quarantines ending every second does not look at every breaker.
    #[inline]
    pub fn poll(&mut self, now: f64) {
        if now < self.next_poll {
            return;
        }
        while let Some(&Reverse(Due { at, h, site })) = self.due.peek() {
            if at > now {
                break;
            }
            self.due.pop();
            // A breaker that changed since this was scheduled answers None: nothing is due.
            match site {
                Some(GROUP_DUE) => self.group_poll(h, now),
                None => {
                    let b = &mut self.tunnel[h as usize];
                    let was = b.failing(&self.cfg);
                    if let Some(t) = b.poll(now) {
                        // Reports from leases taken before the quarantine may have counted meanwhile.
                        self.tunnel_failing -= was as u32;
                        self.readmissions += 1;
                        self.count(h, t, None);
                        self.refresh(h);
                        log_transition(&mut self.events, now, h, None, t, &self.cfg);
                        self.judge_panic(now);
                    }
                }
                Some(s) => {
                    let sh = &mut self.sites[s as usize];
                    let b = &mut sh.breakers[h as usize];
                    let was = b.failing(&self.cfg);
                    if let Some(t) = b.poll(now) {
                        sh.failing -= was as u32;
                        sh.sync(h);
                        log_transition(&mut self.events, now, h, Some(s), t, &self.cfg);
                    }
                }
            }
        }
        self.next_poll = self.due.peek().map_or(f64::INFINITY, |Reverse(d)| d.at);
    }

    /// Schedules a look at a breaker that has just been quarantined until `at`.
    pub(super) fn schedule(&mut self, at: f64, h: u32, site: Option<u32>) {
        self.due.push(Reverse(Due { at, h, site }));
        self.next_poll = self.next_poll.min(at);
    }

    /// Whether exit `h` may take a lease for `site` now.
    #[inline]
    pub fn admits(&self, h: u32, site: u32, now: f64) -> Admit {
        let t = &self.tunnel[h as usize];
        // `panic` is read only for an exit its tunnel or gateway holds out.
        if !t.admits(&self.cfg) && !self.panic {
            return Admit::No(t.state());
        }
        if t.group() != 0 && !self.group_admits(t.group()) && !self.group_panics(t.group()) {
            return Admit::No(self.group_state(t.group()));
        }
        self.site_admits(h, site, now)
    }

    /// Starts loading what a lease of exit `h` for `site` reads and writes on the board (its
    /// tunnel and site breakers for `admits`, `state` and `on_lease`, its record and site gate),
    /// each in an array of its own: at a random exit of a large pool every one is a cache
    /// miss, and asked for together they overlap.
    #[inline]
    pub fn prefetch(&self, h: u32, site: u32) {
        use crate::prefetch::prefetch;
        let hu = h as usize;
        prefetch(&self.tunnel[hu]);
        if let Some(b) = self.sites.get(site as usize).and_then(|sh| sh.breakers.get(hu)) {
            prefetch(b);
        }
        self.prefetch_pick(h, site);
    }

    /// Starts loading what a keyless pick asks about exit `h` for `site` (`tunnel_admits`,
    /// `site_admits`, `weight`, `active`, `capacity`): the exit's record, and its gate for the
    /// site if it has one.
    #[inline]
    pub fn prefetch_pick(&self, h: u32, site: u32) {
        use crate::prefetch::prefetch;
        let hu = h as usize;
        prefetch(&self.draw[hu]);
        if let Some(sh) = self.sites.get(site as usize) {
            if let Some(g) = sh.gates.get(hu) {
                prefetch(g);
            }
        }
    }

    /// [`HealthBoard::prefetch`] and what a report on exit `h` writes besides.
    #[inline]
    pub fn prefetch_report(&self, h: u32, site: u32) {
        self.prefetch(h, site);
        crate::prefetch::prefetch(&self.recent[h as usize]);
    }

    /// Whether exit `h`'s tunnel admits a lease, whatever the site. Reads the exit's record
    /// only, unless its state alone does not say (probing, or in a group).
    #[inline]
    pub fn tunnel_admits(&self, h: u32) -> bool {
        let fast = match self.draw[h as usize].gate {
            Gate::Open => true,
            Gate::Shut => self.panic,
            Gate::Ask => return self.tunnel_admits_slowly(h),
        };
        debug_assert_eq!(fast, self.tunnel_admits_slowly(h), "exit {h}'s record disagrees with its breakers");
        fast
    }

    /// [`HealthBoard::tunnel_admits`] from the breakers themselves.
    pub fn tunnel_admits_slowly(&self, h: u32) -> bool {
        let t = &self.tunnel[h as usize];
        if t.group() != 0 {
            return (t.admits(&self.cfg) || self.panic) && (self.group_admits(t.group()) || self.group_panics(t.group()));
        }
        t.admits(&self.cfg) || self.panic
    }

    /// Whether exit `h` may take a lease for `site` as far as that site goes (its breaker for
    /// the site and the site's rate limit), given that its tunnel admits one.
    #[inline]
    pub fn site_admits(&self, h: u32, site: u32, now: f64) -> Admit {
        let Some(sh) = self.sites.get(site as usize) else { return Admit::Yes };
        let Some(g) = sh.gates.get(h as usize) else {
            debug_assert_eq!(self.site_admits_slowly(h, site, now), Admit::Yes, "exit {h} has no gate for site {site}");
            return Admit::Yes;
        };
        // `panic` is read only for an exit its breaker for the site holds out; the breaker
        // itself only for a probing one.
        let out = match g.state {
            State::Healthy | State::Degraded => false,
            State::Quarantined | State::Dead => !sh.panic,
            State::Probing => !sh.panic && !sh.breakers[h as usize].admits(&self.cfg),
        };
        let fast = if out {
            Admit::No(g.state)
        } else if g.cool_until > now {
            Admit::Cooling(g.cool_until)
        } else {
            Admit::Yes
        };
        debug_assert_eq!(fast, self.site_admits_slowly(h, site, now), "exit {h}'s gate for site {site} disagrees with its breaker");
        fast
    }

    /// [`HealthBoard::site_admits`] from the site's breaker itself.
    fn site_admits_slowly(&self, h: u32, site: u32, now: f64) -> Admit {
        let Some(sh) = self.sites.get(site as usize) else { return Admit::Yes };
        if let Some(b) = sh.breakers.get(h as usize) {
            // `panic` is read only for an exit its breaker for the site holds out.
            if !b.admits(&self.cfg) && !sh.panic {
                return Admit::No(b.state());
            }
        }
        match sh.gates.get(h as usize).map(|g| g.cool_until) {
            Some(until) if until > now => Admit::Cooling(until),
            _ => Admit::Yes,
        }
    }

    /// The exit's state for a site: the worst of its tunnel's, its (exit, site) breaker's and
    /// its group's.
    pub fn state(&self, h: u32, site: Option<u32>) -> State {
        let tunnel = &self.tunnel[h as usize];
        let t = match tunnel.group() {
            0 => tunnel.state(),
            g => tunnel.state().max(self.group_state(g)),
        };
        let s = site.and_then(|s| self.sites.get(s as usize)).and_then(|sh| sh.breakers.get(h as usize)).map(Breaker::state);
        s.map_or(t, |s| s.max(t))
    }

    /// A live session's exit can no longer serve it for this site. In panic an exit out for
    /// its tunnel or its gateway serves its sessions as it serves every lease (and in a site's
    /// panic, one out for the site); one behind a gateway refusing its credentials loses them.
    pub fn lost(&self, h: u32, site: u32) -> Option<&'static str> {
        let g = self.tunnel[h as usize].group();
        if self.group_out(g) && !self.group_panics(g) {
            return Some("its gateway is out of service");
        }
        let tunnel = if self.panic { State::Healthy } else { self.tunnel[h as usize].state() };
        let sh = self.sites.get(site as usize);
        let on_site = match sh.and_then(|sh| sh.breakers.get(h as usize)) {
            Some(b) if !sh.is_some_and(|sh| sh.panic) => b.state(),
            _ => State::Healthy,
        };
        let worst = tunnel.max(on_site);
        match worst {
            State::Quarantined => Some("its exit is quarantined"),
            State::Dead => Some("its exit is dead"),
            _ => None,
        }
    }

    /// The share of its capacity exit `h` should get for `site`: breaker states times the
    /// adaptive weight (success rate squared times a latency factor, neutral until enough data).
    #[inline]
    pub fn weight(&self, h: u32, site: u32) -> f64 {
        let w = self.draw[h as usize].factor;
        match self.sites.get(site as usize).and_then(|sh| sh.gates.get(h as usize)) {
            Some(g) => w * super::breaker::weight_factor(g.state),
            None => w,
        }
    }

    /// Brings exit `h`'s record up to date with its tunnel breaker, its recent outcomes and the
    /// panic floor: called wherever one of them changes.
    pub(super) fn refresh(&mut self, h: u32) {
        let t = &self.tunnel[h as usize];
        let (factor, gate) = (t.weight_factor().max(self.panic_floor) * self.adaptive(h), Gate::of(t));
        let d = &mut self.draw[h as usize];
        d.factor = factor;
        d.gate = gate;
    }

    /// Exit `h`'s active leases: the pool says so each time they change.
    #[inline]
    pub fn set_active(&mut self, h: u32, active: u32) {
        self.draw[h as usize].active = active;
    }

    /// Exit `h` was leased: its shared record lives at `home` (see `Draw::home`).
    #[inline]
    pub fn set_home(&mut self, h: u32, home: usize) {
        self.draw[h as usize].home = home;
    }

    /// Starts loading exit `h`'s shared record, where its last lease found it (read from the
    /// exit's record, which a pick has in cache already).
    #[inline]
    pub fn prefetch_home(&self, h: u32) {
        let home = self.draw[h as usize].home;
        if home != 0 {
            crate::prefetch::prefetch_addr(home);
        }
    }

    /// Exit `h`'s capacity, when it joins the pool's views (with a new capacity or not).
    pub fn set_capacity(&mut self, h: u32, capacity: u32) {
        self.draw[h as usize].capacity = u16::try_from(capacity).unwrap_or(u16::MAX);
    }

    /// Exit `h`'s active leases and capacity as its record holds them.
    #[inline]
    pub fn load(&self, h: u32) -> (u32, u32) {
        let d = &self.draw[h as usize];
        (d.active, d.capacity as u32)
    }

    fn adaptive(&self, h: u32) -> f64 {
        let r = &self.recent[h as usize];
        if r.calls < RECENT_MIN {
            return 1.0;
        }
        // Every call a success (nearly always): a rate of exactly 1, without the division.
        let ok = r.ok_bits.count_ones();
        let success = if ok == r.calls { 1.0 } else { ok as f64 / r.calls as f64 };
        let speed = if r.latencies == 0 { 1.0 } else { (LATENCY_PAR / r.latency.max(1e-3)).min(1.0) };
        (success * success * speed).clamp(WEIGHT_FLOOR, 1.0)
    }

    /// A lease is going out through exit `h` for `site`: half-open breakers count a trial.
    #[inline]
    pub fn on_lease(&mut self, h: u32, site: u32) -> Trial {
        let t = &mut self.tunnel[h as usize];
        let mut trial = Trial { tunnel: t.on_lease(), site: 0 };
        if t.group() != 0 {
            self.group_on_lease(h);
        }
        if let Some(b) = self.sites.get_mut(site as usize).and_then(|sh| sh.breakers.get_mut(h as usize)) {
            trial.site = b.on_lease();
        }
        if trial.any() {
            self.trials += 1;
        }
        trial
    }

    /// A lease ended with no report that speaks to its breakers (it expired): hand back its
    /// trial slots.
    pub fn abandon(&mut self, h: u32, site: u32, trial: Trial) {
        if self.tunnel[h as usize].group() != 0 {
            self.group_trial_back(h);
        }
        self.trial_back(h, trial.tunnel);
        if trial.site != 0 {
            if let Some(b) = self.sites.get_mut(site as usize).and_then(|sh| sh.breakers.get_mut(h as usize)) {
                b.trial_done(trial.site);
            }
        }
    }

    /// Takes one report into the exit's tunnel and site breakers and the board's safeguards.
    /// `in_service` is the number of exits the pool has in service; `jitter` a draw in [0, 1).
    // Each argument is one fact about one report, read straight off the lease; bundling them
    // would only move the list into a struct built for this one call.
    #[allow(clippy::too_many_arguments)]
    pub fn report(&mut self, h: u32, site: u32, report: &Report, trial: Trial, in_service: u32, now: f64, jitter: f64) {
        let hu = h as usize;
        // A gateway's slot: evidence against the gateway is its group's, not the slot's.
        if self.tunnel[hu].group() != 0 && self.group_report(h, site, report, trial, now, jitter) {
            return;
        }
        self.learn(h, report);
        self.refresh(h);
        if trial.any() && report.outcome == Outcome::Success {
            self.trial_successes += 1;
        }
        if report.outcome == Outcome::RateLimited {
            self.cool(h, site, now + self.cfg.cooling(report.retry_after));
            self.limited(h, site, now);
        }
        let threshold = self.incident_threshold(in_service);

        // The tunnel.
        match Signal::for_tunnel(report.outcome, &self.cfg) {
            Some(signal) => self.tunnel_signal(h, signal, trial.tunnel, threshold, now, jitter),
            None => self.trial_back(h, trial.tunnel),
        }

        // The (exit, site) pair.
        match Signal::for_site(report.outcome, &self.cfg) {
            Some(signal) => {
                self.ensure_site(site);
                let cfg = &self.cfg;
                let sh = &mut self.sites[site as usize];
                if sh.breakers.len() <= hu {
                    sh.breakers.resize(hu + 1, Breaker::new(self.born));
                }
                let b = &mut sh.breakers[hu];
                let was = b.failing(cfg);
                let failed = b.observe(cfg, signal, trial.site);
                // A ban for the exit's own pace says nothing of the site (`PACE_BAN_MEMORY`).
                let pace_ban = report.outcome == Outcome::Block && sh.limited_at.get(hu).is_some_and(|&t| now - t < PACE_BAN_MEMORY);
                if pace_ban {
                    b.site_answered();
                }
                let is = b.failing(cfg);
                sh.failing = (sh.failing + is as u32) - was as u32;
                self.judge_incident(site, threshold, now);
                self.ramp(site, signal, pace_ban, in_service, now);
                if let Some(failed) = failed {
                    let sh = &mut self.sites[site as usize];
                    let (suspended, soft, hard) = (sh.incident.is_some(), sh.ejected + 1, self.tunnel_ejected);
                    let cfg = &self.cfg;
                    let ejection = || soft_ejection(cfg, soft, hard, in_service);
                    let t = sh.breakers[hu].judge_lazily(cfg, failed, now, suspended, ejection, jitter);
                    let sh = &mut self.sites[site as usize];
                    let after = sh.breakers[hu].failing(&self.cfg);
                    sh.failing = (sh.failing + after as u32) - is as u32;
                    if let Some(t) = t {
                        self.site_changed(h, site, t, now);
                    }
                }
            }
            None if trial.site != 0 => self.abandon(h, site, Trial { tunnel: 0, site: trial.site }),
            None => {}
        }
    }

    /// Adaptive-weight evidence: did the exit work, and how fast.
    fn learn(&mut self, h: u32, report: &Report) {
        let ok = match report.outcome {
            Outcome::Success | Outcome::TargetError | Outcome::RateLimited => true,
            Outcome::Other => return,
            _ => false,
        };
        let r = &mut self.recent[h as usize];
        // RECENT_WINDOW is the width of the bit set, so no mask is needed.
        r.ok_bits = (r.ok_bits << 1) | ok as u64;
        r.calls = (r.calls + 1).min(RECENT_WINDOW);
        if let Some(l) = report.latency {
            // An exponential average over about the last 20 latencies.
            r.latency = if r.latencies == 0 { l } else { r.latency + (l - r.latency) * 0.1 };
            r.latencies = r.latencies.saturating_add(1);
        }
    }

    /// How many exits of those in service may be ejected at once: the configured share,
    /// rounded down, and always at least one.
    pub fn ejection_cap(&self, in_service: u32) -> u32 {
        ejection_cap(&self.cfg, in_service)
    }

    /// Queues a verdict for the fleet: the changes that take an exit out of service or put it
    /// back (degraded only reweights, which each worker judges from its own traffic).
    fn share(&mut self, h: u32, site: Option<u32>, t: Transition, until: f64, now: f64) {
        if self.outbox.is_none()
            || matches!(t.reason, Reason::Fleet | Reason::FleetCapRefused)
            || !(t.to.holds_a_cap_slot() || t.from.holds_a_cap_slot())
        {
            return;
        }
        let hold = match t.to {
            State::Quarantined => (until - now).max(0.0),
            State::Dead => f64::INFINITY,
            _ => 0.0,
        };
        self.queue_verdict(h, site, t.to, hold);
    }

    /// Queues a pace cut for the fleet, if there is one: the other workers send through the
    /// same IP, so the site's 429 is theirs too.
    pub fn queue_pace(&mut self, exit: u32, site: u32, rate: f64, retry_after: f64) {
        if let Some(outbox) = &mut self.outbox {
            outbox.push(OutboxVerdict { exit, site: Some(site), state: State::Healthy, hold: retry_after, pace: Some(rate) });
        }
    }

    /// Queues a verdict for the fleet, if there is one.
    pub(super) fn queue_verdict(&mut self, exit: u32, site: Option<u32>, state: State, hold: f64) {
        if let Some(outbox) = &mut self.outbox {
            outbox.push(OutboxVerdict { exit, site, state, hold, pace: None });
        }
    }

    /// A verdict another worker reached, applied here as if this worker had reached it.
    pub fn impose(&mut self, h: u32, site: Option<u32>, to: State, hold: f64, now: f64, reason: Reason) {
        self.ensure_exit(h, now);
        let until = now + hold;
        let t = match site {
            None => {
                let was = self.tunnel[h as usize].failing(&self.cfg);
                let t = self.tunnel[h as usize].impose(to, until, now, reason);
                self.tunnel_failing = (self.tunnel_failing + self.tunnel[h as usize].failing(&self.cfg) as u32) - was as u32;
                t
            }
            Some(s) => {
                self.ensure_site(s);
                let born = self.born;
                let sh = &mut self.sites[s as usize];
                if sh.breakers.len() <= h as usize {
                    sh.breakers.resize(h as usize + 1, Breaker::new(born));
                }
                let was = sh.breakers[h as usize].failing(&self.cfg);
                let t = sh.breakers[h as usize].impose(to, until, now, reason);
                sh.failing = (sh.failing + sh.breakers[h as usize].failing(&self.cfg) as u32) - was as u32;
                t
            }
        };
        if let Some(t) = t {
            match site {
                None => self.tunnel_changed(h, t, now),
                Some(s) => self.site_changed(h, s, t, now),
            }
        }
    }

    /// A tunnel trial's slot comes back: a probing exit with every trial out admits again.
    fn trial_back(&mut self, h: u32, trial: u32) {
        self.tunnel[h as usize].trial_done(trial);
        self.readmissions += (trial != 0) as u64;
    }

    pub(super) fn tunnel_changed(&mut self, h: u32, t: Transition, now: f64) {
        self.readmissions += 1;
        let until = self.tunnel[h as usize].until();
        self.share(h, None, t, until, now);
        self.count(h, t, None);
        self.refresh(h);
        if t.to == State::Quarantined {
            self.schedule(self.tunnel[h as usize].until(), h, None);
        }
        log_transition(&mut self.events, now, h, None, t, &self.cfg);
        self.judge_panic(now);
    }

    fn site_changed(&mut self, h: u32, site: u32, t: Transition, now: f64) {
        self.sites[site as usize].sync(h);
        let until = self.sites[site as usize].breakers[h as usize].until();
        self.share(h, Some(site), t, until, now);
        self.count(h, t, Some(site));
        if t.to == State::Quarantined {
            self.schedule(self.sites[site as usize].breakers[h as usize].until(), h, Some(site));
        }
        log_transition(&mut self.events, now, h, Some(site), t, &self.cfg);
        self.judge_site_panic(site, self.exits_held_out());
    }

    fn count(&mut self, h: u32, t: Transition, site: Option<u32>) {
        if site.is_none() && self.tunnel[h as usize].group() == 0 {
            self.tunnel_out = (self.tunnel_out + t.to.is_ejected() as u32) - t.from.is_ejected() as u32;
        }
        let ejected = match site {
            None => &mut self.tunnel_ejected,
            Some(s) => &mut self.sites[s as usize].ejected,
        };
        *ejected = (*ejected + t.to.holds_a_cap_slot() as u32) - t.from.holds_a_cap_slot() as u32;
    }

    /// An active probe's verdict on exit `h`'s tunnel. Probes decide who comes back: a success
    /// counts towards a quarantined or probing exit's return (and revives a dead one); a
    /// failure sends a returning exit back with a longer backoff. Traffic decides who leaves,
    /// so a failed probe of an exit in service only counts like any tunnel failure.
    pub fn probe(&mut self, h: u32, verdict: Probe, in_service: u32, now: f64, jitter: f64) {
        self.poll(now);
        let hu = h as usize;
        if self.tunnel[hu].group() != 0 && self.group_probe(h, verdict, now, jitter) {
            return;
        }
        if verdict == Probe::Ok && self.tunnel[hu].state() == State::Dead {
            self.revive(h, now);
            return;
        }
        let signal = match verdict {
            Probe::Ok => Signal::Success,
            Probe::Failed | Probe::CredentialsRejected => Signal::Failure(1.0),
            // Every account leased there from now on would present a new address: one
            // verdict is enough to take it out (within the cap), not five.
            Probe::Drifted => Signal::Failure(self.cfg.consecutive),
        };
        self.tunnel_signal(h, signal, 0, self.incident_threshold(in_service), now, jitter);
    }

    /// One signal into exit `h`'s tunnel breaker, judged against the global incident
    /// (`threshold`, the pool's incident threshold for the exits in service).
    #[allow(clippy::too_many_arguments)]
    fn tunnel_signal(&mut self, h: u32, signal: Signal, trial: u32, threshold: u32, now: f64, jitter: f64) {
        let hu = h as usize;
        self.readmissions += (trial != 0) as u64;
        let b = &mut self.tunnel[hu];
        let was = b.failing(&self.cfg);
        let failed = b.observe(&self.cfg, signal, trial);
        let is = b.failing(&self.cfg);
        self.tunnel_failing = (self.tunnel_failing + is as u32) - was as u32;
        self.judge_global(threshold, now);
        let Some(failed) = failed else { return };
        // Hard evidence: a tunnel that refuses or breaks connections (whether traffic or a
        // probe saw it; a site cannot cause it) or presents another address is out whatever
        // the cap says. Only a global incident (the fault is ours) holds it back; a pool that
        // loses most of its exits this way panics instead (`judge_panic`).
        let t = self.tunnel[hu].judge_lazily(&self.cfg, failed, now, self.global_incident.is_some(), || Ejection::Allowed, jitter);
        // A state change starts the breaker afresh: keep the failing count true.
        let after = self.tunnel[hu].failing(&self.cfg);
        self.tunnel_failing = (self.tunnel_failing + after as u32) - is as u32;
        if let Some(t) = t {
            self.tunnel_changed(h, t, now);
        }
    }

    /// Back to healthy everywhere, by hand or by a probe.
    pub fn revive(&mut self, h: u32, now: f64) {
        if self.tunnel[h as usize].failing(&self.cfg) {
            self.tunnel_failing -= 1;
        }
        for sh in &mut self.sites {
            if sh.breakers.get(h as usize).is_some_and(|b| b.failing(&self.cfg)) {
                sh.failing -= 1;
            }
        }
        if let Some(t) = self.tunnel[h as usize].revive(now) {
            self.readmissions += 1;
            self.count(h, t, None);
            self.refresh(h);
            log_transition(&mut self.events, now, h, None, t, &self.cfg);
        }
        for s in 0..self.sites.len() {
            if let Some(b) = self.sites[s].breakers.get_mut(h as usize) {
                if let Some(t) = b.revive(now) {
                    self.sites[s].sync(h);
                    self.count(h, t, Some(s as u32));
                    log_transition(&mut self.events, now, h, Some(s as u32), t, &self.cfg);
                }
            }
        }
        // Judges every site's panic too.
        self.judge_panic(now);
    }

    /// An exit left the pool: its breakers no longer count against the cap.
    pub fn forget(&mut self, h: u32, now: f64) {
        self.set_group(h, 0);
        let fresh = Breaker::new(now);
        self.readmissions += 1;
        let old = std::mem::replace(&mut self.tunnel[h as usize], fresh.clone());
        if old.state().holds_a_cap_slot() {
            self.tunnel_ejected -= 1;
        }
        if old.state().is_ejected() {
            self.tunnel_out -= 1;
        }
        if old.failing(&self.cfg) {
            self.tunnel_failing -= 1;
        }
        for sh in &mut self.sites {
            if let Some(b) = sh.breakers.get_mut(h as usize) {
                let old = std::mem::replace(b, fresh.clone());
                sh.sync(h);
                if old.state().holds_a_cap_slot() {
                    sh.ejected -= 1;
                }
                if old.failing(&self.cfg) {
                    sh.failing -= 1;
                }
            }
        }
        self.recent[h as usize] = Recent::default();
        self.refresh(h);
        self.judge_panic(now);
    }

    /// A breaker saved before a restart, put back: its state through [`HealthBoard::impose`]
    /// (so the board's counts and schedule follow; a quarantine ends `hold` seconds from
    /// now), then its history (ejections not yet forgiven, failed returns).
    #[allow(clippy::too_many_arguments)]
    pub fn resume(&mut self, h: u32, site: Option<u32>, to: State, hold: f64, repeats: u32, failed_returns: u32, now: f64) {
        self.impose(h, site, to, hold, now, Reason::Resumed);
        let b = match site {
            None => &mut self.tunnel[h as usize],
            Some(s) => &mut self.sites[s as usize].breakers[h as usize],
        };
        b.resume_history(repeats, failed_returns);
    }

    /// Site slots on the board (0 is "no site"), for walking every site breaker.
    pub fn site_slots(&self) -> u32 {
        self.sites.len() as u32
    }

    /// Until when exit `h` rests for `site` after a 429, if it was told to.
    pub fn cooling_until(&self, h: u32, site: u32) -> Option<f64> {
        self.sites.get(site as usize)?.gates.get(h as usize).map(|g| g.cool_until).filter(|t| t.is_finite())
    }

    /// Exit `h` got a 429 from `site` at `now`.
    fn limited(&mut self, h: u32, site: u32, now: f64) {
        self.ensure_site(site);
        let sh = &mut self.sites[site as usize];
        if sh.limited_at.len() <= h as usize {
            sh.limited_at.resize(h as usize + 1, f64::NEG_INFINITY);
        }
        sh.limited_at[h as usize] = now;
    }

    /// Has exit `h` rest for `site` until `until` (a cooldown saved before a restart).
    pub fn cool(&mut self, h: u32, site: u32, until: f64) {
        self.ensure_site(site);
        self.sites[site as usize].gate_mut(h).cool_until = until;
    }

    pub fn tunnel_breaker(&self, h: u32) -> &Breaker {
        &self.tunnel[h as usize]
    }

    pub fn site_breaker(&self, h: u32, site: u32) -> Option<&Breaker> {
        self.sites.get(site as usize)?.breakers.get(h as usize)
    }

    /// Half-open trial leases handed out, and those that came back a success.
    pub fn trials(&self) -> (u64, u64) {
        (self.trials, self.trial_successes)
    }

    pub fn ejected(&self) -> u32 {
        self.tunnel_ejected
    }

    /// Whether the pool is in panic: too few exits in service, so every exit serves.
    pub fn panic(&self) -> bool {
        self.panic
    }

    /// The pool's exits in service (its ring's members) changed to `n`.
    pub fn set_members(&mut self, n: u32, now: f64) {
        self.members = n;
        self.judge_panic(now);
    }

    /// The pool's hosts, and those hard evidence holds out: an exit of its own is one host,
    /// out when its tunnel is; a gateway is one host however many slots it has (they share
    /// its endpoint and its breaker), out while its breaker is open.
    fn hosts(&self) -> (u32, u32) {
        let (mut slots, mut gateways, mut out) = (0, 0, self.tunnel_out);
        for g in self.groups.iter().filter(|g| g.members() > 0) {
            slots += g.members();
            gateways += 1;
            out += (g.state() != State::Healthy) as u32;
        }
        (self.members.saturating_sub(slots) + gateways, out)
    }

    /// Enters or leaves panic (Envoy's healthy panic threshold): when fewer than
    /// `panic_threshold` of the exits in the ring are in service, ejections have taken out
    /// more than a pool should lose, and the few left would take all the traffic (or there
    /// are none): every exit serves instead, those held out at `PANIC_WEIGHT`. Judged on each
    /// change of what it counts, never per lease.
    pub(super) fn judge_panic(&mut self, now: f64) {
        let held = self.exits_held_out();
        for s in 0..self.sites.len() as u32 {
            self.judge_site_panic(s, held);
        }
        let (members, out) = self.hosts();
        let serving = members.saturating_sub(out);
        let panic = members > 0 && (serving as f64) < self.cfg.panic_threshold * members as f64;
        if panic == self.panic {
            return;
        }
        self.panic = panic;
        self.panic_floor = if panic { PANIC_WEIGHT } else { 0.0 };
        // Every exit held out is admitted again, or parked again: selection looks again.
        self.readmissions += 1;
        for h in 0..self.tunnel.len() as u32 {
            self.refresh(h);
        }
        let pct = self.cfg.panic_threshold * 100.0;
        let message = if panic {
            format!(
                "panic: {serving} of {members} exits in service, below {pct:.0}%: every exit serves, those out for their tunnel or gateway at {:.0}% of their weight",
                PANIC_WEIGHT * 100.0
            )
        } else {
            format!("panic over: {serving} of {members} exits in service, at least {pct:.0}%: exits held out stay out again")
        };
        let (from, to) = if panic { ("normal", "panic") } else { ("panic", "normal") };
        self.events.push_event(Event {
            seq: 0,
            time: now,
            kind: EventKind::Panic,
            exit: None,
            site: None,
            from: Some(from),
            to: Some(to),
            message,
        });
    }

    /// Whether fewer than `panic_threshold` of the exits serve the site, counting those out
    /// for it (soft) and those out for their tunnel or gateway (`held`): soft evidence is capped
    /// so that it alone never gets there, but hard evidence may take out the exits it left
    /// serving (two exits: one blocked by the site, then the other refusing connections). Then
    /// the site's own verdicts are set aside: its exits out for it serve it again (at their
    /// least weight).
    fn judge_site_panic(&mut self, site: u32, held: u32) {
        let (members, threshold) = (self.members, self.cfg.panic_threshold);
        let sh = &mut self.sites[site as usize];
        let serving = members.saturating_sub(held + sh.ejected);
        let panic = members > 0 && (serving as f64) < threshold * members as f64;
        // No event: the site's snapshot record shows it, and the pool's panic, which brings
        // most sites' with it, says so once for all of them.
        self.readmissions += (panic != sh.panic) as u64;
        sh.panic = panic;
    }

    /// Exits (not hosts: a gateway's slots count one each) out for their tunnel or gateway.
    fn exits_held_out(&self) -> u32 {
        let slots: u32 = self.groups.iter().filter(|g| g.state() != State::Healthy).map(super::Group::members).sum();
        self.tunnel_out + slots
    }

    /// Whether `site` is in panic (see `judge_site_panic`).
    pub fn site_panic(&self, site: u32) -> bool {
        self.sites.get(site as usize).is_some_and(|sh| sh.panic)
    }
}

/// Whether soft evidence (an (exit, site) breaker's trip) may eject one more exit for its site,
/// with `soft` of them out for the site then and `hard` out for their tunnels: the cap counts
/// soft ejections only (as Envoy's max_ejection_percent counts outlier ejections, not failed
/// health checks), the minimum in service counts every exit out.
fn soft_ejection(cfg: &HealthConfig, soft: u32, hard: u32, in_service: u32) -> Ejection {
    if soft > ejection_cap(cfg, in_service) || in_service.saturating_sub(soft + hard) < cfg.min_in_service {
        Ejection::Refused
    } else {
        Ejection::Allowed
    }
}

/// Logs a breaker's change of state, with its reason in words and figures.
/// [`HealthBoard::ejection_cap`], for a caller that holds other parts of the board.
fn ejection_cap(cfg: &HealthConfig, in_service: u32) -> u32 {
    // `as u32` truncates, saturating: for the non-negative share it is the floor, without
    // the libm call `floor` is on a baseline x86-64 target.
    ((cfg.max_ejected * in_service as f64) as u32).max(1)
}

fn log_transition(events: &mut Events, time: f64, exit: u32, site: Option<u32>, t: Transition, cfg: &HealthConfig) {
    let kind = if matches!(t.reason, Reason::EjectionRefused | Reason::FleetCapRefused) {
        EventKind::EjectionRefused
    } else {
        EventKind::StateChanged
    };
    let message = format!("{} -> {}: {}", t.from.name(), t.to.name(), t.reason.describe(cfg));
    // Site 0 is the breaker of leases without a site: to a reader, no site.
    let site = site.filter(|&s| s != 0);
    events.push_event(Event { seq: 0, time, kind, exit: Some(exit), site, from: Some(t.from.name()), to: Some(t.to.name()), message });
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{RngExt, SeedableRng};

    /// Exit `h`'s weight for `site` from its breakers and recent outcomes themselves.
    fn weight_slowly(b: &HealthBoard, h: u32, site: u32) -> f64 {
        let w = b.tunnel[h as usize].weight_factor().max(b.panic_floor) * b.adaptive(h);
        match b.sites.get(site as usize).and_then(|sh| sh.breakers.get(h as usize)) {
            Some(br) => w * br.weight_factor(),
            None => w,
        }
    }

    /// What a pick reads about an exit (its record, its site gates) gives the answers its
    /// breakers give, through random reports, probes, leases, trials, quarantines ending,
    /// verdicts imposed, revivals, groups and panics: every place they change keeps it current.
    #[test]
    fn records_match_the_breakers_under_random_changes() {
        const EXITS: u32 = 12;
        const SITES: u32 = 3;
        let cfg = HealthConfig { consecutive: 2.0, recover_successes: 2, half_open_trials: 2, min_hold: 0.0, ..HealthConfig::default() };
        for seed in 0..40 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut b = HealthBoard::new(cfg.clone(), EXITS as usize, 0.0);
            let g = b.add_group("gw", 0.0);
            let mut now = 0.0;
            let mut trials: Vec<(u32, u32, Trial)> = Vec::new();
            for step in 0..600 {
                now += rng.random_range(0.0..3.0);
                let h = rng.random_range(0..EXITS);
                let site = rng.random_range(0..SITES);
                b.ensure_site(site);
                match rng.random_range(0..12) {
                    0..=3 => {
                        let outcome = [
                            Outcome::Success,
                            Outcome::Block,
                            Outcome::Captcha,
                            Outcome::RateLimited,
                            Outcome::Timeout,
                            Outcome::Connect,
                            Outcome::TargetError,
                        ][rng.random_range(0..7)];
                        let latency = Some(rng.random_range(0.01..4.0));
                        let report = Report { outcome, status: None, latency, retry_after: None };
                        let trial = match trials.iter().position(|t| t.0 == h && t.1 == site) {
                            Some(i) => trials.swap_remove(i).2,
                            None => Trial::default(),
                        };
                        b.report(h, site, &report, trial, EXITS, now, rng.random_range(0.0..1.0));
                    }
                    4 => trials.push((h, site, b.on_lease(h, site))),
                    5 => {
                        if let Some((h, site, trial)) = trials.pop() {
                            b.abandon(h, site, trial);
                        }
                    }
                    6 => b.probe(h, [Probe::Ok, Probe::Failed, Probe::Drifted][rng.random_range(0..3)], EXITS, now, 0.5),
                    7 => {
                        let to = State::ALL[rng.random_range(0..5)];
                        let on = rng.random_bool(0.5).then_some(site);
                        b.impose(h, on, to, rng.random_range(0.0..20.0), now, Reason::Fleet);
                    }
                    8 => b.set_group(h, if rng.random_bool(0.5) { g } else { 0 }),
                    9 => match rng.random_range(0..3) {
                        0 => b.revive(h, now),
                        1 => b.forget(h, now),
                        _ => b.set_members(rng.random_range(1..=EXITS), now),
                    },
                    10 => b.cool(h, site, now + rng.random_range(0.0..5.0)),
                    _ => b.poll(now),
                }
                for h in 0..EXITS {
                    assert_eq!(b.tunnel_admits(h), b.tunnel_admits_slowly(h), "seed {seed} step {step} exit {h}");
                    for site in 0..SITES {
                        let at = now + rng.random_range(0.0..2.0);
                        assert_eq!(
                            b.site_admits(h, site, at),
                            b.site_admits_slowly(h, site, at),
                            "seed {seed} step {step} exit {h} site {site}"
                        );
                        assert_eq!(
                            b.weight(h, site).to_bits(),
                            weight_slowly(&b, h, site).to_bits(),
                            "seed {seed} step {step} exit {h} site {site}"
                        );
                    }
                }
            }
        }
    }

    /// The cap truncates where it used to call `floor`: the same cap for every share and size.
    #[test]
    fn ejection_cap_is_the_floor_of_the_share() {
        for share in [0.0, 0.05, 0.1, 0.25, 1.0 / 3.0, 0.5, 0.999, 1.0] {
            let cfg = HealthConfig { max_ejected: share, ..HealthConfig::default() };
            for n in 0..=100_000u32 {
                assert_eq!(ejection_cap(&cfg, n), ((share * n as f64).floor() as u32).max(1), "share {share}, {n} in service");
            }
        }
    }
}
