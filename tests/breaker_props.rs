//! Properties of one breaker, `exitpool::Breaker`, checked with proptest over any
//! sequence of leases, reports (with any ejection verdict and jitter draw), abandoned leases,
//! revivals and clock advances, under varied configurations:
//!
//! - every state change is an edge of the documented lifecycle (healthy -> degraded ->
//!   quarantined -> probing -> healthy, dead after failed returns, revive back to healthy),
//!   for its documented reason, after its hold time;
//! - a quarantine lasts `cfg.backoff(repeats)` times the jitter factor: the backoff before
//!   jitter never exceeds `max_ejection`, the quarantine never exceeds it by more than the
//!   jitter, and it never ends before its backoff;
//! - a half-open breaker admits at most `half_open_trials` trial leases of its own half-open
//!   period at once, whatever became of the trials of earlier periods;
//! - a breaker trips exactly when one of its documented thresholds is met, not a signal sooner
//!   or later, over any configuration `HealthConfig::validate` accepts;
//! - leaving quarantine takes more evidence than entering it, for configurations that ask for
//!   hysteresis (the defaults do; `validate` does not require it);
//! - `backoff(n + 1) == min(2 backoff(n), max_ejection)`, and each failed return quarantines
//!   for `backoff(repeat)` within the documented jitter bounds.
//!
//! Case counts are kept small so that `cargo test` (a debug build) stays fast.

use exitpool::{Breaker, Ejection, HealthConfig, Reason, Signal, State, Transition};
use proptest::prelude::*;

/// What a lease carries back to its breaker: the half-open period it was a trial in (0: none).
type Trial = u32;

fn take(b: &mut Breaker) -> Trial {
    b.on_lease()
}

fn is_trial(t: Trial) -> bool {
    t != 0
}

/// The lease expired unreported.
fn abandon(b: &mut Breaker, t: Trial) {
    b.trial_done(t);
}

fn report(b: &mut Breaker, cfg: &HealthConfig, signal: Signal, t: Trial, now: f64, ejection: Ejection, jitter: f64) -> Option<Transition> {
    b.record(cfg, signal, t, now, ejection, jitter)
}

/// A lease that went out through the breaker, and in which half-open period (the number of
/// times the breaker had entered probing when it went out).
#[derive(Debug, Clone, Copy)]
struct Out {
    trial: Trial,
    period: u32,
}

#[derive(Debug, Clone)]
enum Op {
    /// Time passes; then the breaker is polled, as the pool polls before every decision.
    Advance(f64),
    /// A lease goes out if the breaker admits one.
    Lease,
    /// An outstanding lease comes back with its report's signal (a report with no lease out
    /// is a plain signal).
    Return {
        pick: usize,
        signal: Signal,
        ejection: Ejection,
        jitter: f64,
    },
    /// A signal that no lease carried (another source of evidence, e.g. a probe).
    Signal {
        signal: Signal,
        ejection: Ejection,
        jitter: f64,
    },
    /// An outstanding lease expires unreported: its trial is handed back.
    Abandon(usize),
    Revive,
}

/// What a transition was triggered by.
#[derive(Debug, Clone, Copy)]
enum Via {
    Poll,
    Record { ejection: Ejection, jitter: f64 },
    Revive,
}

/// The breaker's observable state before an operation.
#[derive(Debug, Clone, Copy)]
struct Before {
    state: State,
    since: f64,
    until: f64,
    repeats: u32,
    quarantines: u32,
}

fn config() -> impl Strategy<Value = HealthConfig> {
    (
        prop_oneof![Just(0.0), Just(0.2), 0.0f64..0.9],
        1u32..=4,
        1u32..=5,
        1u32..=8,
        prop_oneof![Just((30.0, 600.0)), Just((5.0, 40.0)), Just((2.0, 2.0))],
        prop_oneof![Just(0.0), Just(10.0)],
        prop_oneof![Just(2.0), Just(5.0)],
        prop_oneof![Just(0.0), Just(100.0), Just(600.0)],
    )
        .prop_map(|(jitter, trials, dead_after, recover, (base, max), min_hold, consecutive, forgive_after)| HealthConfig {
            jitter,
            half_open_trials: trials,
            dead_after,
            recover_successes: recover,
            base_ejection: base,
            max_ejection: max,
            min_hold,
            consecutive,
            degrade_at: 2.0,
            forgive_after,
            window: 8,
            min_calls: 4,
            ..HealthConfig::default()
        })
}

fn signal() -> impl Strategy<Value = Signal> {
    prop_oneof![
        4 => Just(Signal::Success),
        2 => Just(Signal::Failure(1.0)),
        2 => Just(Signal::Failure(3.0)),
        1 => Just(Signal::Captcha),
        1 => Just(Signal::SiteError),
    ]
}

fn ejection() -> impl Strategy<Value = Ejection> {
    prop_oneof![6 => Just(Ejection::Allowed), 1 => Just(Ejection::Refused), 1 => Just(Ejection::Suspended)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => prop_oneof![Just(0.0), 0.0f64..3.0, 0.0f64..60.0, 0.0f64..900.0].prop_map(Op::Advance),
        3 => Just(Op::Lease),
        4 => (any::<usize>(), signal(), ejection(), 0.0f64..1.0)
            .prop_map(|(pick, signal, ejection, jitter)| Op::Return { pick, signal, ejection, jitter }),
        2 => (signal(), ejection(), 0.0f64..1.0).prop_map(|(signal, ejection, jitter)| Op::Signal { signal, ejection, jitter }),
        1 => any::<usize>().prop_map(Op::Abandon),
        1 => Just(Op::Revive),
    ]
}

/// One breaker driven by the operations, with the little the properties need to remember.
struct Run {
    cfg: HealthConfig,
    b: Breaker,
    now: f64,
    out: Vec<Out>,
    /// Half-open periods entered so far.
    period: u32,
    /// When the running quarantine ends, as it was set on entering it.
    until: Option<f64>,
    quarantined_seconds: f64,
}

impl Run {
    fn new(cfg: HealthConfig) -> Run {
        let now = 1000.0;
        Run { cfg, b: Breaker::new(now), now, out: Vec::new(), period: 0, until: None, quarantined_seconds: 0.0 }
    }

    fn before(&self) -> Before {
        Before {
            state: self.b.state(),
            since: self.b.since(),
            until: self.b.until(),
            repeats: self.b.repeats(),
            quarantines: self.b.quarantines,
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let before = self.before();
        match *op {
            Op::Advance(dt) => {
                self.now += dt;
                let t = self.b.poll(self.now);
                self.check(before, t, Via::Poll)?;
            }
            Op::Lease => {
                if self.b.admits(&self.cfg) {
                    let trial = take(&mut self.b);
                    prop_assert_eq!(is_trial(trial), before.state == State::Probing, "a lease is a trial exactly while probing");
                    self.out.push(Out { trial, period: self.period });
                } else {
                    prop_assert!(
                        matches!(before.state, State::Quarantined | State::Dead)
                            || (before.state == State::Probing && self.b.trials_out() >= self.cfg.half_open_trials),
                        "{:?} refused a lease with {} trials out",
                        before.state,
                        self.b.trials_out()
                    );
                }
            }
            Op::Return { pick, signal, ejection, jitter } => {
                let trial = if self.out.is_empty() { Trial::default() } else { self.out.remove(pick % self.out.len()).trial };
                let t = report(&mut self.b, &self.cfg, signal, trial, self.now, ejection, jitter);
                self.check(before, t, Via::Record { ejection, jitter })?;
            }
            Op::Signal { signal, ejection, jitter } => {
                let t = report(&mut self.b, &self.cfg, signal, Trial::default(), self.now, ejection, jitter);
                self.check(before, t, Via::Record { ejection, jitter })?;
            }
            Op::Abandon(pick) => {
                if !self.out.is_empty() {
                    let out = self.out.remove(pick % self.out.len());
                    abandon(&mut self.b, out.trial);
                }
                prop_assert_eq!(self.b.state(), before.state);
            }
            Op::Revive => {
                let t = self.b.revive(self.now);
                self.check(before, t, Via::Revive)?;
                prop_assert_eq!(self.b.state(), State::Healthy);
            }
        }
        self.invariants(before)
    }

    /// Whether the change (or its absence) is one the lifecycle allows.
    fn check(&mut self, before: Before, t: Option<Transition>, via: Via) -> Result<(), TestCaseError> {
        let cfg = &self.cfg;
        let now = self.now;
        let Some(t) = t else {
            prop_assert_eq!(self.b.state(), before.state, "the state changed without a transition");
            return Ok(());
        };
        prop_assert_eq!(t.from, before.state);
        prop_assert_eq!(t.to, self.b.state());
        prop_assert_eq!(self.b.since(), now, "a new state starts now");
        let judged = matches!(via, Via::Record { ejection: Ejection::Allowed | Ejection::Refused, .. });
        let held = now - before.since >= cfg.min_hold;
        match (t.from, t.to, t.reason, via) {
            (from, State::Healthy, Reason::Revived, Via::Revive) => prop_assert!(from != State::Healthy),
            (State::Healthy, State::Degraded, Reason::EjectionRefused, Via::Record { ejection: Ejection::Refused, .. }) => {}
            (State::Healthy, State::Degraded, Reason::ConsecutiveFailures(s), _) if judged => {
                prop_assert!(s >= cfg.degrade_at && held, "degraded at {} strikes after {} s", s, now - before.since);
            }
            (State::Degraded, State::Healthy, Reason::Recovered(n), _) if judged => {
                prop_assert!(n >= cfg.recover_successes && held, "recovered after {} successes, {} s", n, now - before.since);
            }
            (State::Healthy | State::Degraded, State::Quarantined, reason, Via::Record { ejection: Ejection::Allowed, jitter }) => {
                let tripped = match reason {
                    Reason::ConsecutiveFailures(s) => s >= cfg.consecutive,
                    Reason::ConsecutiveCaptchas(n) => n >= cfg.captcha_consecutive,
                    Reason::FailureRate(r, n) => r >= cfg.failure_rate && n >= cfg.min_calls,
                    Reason::CaptchaRate(r, n) => r >= cfg.captcha_rate && n >= cfg.min_calls,
                    _ => false,
                };
                prop_assert!(tripped, "quarantined for {:?}", reason);
                self.quarantined(before, jitter)?;
            }
            (State::Probing, State::Quarantined, Reason::TrialFailed, Via::Record { jitter, .. }) if judged => {
                self.quarantined(before, jitter)?;
            }
            (State::Probing, State::Dead, Reason::FailedReturns(n), _) if judged => {
                prop_assert!(n >= cfg.dead_after, "dead after {} failed returns", n);
            }
            (State::Probing, State::Healthy, Reason::Recovered(n), _) if judged => {
                prop_assert!(n >= cfg.recover_successes, "recovered after {} successes", n);
            }
            (State::Quarantined, State::Probing, Reason::BackoffOver(_), Via::Poll) => {
                // A quarantine never ends before its backoff.
                prop_assert!(now >= before.until, "left quarantine at {} before its end {}", now, before.until);
                prop_assert_eq!(self.until, Some(before.until));
            }
            (from, to, reason, via) => prop_assert!(false, "an edge off the lifecycle: {:?} -> {:?} ({:?}) by {:?}", from, to, reason, via),
        }
        if t.to == State::Probing {
            self.period += 1;
        }
        if t.from == State::Quarantined || t.from == State::Dead {
            self.quarantined_seconds += now - before.since;
        }
        if t.to != State::Quarantined {
            self.until = None;
        }
        Ok(())
    }

    /// Entering quarantine: one more repeat, and a backoff of `cfg.backoff(repeats)` times the
    /// jitter factor, within the ceiling.
    fn quarantined(&mut self, before: Before, jitter: f64) -> Result<(), TestCaseError> {
        let cfg = &self.cfg;
        let repeats = self.b.repeats();
        prop_assert_eq!(repeats, before.repeats.saturating_add(1));
        prop_assert_eq!(self.b.quarantines, before.quarantines + 1);
        let backoff = cfg.backoff(repeats);
        prop_assert!(backoff <= cfg.max_ejection, "backoff {} over the ceiling {}", backoff, cfg.max_ejection);
        prop_assert!(backoff >= cfg.base_ejection.min(cfg.max_ejection));
        let factor = 1.0 - cfg.jitter + 2.0 * cfg.jitter * jitter.clamp(0.0, 1.0);
        let lasts = self.b.until() - self.now;
        let eps = 1e-9 * cfg.max_ejection.max(1.0);
        prop_assert!((lasts - backoff * factor).abs() <= eps, "quarantine of {} s, expected {} x {}", lasts, backoff, factor);
        prop_assert!(lasts <= cfg.max_ejection * (1.0 + cfg.jitter) + eps, "quarantine of {} s over the ceiling", lasts);
        prop_assert!(lasts >= cfg.base_ejection * (1.0 - cfg.jitter) - eps, "quarantine of {} s under the base", lasts);
        self.until = Some(self.b.until());
        Ok(())
    }

    fn invariants(&self, before: Before) -> Result<(), TestCaseError> {
        let cfg = &self.cfg;
        let b = &self.b;
        match b.state() {
            State::Healthy | State::Degraded => prop_assert!(b.admits(cfg)),
            State::Quarantined => {
                prop_assert!(!b.admits(cfg));
                prop_assert_eq!(self.until, Some(b.until()), "a quarantine's end moved");
                // Every advance polls, so a quarantine still running has not reached its end.
                prop_assert!(self.now < b.until(), "still quarantined at {} after its end {}", self.now, b.until());
            }
            State::Dead => prop_assert!(!b.admits(cfg)),
            State::Probing => {
                prop_assert!(b.trials_out() <= cfg.half_open_trials);
                prop_assert_eq!(b.admits(cfg), b.trials_out() < cfg.half_open_trials);
                // Half-open admits at most its trials: counting the trial leases of this
                // half-open period still out, whatever came back from earlier periods.
                let mine = self.out.iter().filter(|o| is_trial(o.trial) && o.period == self.period).count() as u32;
                prop_assert!(
                    mine <= cfg.half_open_trials,
                    "{} trial leases of this half-open period out at once (half_open_trials {})",
                    mine,
                    cfg.half_open_trials
                );
            }
        }
        // Repeats are forgiven one at a time, only after stable healthy service.
        if b.repeats() < before.repeats {
            prop_assert_eq!(before.repeats - b.repeats(), 1);
            prop_assert!(b.state() == State::Healthy && self.now - before.since >= cfg.forgive_after);
        }
        prop_assert!((b.quarantined_seconds - self.quarantined_seconds).abs() <= 1e-6 * self.quarantined_seconds.max(1.0));
        prop_assert!(b.total_quarantined(self.now) >= b.quarantined_seconds);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_breaker_keeps_its_lifecycle(cfg in config(), ops in prop::collection::vec(op(), 1..200)) {
        prop_assert!(cfg.validate().is_ok(), "{:?}", cfg.validate());
        let mut run = Run::new(cfg);
        for op in &ops {
            run.apply(op)?;
        }
    }
}

/// A trial lease from an earlier half-open period that comes back late (a slow request) must
/// not free a slot of the current period: the smallest case of the property above.
#[test]
fn an_old_trial_coming_back_frees_no_slot_of_a_new_half_open_period() {
    let cfg = HealthConfig { jitter: 0.0, half_open_trials: 2, ..HealthConfig::default() };
    let mut run = Run::new(cfg);
    let ops = [
        Op::Signal { signal: Signal::Failure(5.0), ejection: Ejection::Allowed, jitter: 0.5 }, // quarantined
        Op::Advance(30.0),                                                                     // probing
        Op::Lease,                                                                             // trial A
        Op::Lease,                                                                             // trial B
        Op::Return { pick: 0, signal: Signal::Failure(1.0), ejection: Ejection::Allowed, jitter: 0.5 }, // A fails
        Op::Advance(60.0),                                                                     // probing again
        Op::Lease,                                                                             // trial C
        Op::Lease,                                                                             // trial D
        Op::Return { pick: 0, signal: Signal::Success, ejection: Ejection::Allowed, jitter: 0.5 }, // B, late
        Op::Lease,                                                                             // must be refused
    ];
    for (i, op) in ops.iter().enumerate() {
        if let Err(e) = run.apply(op) {
            panic!("step {i} ({op:?}): {e}");
        }
    }
    assert_eq!(run.b.state(), State::Probing);
}

// --- thresholds, hysteresis and backoff -------------------------------------------------------

/// Any configuration `HealthConfig::validate` accepts, over the thresholds that decide a trip.
fn valid_config() -> impl Strategy<Value = HealthConfig> {
    (
        (prop_oneof![Just(1.0), Just(2.0), Just(2.5), Just(5.0), Just(8.0)], 0.0f64..=1.0),
        (prop_oneof![Just(1.0), Just(2.5), Just(3.0)], 1u32..=5),
        (1u32..=64).prop_flat_map(|w| (Just(w), 0..=w)),
        (prop_oneof![Just(0.3), Just(1.0), 0.05f64..=1.0], prop_oneof![Just(0.15), Just(1.0), 0.05f64..=1.0]),
        (1u32..=12, 1u32..=4, 2u32..=8),
        (
            prop_oneof![Just((30.0, 600.0)), Just((5.0, 40.0)), Just((2.0, 2.0)), Just((0.25, 1e6))],
            prop_oneof![Just(0.0), Just(0.2), 0.0f64..0.99],
        ),
        prop_oneof![Just(0.0), Just(10.0)],
    )
        .prop_map(
            |(
                (consecutive, degrade),
                (block_weight, captcha_consecutive),
                (window, min_calls),
                (failure_rate, captcha_rate),
                (recover, trials, dead_after),
                ((base, max), jitter),
                min_hold,
            )| {
                HealthConfig {
                    consecutive,
                    // Anywhere in (0, consecutive]: degrading never takes more than quarantining.
                    degrade_at: (consecutive * degrade).max(0.5).min(consecutive),
                    block_weight,
                    captcha_consecutive,
                    window,
                    min_calls,
                    failure_rate,
                    captcha_rate,
                    recover_successes: recover,
                    half_open_trials: trials,
                    dead_after,
                    base_ejection: base,
                    max_ejection: max,
                    jitter,
                    min_hold,
                    ..HealthConfig::default()
                }
            },
        )
        .prop_filter("a configuration the core accepts", |c| c.validate().is_ok())
}

/// The documented trip rules, counted independently of the breaker: weighted consecutive
/// failures (a captcha weighs 1; a success clears them), consecutive captchas (any other
/// answer clears them), and the failure and captcha rates over the last `window` calls once
/// `min_calls` calls are in. 5xx answers (site errors) are evidence about the site only.
#[derive(Debug, Default)]
struct Evidence {
    strikes: f64,
    captchas: u32,
    /// The last calls, newest last: (failed, captcha).
    calls: std::collections::VecDeque<(bool, bool)>,
}

impl Evidence {
    fn observe(&mut self, cfg: &HealthConfig, signal: Signal) {
        let call = match signal {
            Signal::SiteError => return,
            Signal::Success => {
                self.strikes = 0.0;
                self.captchas = 0;
                (false, false)
            }
            Signal::Failure(w) => {
                self.strikes += w;
                self.captchas = 0;
                (true, false)
            }
            Signal::Captcha => {
                self.strikes += 1.0;
                self.captchas += 1;
                (true, true)
            }
        };
        self.calls.push_back(call);
        while self.calls.len() > cfg.window as usize {
            self.calls.pop_front();
        }
    }

    /// What an incident (a suspended judgement) wipes: everything but the site-failing count.
    fn suspend(&mut self) {
        *self = Evidence::default();
    }

    /// Every threshold the evidence meets, as the reason a trip would give.
    fn met(&self, cfg: &HealthConfig) -> Vec<Reason> {
        let mut met = Vec::new();
        if self.strikes >= cfg.consecutive {
            met.push(Reason::ConsecutiveFailures(self.strikes));
        }
        if self.captchas >= cfg.captcha_consecutive {
            met.push(Reason::ConsecutiveCaptchas(self.captchas));
        }
        let n = self.calls.len() as u32;
        if n >= cfg.min_calls && n > 0 {
            let failures = self.calls.iter().filter(|c| c.0).count() as f64 / n as f64;
            let captchas = self.calls.iter().filter(|c| c.1).count() as f64 / n as f64;
            if captchas >= cfg.captcha_rate {
                met.push(Reason::CaptchaRate(captchas, n));
            }
            if failures >= cfg.failure_rate {
                met.push(Reason::FailureRate(failures, n));
            }
        }
        met
    }
}

fn trip_signal() -> impl Strategy<Value = Signal> {
    prop_oneof![
        3 => Just(Signal::Success),
        2 => Just(Signal::Failure(1.0)),
        1 => Just(Signal::Failure(2.5)),
        1 => Just(Signal::Failure(3.0)),
        2 => Just(Signal::Captcha),
        1 => Just(Signal::SiteError),
    ]
}

/// Signals until `kind` quarantines a fresh breaker, all allowed to eject at one instant.
fn signals_to_trip(cfg: &HealthConfig, kind: Signal) -> u32 {
    let mut b = Breaker::new(0.0);
    for n in 1..=1000 {
        if let Some(t) = b.record(cfg, kind, 0, 0.0, Ejection::Allowed, 0.5) {
            if t.to == State::Quarantined {
                return n;
            }
        }
    }
    panic!("{kind:?} never quarantined under {cfg:?}");
}

/// The least evidence that quarantines: the cheapest of the signals the pool sends a breaker
/// (a block, a timeout or refused tunnel, a captcha), from the documented thresholds alone.
fn documented_trip(cfg: &HealthConfig) -> u32 {
    let by_weight = |w: f64| (cfg.consecutive / w).ceil() as u32;
    // A captcha weighs 1 and counts as a captcha; every failing call counts towards the rates.
    let rate = cfg.min_calls.max(1);
    [by_weight(cfg.block_weight), by_weight(1.0), cfg.captcha_consecutive.min(by_weight(1.0))]
        .into_iter()
        .map(|n| n.min(rate))
        .min()
        .unwrap_or(u32::MAX)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A breaker in service trips exactly when one of its thresholds is met, not a signal
    /// sooner or later: to quarantine if the pool allows an ejection, to degraded (from
    /// healthy) if it refuses one; and a suspended judgement (an incident) trips nothing and
    /// forgets the exit's evidence.
    #[test]
    fn a_breaker_trips_exactly_when_a_threshold_is_met(
        cfg in valid_config(),
        steps in prop::collection::vec((trip_signal(), prop_oneof![8 => Just(Ejection::Allowed), 1 => Just(Ejection::Refused), 1 => Just(Ejection::Suspended)], prop_oneof![Just(0.0), 0.0f64..20.0]), 1..120),
    ) {
        let mut b = Breaker::new(0.0);
        let mut evidence = Evidence::default();
        let mut now = 0.0;
        for (i, &(signal, ejection, dt)) in steps.iter().enumerate() {
            now += dt;
            let before = b.state();
            prop_assert!(matches!(before, State::Healthy | State::Degraded));
            evidence.observe(&cfg, signal);
            let met = evidence.met(&cfg);
            let t = b.record(&cfg, signal, 0, now, ejection, 0.5);
            if signal == Signal::SiteError {
                prop_assert_eq!(t, None, "a 5xx judged the exit");
                continue;
            }
            if ejection == Ejection::Suspended {
                prop_assert_eq!(t, None, "judged during an incident");
                evidence.suspend();
                continue;
            }
            let to = t.map(|t| t.to);
            match (met.is_empty(), ejection) {
                (false, Ejection::Allowed) => {
                    let t = t.unwrap_or_else(|| panic!("step {i}: {met:?} met, yet no trip (cfg {cfg:?})"));
                    prop_assert_eq!(t.to, State::Quarantined, "step {}: {:?} met", i, met);
                    prop_assert!(met.contains(&t.reason), "step {}: tripped for {:?}, the thresholds met are {:?}", i, t.reason, met);
                    return Ok(());
                }
                (false, _) => {
                    let expected = if before == State::Healthy { Some(State::Degraded) } else { None };
                    prop_assert_eq!(to, expected, "step {}: a refused ejection of a {:?} breaker", i, before);
                    if let Some(t) = t {
                        prop_assert_eq!(t.reason, Reason::EjectionRefused);
                    }
                }
                (true, _) => {
                    prop_assert!(to != Some(State::Quarantined), "step {}: quarantined with no threshold met: {:?} (cfg {:?})", i, t, cfg);
                    if let Some(t) = t {
                        prop_assert!(matches!(t.reason, Reason::ConsecutiveFailures(_) | Reason::Recovered(_)), "step {}: {:?}", i, t);
                    }
                }
            }
        }
    }

    /// Hysteresis: with a configuration that asks for it (more successes to return than the
    /// fewest signals that trip, as the defaults do: 8 against 2 blocks), leaving quarantine
    /// takes more evidence than entering it. Entering takes exactly the documented evidence;
    /// leaving takes the whole backoff, then exactly `recover_successes` successful trials,
    /// and a failure among them starts the return over.
    #[test]
    fn leaving_quarantine_takes_more_evidence_than_entering(
        cfg in valid_config().prop_flat_map(|c| {
            let least = documented_trip(&c);
            (Just(c), (least + 1)..=(least + 6))
        }).prop_map(|(c, recover)| HealthConfig { recover_successes: recover, ..c }),
        fail_at in prop::option::of(0u32..8),
        jitter in 0.0f64..1.0,
    ) {
        prop_assert!(cfg.validate().is_ok());
        let kinds = [Signal::Failure(cfg.block_weight), Signal::Failure(1.0), Signal::Captcha];
        let enter = kinds.iter().map(|&k| signals_to_trip(&cfg, k)).min().unwrap();
        prop_assert_eq!(enter, documented_trip(&cfg), "the fewest signals that quarantine");

        let cheapest = kinds.into_iter().min_by_key(|&k| signals_to_trip(&cfg, k)).unwrap();
        let mut b = Breaker::new(0.0);
        let mut now = 100.0;
        for _ in 0..enter {
            b.record(&cfg, cheapest, 0, now, Ejection::Allowed, jitter);
        }
        prop_assert_eq!(b.state(), State::Quarantined);
        // No success counts while quarantined, and it does not end early.
        prop_assert_eq!(b.record(&cfg, Signal::Success, 0, now, Ejection::Allowed, jitter), None);
        prop_assert_eq!(b.poll(b.until() - 1e-6 * b.until().abs().max(1.0)), None);
        now = b.until();
        prop_assert_eq!(b.poll(now).map(|t| t.to), Some(State::Probing));

        // The return: successful trials, one at a time, until healthy.
        let mut leave = 0;
        let mut failed = false;
        loop {
            prop_assert!(b.admits(&cfg));
            let trial = b.on_lease();
            if fail_at == Some(leave) && !failed && leave + 1 < cfg.recover_successes {
                failed = true;
                let t = b.record(&cfg, Signal::Failure(1.0), trial, now, Ejection::Allowed, jitter).map(|t| t.to);
                prop_assert!(matches!(t, Some(State::Quarantined | State::Dead)), "a failed trial left {:?}", t);
                if t == Some(State::Dead) {
                    return Ok(());
                }
                now = b.until();
                b.poll(now);
                leave = 0;
                continue;
            }
            leave += 1;
            match b.record(&cfg, Signal::Success, trial, now, Ejection::Allowed, jitter) {
                None => prop_assert_eq!(b.state(), State::Probing),
                Some(t) => {
                    prop_assert_eq!((t.from, t.to), (State::Probing, State::Healthy));
                    break;
                }
            }
            prop_assert!(leave <= cfg.recover_successes, "still probing after {} successes", leave);
        }
        prop_assert_eq!(leave, cfg.recover_successes, "healthy again after {} successful trials", leave);
        prop_assert!(leave > enter, "{} successes to leave, {} signals to enter", leave, enter);
    }

    /// The quarantine backoff before jitter: the base, then doubling per repeat up to the
    /// ceiling and staying there: backoff(n + 1) == min(2 backoff(n), max_ejection).
    #[test]
    fn backoff_doubles_up_to_its_ceiling(cfg in valid_config(), n in 1u32..=2000) {
        prop_assert_eq!(cfg.backoff(1), cfg.base_ejection);
        prop_assert_eq!(cfg.backoff(n + 1), (2.0 * cfg.backoff(n)).min(cfg.max_ejection), "repeat {}", n);
        prop_assert_eq!(cfg.backoff(u32::MAX), cfg.max_ejection);
    }

    /// The same through a breaker: each failed return sends it back to a quarantine of
    /// `backoff(repeat)` times a jitter factor within [1 - jitter, 1 + jitter], until
    /// `dead_after` failed returns in a row declare it dead.
    #[test]
    fn each_failed_return_doubles_the_quarantine_within_the_jitter(
        cfg in valid_config(),
        draws in prop::collection::vec(0.0f64..1.0, 9),
    ) {
        let mut b = Breaker::new(0.0);
        let mut now = 50.0;
        let t = b.record(&cfg, Signal::Failure(cfg.consecutive), 0, now, Ejection::Allowed, draws[0]);
        prop_assert_eq!(t.map(|t| t.to), Some(State::Quarantined));
        let eps = 1e-9 * cfg.max_ejection.max(1.0);
        let mut returns = 0;
        for (repeat, &draw) in (1u32..).zip(&draws[1..]) {
            let lasts = b.until() - now;
            let backoff = cfg.backoff(repeat);
            prop_assert!(lasts >= backoff * (1.0 - cfg.jitter) - eps && lasts <= backoff * (1.0 + cfg.jitter) + eps,
                "quarantine {} lasts {} s, backoff {} with jitter {}", repeat, lasts, backoff, cfg.jitter);
            now = b.until();
            prop_assert_eq!(b.poll(now).map(|t| t.to), Some(State::Probing));
            let trial = b.on_lease();
            let t = b.record(&cfg, Signal::Failure(1.0), trial, now, Ejection::Allowed, draw).unwrap();
            returns += 1;
            if returns >= cfg.dead_after {
                prop_assert_eq!((t.to, t.reason), (State::Dead, Reason::FailedReturns(returns)));
                return Ok(());
            }
            prop_assert_eq!((t.to, t.reason), (State::Quarantined, Reason::TrialFailed));
            prop_assert_eq!(b.repeats(), repeat + 1);
        }
    }
}

/// The defaults have the hysteresis docs/health.md promises: two blocks quarantine, eight
/// successful trials bring the exit back.
#[test]
fn the_defaults_take_more_to_leave_quarantine_than_to_enter() {
    let cfg = HealthConfig::default();
    assert_eq!(signals_to_trip(&cfg, Signal::Failure(cfg.block_weight)), 2);
    assert_eq!(documented_trip(&cfg), 2);
    assert!(cfg.recover_successes > signals_to_trip(&cfg, Signal::Failure(1.0)));
}
