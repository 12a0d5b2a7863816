//! Health: whether an exit is still fit to serve, judged by breakers and by the pool-wide
//! board that holds them all.
//!
//! - `config`: the thresholds and timings every breaker and the board judge by;
//! - `breaker`: one breaker, for one exit's tunnel or one (exit, site) pair;
//! - `board`: every breaker of the pool and the safeguards that judge them together
//!   (`incidents`: the site and global incidents among them; `group`: exit groups, the slots
//!   of one gateway, that one breaker takes out and brings back together).
//!
//! This file holds the vocabulary they share: states, signals, reasons and transitions.

mod board;
mod breaker;
mod config;
mod draw;
mod group;
mod incidents;

pub use board::{Admit, HealthBoard, OutboxVerdict, Probe, Trial, SITE_VERDICT};
pub use breaker::Breaker;
pub use config::HealthConfig;
pub use group::Group;

use crate::outcome::Outcome;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    Healthy,
    /// Still serving, at reduced weight.
    Degraded,
    /// Half-open: a trickle of trial leases decides the return.
    Probing,
    /// Out of service until its backoff ends.
    Quarantined,
    /// Out until revived (a probe or `Pool::revive`).
    Dead,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Healthy => "healthy",
            State::Degraded => "degraded",
            State::Probing => "probing",
            State::Quarantined => "quarantined",
            State::Dead => "dead",
        }
    }

    /// Out of service.
    pub fn is_ejected(self) -> bool {
        matches!(self, State::Quarantined | State::Dead)
    }

    /// Counted against the ejection cap: out of service, or back only on trial. Counting a
    /// probing exit means a failed trial, which sends it straight back, never breaks the cap.
    pub fn holds_a_cap_slot(self) -> bool {
        matches!(self, State::Quarantined | State::Dead | State::Probing)
    }

    pub const ALL: [State; 5] = [State::Healthy, State::Degraded, State::Probing, State::Quarantined, State::Dead];
}

/// What one report says to one breaker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Signal {
    Success,
    /// A failure of this weight against the exit.
    Failure(f64),
    Captcha,
    /// Evidence about the site only (5xx): never trips a breaker, but marks the exit as
    /// failing the site for incident detection.
    SiteError,
}

impl Signal {
    /// The signal a report sends to the (exit, site) breaker.
    pub fn for_site(outcome: Outcome, cfg: &HealthConfig) -> Option<Signal> {
        match outcome {
            Outcome::Success | Outcome::RateLimited => Some(Signal::Success),
            Outcome::Block => Some(Signal::Failure(cfg.block_weight)),
            Outcome::Timeout => Some(Signal::Failure(1.0)),
            Outcome::Captcha => Some(Signal::Captcha),
            Outcome::TargetError => Some(Signal::SiteError),
            Outcome::Connect | Outcome::Other => None,
        }
    }

    /// The signal a report sends to the exit's tunnel breaker: any answer from the far side
    /// proves the tunnel works; a refused or broken connection is a tunnel failure.
    pub fn for_tunnel(outcome: Outcome, cfg: &HealthConfig) -> Option<Signal> {
        match outcome {
            Outcome::Connect => Some(Signal::Failure(cfg.connect_weight)),
            Outcome::Other => None,
            _ => Some(Signal::Success),
        }
    }
}

/// Why a breaker changed state, with the figures behind it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reason {
    ConsecutiveFailures(f64),
    /// The rate and the number of calls it was judged over.
    FailureRate(f64, u32),
    CaptchaRate(f64, u32),
    ConsecutiveCaptchas(u32),
    Recovered(u32),
    BackoffOver(f64),
    TrialFailed,
    FailedReturns(u32),
    /// A trip that the ejection cap, the minimum in service or an incident turned into
    /// reduced weight.
    EjectionRefused,
    Revived,
    /// Decided by another worker of the fleet and shared through the store.
    Fleet,
    /// This worker's ejection, refused by the fleet-wide cap in the store.
    FleetCapRefused,
    /// The failures that moved it were its gateway's (its exit group's breaker opened on
    /// them): withdrawn, so that the gateway's slots come back together.
    GatewayFault,
    /// Put back from the state a pool saved before a restart (`state=`).
    Resumed,
}

impl Reason {
    pub fn describe(&self, cfg: &HealthConfig) -> String {
        match *self {
            Reason::ConsecutiveFailures(n) => format!("{n} weighted consecutive failures (threshold {})", cfg.consecutive),
            Reason::FailureRate(r, n) => {
                format!("failure rate {:.0}% over the last {n} calls (threshold {:.0}%)", r * 100.0, cfg.failure_rate * 100.0)
            }
            Reason::CaptchaRate(r, n) => {
                format!("captcha rate {:.0}% over the last {n} calls (threshold {:.0}%)", r * 100.0, cfg.captcha_rate * 100.0)
            }
            Reason::ConsecutiveCaptchas(n) => format!("{n} consecutive captchas"),
            Reason::Recovered(n) => format!("{n} consecutive successes"),
            Reason::BackoffOver(s) => format!("quarantine of {s:.1} s is over"),
            Reason::TrialFailed => "a trial lease failed".to_owned(),
            Reason::FailedReturns(n) => format!("{n} failed returns in a row"),
            Reason::EjectionRefused => "ejection refused (cap, minimum in service or incident): reduced weight instead".to_owned(),
            Reason::Revived => "revived".to_owned(),
            Reason::Fleet => "verdict of another worker in the fleet".to_owned(),
            Reason::FleetCapRefused => {
                "ejection refused by the fleet-wide cap (other workers' ejections count): reduced weight instead".to_owned()
            }
            Reason::Resumed => "resumed from the state saved before a restart".to_owned(),
            Reason::GatewayFault => "its connection failures were its gateway's, not its own: withdrawn".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transition {
    pub from: State,
    pub to: State,
    pub reason: Reason,
}

/// Whether the pool lets a trip eject the exit now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ejection {
    Allowed,
    /// Over the cap or the minimum in service: down-weight instead.
    Refused,
    /// A site incident or a fault of ours: do not judge the exit at all.
    Suspended,
}
