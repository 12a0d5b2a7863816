//! The pool's configuration and the rules that check it.

use crate::error::{Error, Result};
use crate::health::HealthConfig;
use crate::pacing::PacingConfig;
use crate::select::Strategy;
use crate::warmup::WarmupConfig;

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
    /// Sessions kept at most (`None`: no bound but their TTL); idle ones go first.
    pub max_sessions: Option<u32>,
    /// Warm-up pairings kept at most (`None`: no bound but the horizon).
    pub max_pairings: Option<u32>,
    /// Request rates per site (`"*"`: every other site); empty, nothing is paced.
    pub pacing: PacingConfig,
}

/// The default of both `max_sessions` and `max_pairings`. A million sessions take about
/// 100 MB and a million pairings about 40 MB (docs/sessions-and-leases.md has the figures);
/// a fleet with more accounts active within one `session_ttl` raises it or passes `None`.
pub const DEFAULT_MAX_KEYS: u32 = 1_000_000;

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
            max_sessions: Some(DEFAULT_MAX_KEYS),
            max_pairings: Some(DEFAULT_MAX_KEYS),
            pacing: PacingConfig::default(),
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

/// `max_sessions` / `max_pairings` in `1..=u32::MAX`: 0 would keep nothing, not even the
/// session a lease is using. Wide enough for any integer a caller or a config file can give.
pub fn check_max_keys(name: &'static str, n: i128) -> Result<u32> {
    match u32::try_from(n) {
        Ok(m) if m >= 1 => Ok(m),
        _ => Err(Error::setting(&[name], format!("{n} is outside 1..={} (None for no bound)", u32::MAX))),
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
        for (name, m) in [("max_sessions", self.max_sessions), ("max_pairings", self.max_pairings)] {
            if let Some(m) = m {
                check_max_keys(name, m.into())?;
            }
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
