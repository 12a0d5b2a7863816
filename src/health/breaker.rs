//! Breakers: one per (exit, site) and one per exit for its tunnel.
//!
//! The lifecycle is healthy -> degraded -> quarantined -> probing -> healthy, and dead after
//! repeated failed returns. The shape and the defaults come from Envoy's outlier detection
//! (5 consecutive failures, 30 s base ejection growing with each ejection, a 10% ejection
//! cap), resilience4j (a count window judged only after a minimum number of calls, a number of
//! permitted calls in half-open) and the pool article (success below 70% over a window,
//! captchas on their own lower threshold, hysteresis, hold times, backoff doubling with jitter
//! up to a ceiling, forgiveness after stable service).
//!
//! A breaker only judges; the pool decides whether a trip may eject (cap, minimum in service,
//! incidents) and tells the breaker through `may_eject`.

use super::{Ejection, HealthConfig, Reason, Signal, State, Transition};

#[derive(Debug, Clone, PartialEq)]
pub struct Breaker {
    state: State,
    since: f64,
    strikes: f64,
    /// Like `strikes`, but 5xx answers count too: how long this exit has been failing the
    /// site, whoever is at fault. Only incident detection reads it.
    site_strikes: f64,
    captchas: u32,
    successes: u32,
    /// The last `window` calls as bits, newest in bit 0.
    fail_bits: u64,
    captcha_bits: u64,
    calls: u32,
    /// Ejections not yet forgiven; sets the next backoff.
    repeats: u32,
    until: f64,
    backoff: f64,
    trials_out: u32,
    /// Which half-open period this is: a trial lease carries the period it was taken in, so
    /// one from an earlier period that comes back late frees no slot of this one.
    period: u32,
    failed_returns: u32,
    forgiven_at: f64,
    /// Lifetime figures for snapshots.
    pub quarantines: u32,
    pub quarantined_seconds: f64,
    /// The exit group (a gateway) a tunnel breaker's exit belongs to; 0: none. Kept here, in
    /// what was padding, because every admission and report reads this breaker already: the
    /// group costs an ungrouped exit no extra load, only a branch.
    group: u32,
}

impl Breaker {
    pub fn new(now: f64) -> Breaker {
        Breaker {
            state: State::Healthy,
            since: now,
            strikes: 0.0,
            site_strikes: 0.0,
            captchas: 0,
            successes: 0,
            fail_bits: 0,
            captcha_bits: 0,
            calls: 0,
            repeats: 0,
            until: 0.0,
            backoff: 0.0,
            trials_out: 0,
            period: 0,
            failed_returns: 0,
            forgiven_at: now,
            quarantines: 0,
            quarantined_seconds: 0.0,
            group: 0,
        }
    }

    /// The exit group of a tunnel breaker's exit (0: none).
    #[inline]
    pub fn group(&self) -> u32 {
        self.group
    }

    pub(super) fn set_group(&mut self, group: u32) {
        self.group = group;
    }

    pub fn state(&self) -> State {
        self.state
    }
    pub fn since(&self) -> f64 {
        self.since
    }
    pub fn repeats(&self) -> u32 {
        self.repeats
    }
    /// When a quarantine ends (meaningful while quarantined).
    pub fn until(&self) -> f64 {
        self.until
    }
    pub fn trials_out(&self) -> u32 {
        self.trials_out
    }
    /// Returns that have failed in a row (while probing): `dead_after` of them is death.
    pub fn failed_returns(&self) -> u32 {
        self.failed_returns
    }

    /// The history a restart must not forget (`crate::persist`), put back after the state
    /// itself was imposed: the next ejection's backoff grows from `repeats` as it would have.
    pub(super) fn resume_history(&mut self, repeats: u32, failed_returns: u32) {
        self.repeats = repeats;
        self.failed_returns = failed_returns;
    }
    /// Whether recent failures, of the exit or of the site, mark this exit as failing its
    /// site (for incidents): as much accumulated evidence as it takes to degrade. An exit
    /// out of service is out, not failing: the failures of the leases a panic still sends
    /// through it must not make an incident of what the pool already knows.
    pub fn failing(&self, cfg: &HealthConfig) -> bool {
        self.site_strikes >= cfg.degrade_at && !self.state.is_ejected()
    }

    /// Whether a lease may go through this breaker now (a probing one admits its trials).
    #[inline]
    pub fn admits(&self, cfg: &HealthConfig) -> bool {
        match self.state {
            State::Healthy | State::Degraded => true,
            State::Probing => self.trials_out < cfg.half_open_trials,
            State::Quarantined | State::Dead => false,
        }
    }

    /// The share of its weight the exit keeps in this state.
    #[inline]
    pub fn weight_factor(&self) -> f64 {
        weight_factor(self.state)
    }

    /// A lease went out through this breaker; a probing one counts it as a trial. Returns the
    /// trial's half-open period (0: not a trial), which its release must hand back.
    #[inline]
    pub fn on_lease(&mut self) -> u32 {
        if self.state == State::Probing {
            self.trials_out += 1;
            return self.period;
        }
        0
    }

    /// A trial lease ended without a report reaching this breaker (expired, or an outcome that
    /// says nothing about it). A trial of an earlier period has no slot here any more.
    pub fn trial_done(&mut self, period: u32) {
        if period != 0 && period == self.period && self.state == State::Probing {
            self.trials_out = self.trials_out.saturating_sub(1);
        }
    }

    /// Time passing: a quarantine whose backoff is over turns half-open.
    pub fn poll(&mut self, now: f64) -> Option<Transition> {
        if self.state == State::Quarantined && now >= self.until {
            let backoff = self.backoff;
            return Some(self.enter(State::Probing, now, Reason::BackoffOver(backoff)));
        }
        None
    }

    /// Takes one report's signal. `ejection` says what a trip may do; `jitter` is a uniform
    /// draw in [0, 1) for the backoff.
    pub fn record(
        &mut self,
        cfg: &HealthConfig,
        signal: Signal,
        trial: u32,
        now: f64,
        ejection: Ejection,
        jitter: f64,
    ) -> Option<Transition> {
        let failed = self.observe(cfg, signal, trial)?;
        self.judge(cfg, failed, now, ejection, jitter)
    }

    /// First half of `record`: counts the signal. `None` when it cannot change the state
    /// (evidence about the site only); else whether it was a failure. Between the halves the
    /// pool looks at the whole pool (incidents, the cap) to decide what a trip may do.
    pub fn observe(&mut self, cfg: &HealthConfig, signal: Signal, trial: u32) -> Option<bool> {
        self.trial_done(trial);
        let mask = if cfg.window >= 64 { u64::MAX } else { (1u64 << cfg.window) - 1 };
        let (failed, captcha) = match signal {
            Signal::Success | Signal::SiteError => (false, false),
            Signal::Failure(_) => (true, false),
            Signal::Captcha => (true, true),
        };
        if signal != Signal::SiteError {
            self.fail_bits = ((self.fail_bits << 1) | failed as u64) & mask;
            self.captcha_bits = ((self.captcha_bits << 1) | captcha as u64) & mask;
            self.calls = (self.calls + 1).min(cfg.window);
        }
        match signal {
            Signal::Success => {
                self.strikes = 0.0;
                self.site_strikes = 0.0;
                self.captchas = 0;
                self.successes += 1;
            }
            Signal::Failure(w) => {
                self.strikes += w;
                self.site_strikes += w;
                self.captchas = 0;
                self.successes = 0;
            }
            Signal::Captcha => {
                self.strikes += 1.0;
                self.site_strikes += 1.0;
                self.captchas += 1;
                self.successes = 0;
            }
            // The site failed, not the exit: it neither proves nor condemns the exit, but it
            // counts towards the exit failing the site, which is how incidents are seen.
            Signal::SiteError => {
                self.site_strikes += 1.0;
                return None;
            }
        }
        Some(failed)
    }

    /// The failure just observed was the site answering about this exit (a ban for its pace):
    /// the site works for it, so it no longer counts as failing the site (its 5xx before
    /// included). Judging the exit is unchanged.
    pub fn site_answered(&mut self) {
        self.site_strikes = 0.0;
    }

    /// Second half of `record`: the state change the counted evidence calls for.
    pub fn judge(&mut self, cfg: &HealthConfig, failed: bool, now: f64, ejection: Ejection, jitter: f64) -> Option<Transition> {
        self.judge_lazily(cfg, failed, now, ejection == Ejection::Suspended, || ejection, jitter)
    }

    /// [`Breaker::judge`] for the board, where `ejection` (whether this exit may be ejected,
    /// when not `suspended` by an incident) costs a look over the pool and is asked only
    /// when the evidence trips the breaker, which nearly no report does.
    #[inline]
    pub fn judge_lazily(
        &mut self,
        cfg: &HealthConfig,
        failed: bool,
        now: f64,
        suspended: bool,
        ejection: impl FnOnce() -> Ejection,
        jitter: f64,
    ) -> Option<Transition> {
        if suspended {
            // Evidence gathered while someone else is at fault must not be held against the
            // exit once the incident is over: only the site-failing count survives.
            self.strikes = 0.0;
            self.captchas = 0;
            self.fail_bits = 0;
            self.captcha_bits = 0;
            self.calls = 0;
            return None;
        }
        match self.state {
            State::Dead | State::Quarantined => None,
            State::Probing => {
                if failed {
                    self.failed_returns += 1;
                    if self.failed_returns >= cfg.dead_after {
                        let n = self.failed_returns;
                        return Some(self.enter(State::Dead, now, Reason::FailedReturns(n)));
                    }
                    return Some(self.quarantine(cfg, now, jitter, Reason::TrialFailed));
                }
                if self.successes >= cfg.recover_successes {
                    self.failed_returns = 0;
                    let n = self.successes;
                    return Some(self.enter(State::Healthy, now, Reason::Recovered(n)));
                }
                None
            }
            State::Healthy | State::Degraded => {
                if let Some(reason) = self.trip_reason(cfg) {
                    return match ejection() {
                        Ejection::Allowed => Some(self.quarantine(cfg, now, jitter, reason)),
                        _ if self.state == State::Healthy => Some(self.enter(State::Degraded, now, Reason::EjectionRefused)),
                        _ => None,
                    };
                }
                let held = now - self.since >= cfg.min_hold;
                if self.state == State::Healthy {
                    if failed && self.strikes >= cfg.degrade_at && held {
                        let s = self.strikes;
                        return Some(self.enter(State::Degraded, now, Reason::ConsecutiveFailures(s)));
                    }
                    if !failed && self.repeats > 0 && now - self.forgiven_at >= cfg.forgive_after && now - self.since >= cfg.forgive_after {
                        self.repeats -= 1;
                        self.forgiven_at = now;
                    }
                    None
                } else if !failed && self.successes >= cfg.recover_successes && held {
                    let n = self.successes;
                    Some(self.enter(State::Healthy, now, Reason::Recovered(n)))
                } else {
                    None
                }
            }
        }
    }

    fn trip_reason(&self, cfg: &HealthConfig) -> Option<Reason> {
        if self.strikes >= cfg.consecutive {
            return Some(Reason::ConsecutiveFailures(self.strikes));
        }
        if self.captchas >= cfg.captcha_consecutive {
            return Some(Reason::ConsecutiveCaptchas(self.captchas));
        }
        if self.calls >= cfg.min_calls {
            let n = self.calls as f64;
            if let Some(captcha_rate) = rate_over(self.captcha_bits, n, cfg.captcha_rate) {
                return Some(Reason::CaptchaRate(captcha_rate, self.calls));
            }
            if let Some(failure_rate) = rate_over(self.fail_bits, n, cfg.failure_rate) {
                return Some(Reason::FailureRate(failure_rate, self.calls));
            }
        }
        None
    }

    fn quarantine(&mut self, cfg: &HealthConfig, now: f64, jitter: f64, reason: Reason) -> Transition {
        self.repeats = self.repeats.saturating_add(1);
        self.backoff = cfg.jittered(cfg.backoff(self.repeats), jitter);
        self.until = now + self.backoff;
        self.quarantines += 1;
        self.enter(State::Quarantined, now, reason)
    }

    fn enter(&mut self, to: State, now: f64, reason: Reason) -> Transition {
        let from = self.state;
        if from == State::Quarantined || from == State::Dead {
            self.quarantined_seconds += now - self.since;
        }
        self.state = to;
        self.since = now;
        // Serving at full or reduced weight is one stretch of evidence; every other change
        // judges from a clean slate, since the old window describes the state being left.
        let same_service = matches!((from, to), (State::Healthy, State::Degraded) | (State::Degraded, State::Healthy));
        if !same_service {
            self.clear();
        }
        if to == State::Healthy {
            self.forgiven_at = now;
        }
        if to != State::Probing {
            self.trials_out = 0;
        } else {
            self.period = self.period.wrapping_add(1).max(1);
            self.trials_out = 0;
        }
        Transition { from, to, reason }
    }

    /// Takes a state another worker decided (`until`: when a quarantine ends). The evidence
    /// gathered here so far described the old state, so it starts afresh.
    pub fn impose(&mut self, to: State, until: f64, now: f64, reason: Reason) -> Option<Transition> {
        if to == State::Quarantined {
            self.until = until;
            self.backoff = (until - now).max(0.0);
        }
        if to == self.state {
            return None;
        }
        if to == State::Quarantined || to == State::Dead {
            self.quarantines += 1;
        }
        Some(self.enter(to, now, reason))
    }

    /// Back in service by hand or by a probe: healthy, the failed-return count cleared.
    pub fn revive(&mut self, now: f64) -> Option<Transition> {
        self.failed_returns = 0;
        let t = (self.state != State::Healthy).then(|| self.enter(State::Healthy, now, Reason::Revived));
        self.clear();
        t
    }

    /// Forgets the evidence: counters and window (not the repeat count, which is history).
    fn clear(&mut self) {
        self.strikes = 0.0;
        self.site_strikes = 0.0;
        self.captchas = 0;
        self.successes = 0;
        self.fail_bits = 0;
        self.captcha_bits = 0;
        self.calls = 0;
    }

    /// Seconds spent out of service, counting a quarantine still running.
    pub fn total_quarantined(&self, now: f64) -> f64 {
        self.quarantined_seconds + if self.state.is_ejected() { now - self.since } else { 0.0 }
    }

    /// The recent window's success and captcha rates, if it has enough calls to say.
    pub fn rates(&self, cfg: &HealthConfig) -> Option<(f64, f64)> {
        (self.calls >= cfg.min_calls).then(|| {
            let n = self.calls as f64;
            (1.0 - self.fail_bits.count_ones() as f64 / n, self.captcha_bits.count_ones() as f64 / n)
        })
    }
}

/// The share of `n` calls that the set `bits` marks, if it reaches `threshold`. Judged on
/// every report, where the set is nearly always empty: a rate of 0 is then known without the
/// division (which would give 0, or NaN for no calls: under any positive threshold either way).
#[inline]
fn rate_over(bits: u64, n: f64, threshold: f64) -> Option<f64> {
    if bits == 0 && threshold > 0.0 {
        return None;
    }
    let rate = bits.count_ones() as f64 / n;
    (rate >= threshold).then_some(rate)
}

/// The share of its weight an exit keeps in `state`.
#[inline]
pub(super) fn weight_factor(state: State) -> f64 {
    match state {
        State::Healthy => 1.0,
        State::Degraded => 0.25,
        State::Probing => 0.1,
        State::Quarantined | State::Dead => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> HealthConfig {
        HealthConfig::default()
    }

    fn feed(b: &mut Breaker, c: &HealthConfig, s: Signal, n: usize, now: f64) -> Vec<Transition> {
        (0..n).filter_map(|_| b.record(c, s, 0, now, Ejection::Allowed, 0.5)).collect()
    }

    /// The shortcut for an empty set judges as the division does, for every threshold
    /// (zero, negative and NaN included) and for no calls at all (0/0).
    #[test]
    fn rate_over_is_the_division_whatever_the_set_and_threshold() {
        for bits in [0u64, 1, 0b1011, u64::MAX] {
            for n in [0.0, 1.0, 5.0, 64.0] {
                for threshold in [0.0, -1.0, 1e-9, 0.25, 0.5, 1.0, f64::NAN] {
                    let rate = bits.count_ones() as f64 / n;
                    let want = (rate >= threshold).then_some(rate);
                    let got = rate_over(bits, n, threshold);
                    assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits), "bits {bits:#b}, n {n}, threshold {threshold}");
                }
            }
        }
    }

    #[test]
    fn one_error_never_trips_five_do() {
        let c = cfg();
        let mut b = Breaker::new(0.0);
        assert!(feed(&mut b, &c, Signal::Failure(1.0), 1, 100.0).is_empty());
        assert_eq!(b.state(), State::Healthy);
        let t = feed(&mut b, &c, Signal::Failure(1.0), 4, 100.0);
        assert_eq!(t.last().unwrap().to, State::Quarantined);
        assert_eq!(t.last().unwrap().reason, Reason::ConsecutiveFailures(5.0));
        // Jitter 0.5 is the middle of [0.8, 1.2]: exactly the base.
        assert_eq!(b.until(), 130.0);
    }

    #[test]
    fn blocks_weigh_three() {
        let c = cfg();
        let mut b = Breaker::new(0.0);
        feed(&mut b, &c, Signal::Failure(c.block_weight), 2, 100.0);
        assert_eq!(b.state(), State::Quarantined);
    }

    #[test]
    fn backoff_doubles_to_its_ceiling_and_never_overflows() {
        let c = cfg();
        assert_eq!(c.backoff(1), 30.0);
        assert_eq!(c.backoff(2), 60.0);
        assert_eq!(c.backoff(5), 480.0);
        assert_eq!(c.backoff(6), 600.0);
        assert_eq!(c.backoff(u32::MAX), 600.0);
        let mut b = Breaker::new(0.0);
        b.repeats = u32::MAX;
        let t = feed(&mut b, &c, Signal::Failure(5.0), 1, 0.0);
        assert_eq!(t[0].to, State::Quarantined);
        assert!(b.until() <= 600.0 * 1.2);
    }

    #[test]
    fn quarantine_ends_exactly_at_its_backoff() {
        let c = cfg();
        let mut b = Breaker::new(0.0);
        feed(&mut b, &c, Signal::Failure(5.0), 1, 10.0);
        assert_eq!(b.poll(39.999), None);
        assert_eq!(b.state(), State::Quarantined);
        assert_eq!(b.poll(40.0).unwrap().to, State::Probing);
    }

    #[test]
    fn half_open_admits_exactly_its_trials_then_recovers() {
        let c = cfg();
        let mut b = Breaker::new(0.0);
        feed(&mut b, &c, Signal::Failure(5.0), 1, 0.0);
        b.poll(100.0);
        let mut trial = 0;
        for _ in 0..c.half_open_trials {
            assert!(b.admits(&c));
            trial = b.on_lease();
            assert_ne!(trial, 0);
        }
        assert!(!b.admits(&c));
        let mut last = None;
        for i in 0..c.recover_successes {
            if i > 0 {
                b.on_lease();
            }
            last = b.record(&c, Signal::Success, trial, 100.0, Ejection::Allowed, 0.5).or(last);
        }
        assert_eq!(last.unwrap().to, State::Healthy);
    }

    #[test]
    fn a_failed_trial_doubles_the_backoff_and_repeated_failures_kill() {
        let c = cfg();
        let mut b = Breaker::new(0.0);
        feed(&mut b, &c, Signal::Failure(5.0), 1, 0.0);
        for n in 1..c.dead_after {
            let now = b.until();
            b.poll(now);
            let trial = b.on_lease();
            let t = b.record(&c, Signal::Failure(1.0), trial, now, Ejection::Allowed, 0.5).unwrap();
            assert_eq!((t.from, t.to, t.reason), (State::Probing, State::Quarantined, Reason::TrialFailed));
            assert_eq!(b.until() - now, c.backoff(n + 1));
        }
        let now = b.until();
        b.poll(now);
        let t = b.record(&c, Signal::Failure(1.0), 0, now, Ejection::Allowed, 0.5).unwrap();
        assert_eq!(t.to, State::Dead);
        assert_eq!(b.poll(1e12), None);
        assert!(!b.admits(&c));
        assert_eq!(b.revive(now).unwrap().to, State::Healthy);
    }

    #[test]
    fn jitter_spans_its_range() {
        let c = cfg();
        let trip = |j: f64| {
            let mut b = Breaker::new(0.0);
            b.record(&c, Signal::Failure(5.0), 0, 0.0, Ejection::Allowed, j);
            b.until()
        };
        assert!((trip(0.0) - 24.0).abs() < 1e-9);
        assert!((trip(1.0) - 36.0).abs() < 1e-9);
    }

    #[test]
    fn captchas_trip_sooner_than_errors() {
        let c = cfg();
        let mut b = Breaker::new(0.0);
        feed(&mut b, &c, Signal::Captcha, 3, 0.0);
        assert_eq!(b.state(), State::Quarantined);
        // By rate: 2 captchas in 10 calls is 20% >= 15%, while 2 errors in 10 is not 30%.
        let mut b = Breaker::new(0.0);
        for i in 0..10 {
            let s = if i % 5 == 0 { Signal::Captcha } else { Signal::Success };
            b.record(&c, s, 0, 0.0, Ejection::Allowed, 0.5);
        }
        assert_eq!(b.state(), State::Quarantined);
        let mut b = Breaker::new(0.0);
        for i in 0..10 {
            let s = if i % 5 == 0 { Signal::Failure(1.0) } else { Signal::Success };
            b.record(&c, s, 0, 0.0, Ejection::Allowed, 0.5);
        }
        assert_eq!(b.state(), State::Healthy);
    }

    #[test]
    fn refused_ejection_degrades_and_suspended_judges_nothing() {
        let c = cfg();
        let mut b = Breaker::new(0.0);
        let t = (0..5).filter_map(|_| b.record(&c, Signal::Failure(1.0), 0, 0.0, Ejection::Refused, 0.5)).last();
        assert_eq!(t.unwrap().reason, Reason::EjectionRefused);
        assert_eq!(b.state(), State::Degraded);
        let mut b = Breaker::new(0.0);
        for _ in 0..50 {
            assert_eq!(b.record(&c, Signal::Failure(3.0), 0, 0.0, Ejection::Suspended, 0.5), None);
        }
        assert_eq!(b.state(), State::Healthy);
        assert!(b.failing(&c));
    }

    #[test]
    fn degraded_needs_more_to_leave_than_to_enter_and_holds() {
        let c = cfg();
        let mut b = Breaker::new(0.0);
        feed(&mut b, &c, Signal::Success, 20, 0.0);
        let t = feed(&mut b, &c, Signal::Failure(1.0), 2, 100.0);
        assert_eq!(t[0].to, State::Degraded);
        // Enough successes, but inside the hold time: stays degraded.
        assert!(feed(&mut b, &c, Signal::Success, c.recover_successes as usize, 109.9).is_empty());
        assert_eq!(b.state(), State::Degraded);
        let t = feed(&mut b, &c, Signal::Success, 1, 110.0);
        assert_eq!(t[0].to, State::Healthy);
        // Inside the healthy hold time, two failures do not degrade again.
        assert!(feed(&mut b, &c, Signal::Failure(1.0), 2, 115.0).is_empty());
    }

    #[test]
    fn repeats_are_forgiven_slowly_after_stable_service() {
        let c = cfg();
        let mut b = Breaker::new(0.0);
        b.record(&c, Signal::Failure(5.0), 0, 0.0, Ejection::Allowed, 0.5);
        b.revive(30.0);
        assert_eq!(b.repeats(), 1);
        b.record(&c, Signal::Success, 0, 30.0 + c.forgive_after - 1.0, Ejection::Allowed, 0.5);
        assert_eq!(b.repeats(), 1);
        b.record(&c, Signal::Success, 0, 30.0 + c.forgive_after, Ejection::Allowed, 0.5);
        assert_eq!(b.repeats(), 0);
    }

    #[test]
    fn config_is_checked() {
        let bad = |f: fn(&mut HealthConfig)| {
            let mut c = cfg();
            f(&mut c);
            c.validate().unwrap_err().to_string()
        };
        assert_eq!(bad(|c| c.max_ejection = 10.0), "health max_ejection 10 is below base_ejection 30");
        assert!(bad(|c| c.jitter = 1.0).contains("jitter"));
        assert!(bad(|c| c.failure_rate = f64::NAN).contains("failure_rate"));
        assert!(bad(|c| c.window = 65).contains("window"));
        assert_eq!(bad(|c| c.panic_threshold = 1.5), "health panic_threshold 1.5 must be in [0, 1]");
        assert!(bad(|c| c.panic_threshold = f64::NAN).contains("panic_threshold"));
        assert!(cfg().validate().is_ok());
    }
}
