//! Properties of one breaker, `exitpool::health::Breaker`, checked with proptest over any
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
//!   period at once, whatever became of the trials of earlier periods.
//!
//! Case counts are kept small so that `cargo test` (a debug build) stays fast.

use exitpool::health::{Breaker, Ejection, HealthConfig, Reason, Signal, State, Transition};
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
    Return { pick: usize, signal: Signal, ejection: Ejection, jitter: f64 },
    /// A signal that no lease carried (another source of evidence, e.g. a probe).
    Signal { signal: Signal, ejection: Ejection, jitter: f64 },
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
        Op::Advance(30.0),                                                                      // probing
        Op::Lease,                                                                              // trial A
        Op::Lease,                                                                              // trial B
        Op::Return { pick: 0, signal: Signal::Failure(1.0), ejection: Ejection::Allowed, jitter: 0.5 }, // A fails
        Op::Advance(60.0),                                                                      // probing again
        Op::Lease,                                                                              // trial C
        Op::Lease,                                                                              // trial D
        Op::Return { pick: 0, signal: Signal::Success, ejection: Ejection::Allowed, jitter: 0.5 }, // B, late
        Op::Lease,                                                                              // must be refused
    ];
    for (i, op) in ops.iter().enumerate() {
        if let Err(e) = run.apply(op) {
            panic!("step {i} ({op:?}): {e}");
        }
    }
    assert_eq!(run.b.state(), State::Probing);
}
