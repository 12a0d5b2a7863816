//! The pool's configuration and the rules that check it.

use crate::error::{Error, Result};
use crate::health::HealthConfig;
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
        for (name, v) in [("session_ttl", self.session_ttl), ("lease_ttl", self.lease_ttl), ("cooldown", self.cooldown)] {
            crate::clock::check_ceiling(name, v)?;
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
        self.health.validate()
    }
}
