//! The health configuration: thresholds and timings, with the rules that check them.

use crate::error::{Error, Result};

/// Deserialized from a `[health]` table or a `health=` dict; a key left out keeps its default.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthConfig {
    /// Weighted consecutive failures that quarantine (Envoy's consecutive_5xx: 5).
    pub consecutive: f64,
    /// Weighted consecutive failures that degrade; also what marks an exit as failing a site
    /// when incidents are judged.
    pub degrade_at: f64,
    /// Weight of a block (403, 407, 451): evidence about the exit itself.
    pub block_weight: f64,
    /// Weight of a refused or broken connection to the proxy, on the exit's tunnel breaker.
    /// 1 like Envoy's consecutive gateway failures; raise it towards the 3 of a 407 when a
    /// reset reliably means a dead endpoint for your provider.
    pub connect_weight: f64,
    /// Calls in the sliding window (at most 64).
    pub window: u32,
    /// Calls the window needs before its rates are judged (resilience4j's minimumNumberOfCalls).
    pub min_calls: u32,
    /// Failure rate over the window that quarantines (success below 70%, the pool article).
    pub failure_rate: f64,
    /// Captcha rate over the window that quarantines: lower, since captchas speak of reputation.
    pub captcha_rate: f64,
    /// Consecutive captchas that quarantine.
    pub captcha_consecutive: u32,
    /// Consecutive successes that end degraded service or a half-open trial run; more than it
    /// takes to enter, which is the hysteresis.
    pub recover_successes: u32,
    /// Trial leases a probing exit admits at once.
    pub half_open_trials: u32,
    /// First quarantine (Envoy's base_ejection_time: 30 s); doubles with each repeat.
    pub base_ejection: f64,
    /// Ceiling of a quarantine (the balancing article's 600 s).
    pub max_ejection: f64,
    /// Backoffs are multiplied by a random factor in [1 - jitter, 1 + jitter].
    pub jitter: f64,
    /// Least time in healthy or degraded before moving between them.
    pub min_hold: f64,
    /// Stable healthy service that forgives one repeat.
    pub forgive_after: f64,
    /// Consecutive failed returns that declare an exit dead.
    pub dead_after: u32,
    /// Share of the pool that soft evidence (blocks, captchas, timeouts: a site's verdict)
    /// may eject at once (Envoy's max_ejection_percent: 10%); one exit may always be ejected.
    /// Hard evidence (a refused or broken tunnel, a drift) is not capped: dead is not an
    /// outlier.
    pub max_ejected: f64,
    /// Exits that soft evidence always leaves in service.
    pub min_in_service: u32,
    /// Below this share of the pool in service, the pool panics (Envoy's
    /// healthy_panic_threshold: 50%): it serves from every exit rather than from the few left.
    /// 0 never panics.
    pub panic_threshold: f64,
    /// Share of exits failing one site at once that makes it a site incident.
    pub incident_fraction: f64,
    /// Fewest failing exits that can make an incident.
    pub incident_min_exits: u32,
    /// During a site incident, leases for that site are spaced this far apart.
    pub incident_interval: f64,
    /// How long a 429 cools an exit for its site when no Retry-After is given.
    pub rate_limit_cooldown: f64,
}

impl HealthConfig {
    /// How long a 429 cools an exit for its site: the site's Retry-After, else
    /// `rate_limit_cooldown`, never above `max_ejection`. A site (or a parser) asking for a day
    /// or a millennium gets the longest rest a quarantine gets; the exit is tried again then,
    /// and a further 429 cools it again.
    pub fn cooling(&self, retry_after: Option<f64>) -> f64 {
        retry_after.unwrap_or(self.rate_limit_cooldown).min(self.max_ejection)
    }
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            consecutive: 5.0,
            degrade_at: 2.0,
            block_weight: 3.0,
            connect_weight: 1.0,
            window: 20,
            min_calls: 10,
            failure_rate: 0.3,
            captcha_rate: 0.15,
            captcha_consecutive: 3,
            recover_successes: 8,
            half_open_trials: 3,
            base_ejection: 30.0,
            max_ejection: 600.0,
            jitter: 0.2,
            min_hold: 10.0,
            forgive_after: 600.0,
            dead_after: 5,
            max_ejected: 0.10,
            min_in_service: 1,
            panic_threshold: 0.5,
            incident_fraction: 0.5,
            incident_min_exits: 3,
            incident_interval: 1.0,
            rate_limit_cooldown: 30.0,
        }
    }
}

impl HealthConfig {
    pub fn validate(&self) -> Result<()> {
        let bad = |key: &'static str, problem: String| Err(Error::setting(&["health", key], problem));
        let finite_pos = [
            ("consecutive", self.consecutive),
            ("degrade_at", self.degrade_at),
            ("block_weight", self.block_weight),
            ("connect_weight", self.connect_weight),
            ("base_ejection", self.base_ejection),
            ("max_ejection", self.max_ejection),
        ];
        for (name, v) in finite_pos {
            if !(v.is_finite() && v > 0.0) {
                return bad(name, format!("{v} must be a finite number > 0"));
            }
        }
        let finite_nonneg = [
            ("min_hold", self.min_hold),
            ("forgive_after", self.forgive_after),
            ("incident_interval", self.incident_interval),
            ("rate_limit_cooldown", self.rate_limit_cooldown),
        ];
        for (name, v) in finite_nonneg {
            if !(v.is_finite() && v >= 0.0) {
                return bad(name, format!("{v} must be a finite number >= 0"));
            }
        }
        for (name, v) in [("base_ejection", self.base_ejection), ("max_ejection", self.max_ejection)].into_iter().chain(finite_nonneg) {
            crate::clock::check_ceiling(&["health", name], v)?;
        }
        for (name, v) in [
            ("failure_rate", self.failure_rate),
            ("captcha_rate", self.captcha_rate),
            ("max_ejected", self.max_ejected),
            ("incident_fraction", self.incident_fraction),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return bad(name, format!("{v} must be in (0, 1]"));
            }
        }
        if !(self.panic_threshold.is_finite() && (0.0..=1.0).contains(&self.panic_threshold)) {
            return bad("panic_threshold", format!("{} must be in [0, 1]", self.panic_threshold));
        }
        if !(self.jitter.is_finite() && (0.0..1.0).contains(&self.jitter)) {
            return bad("jitter", format!("{} must be in [0, 1)", self.jitter));
        }
        if self.max_ejection < self.base_ejection {
            return bad("max_ejection", format!("{} is below base_ejection {}", self.max_ejection, self.base_ejection))
                .map_err(|e| e.also(&["health", "base_ejection"]));
        }
        if self.degrade_at > self.consecutive {
            return bad("degrade_at", format!("{} is above consecutive {}", self.degrade_at, self.consecutive))
                .map_err(|e| e.also(&["health", "consecutive"]));
        }
        if !(1..=64).contains(&self.window) || self.min_calls > self.window {
            return bad("window", format!("{} must be 1..=64 and min_calls {} at most the window", self.window, self.min_calls))
                .map_err(|e| e.also(&["health", "min_calls"]));
        }
        for (name, v) in [
            ("captcha_consecutive", self.captcha_consecutive),
            ("recover_successes", self.recover_successes),
            ("half_open_trials", self.half_open_trials),
            ("dead_after", self.dead_after),
        ] {
            if v == 0 {
                return bad(name, "must be at least 1".into());
            }
        }
        Ok(())
    }

    /// The quarantine for the `repeat`-th ejection (1-based) before jitter: base * 2^(repeat-1),
    /// never above the ceiling, whatever the repeat count.
    pub fn backoff(&self, repeat: u32) -> f64 {
        let doublings = repeat.saturating_sub(1).min(1023) as i32;
        (self.base_ejection * 2f64.powi(doublings)).min(self.max_ejection)
    }

    /// `backoff` times the random factor in [1 - jitter, 1 + jitter] that `jitter` (a uniform
    /// draw in [0, 1)) picks: quarantines of exits failed together do not all end together.
    pub fn jittered(&self, backoff: f64, jitter: f64) -> f64 {
        backoff * (1.0 - self.jitter + 2.0 * self.jitter * jitter.clamp(0.0, 1.0))
    }
}
