//! The warm-up governor: a (key, exit) pairing that is new may lease only slowly at first.
//!
//! A pairing is new when the key has not used that exit within `horizon` (24 h). Its
//! leases must be spaced at least `initial_interval * (1 - age / ramp)` apart: the first goes
//! at once, the gap shrinks linearly to nothing over `ramp` (30 minutes, as in the article), and
//! after that the pairing is warm. Fresh pairings are the riskiest moment in an account's life;
//! this spreads their first requests out instead of forbidding them.

use crate::error::{Error, Result};
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmupConfig {
    pub ramp: f64,
    pub initial_interval: f64,
    pub horizon: f64,
}

impl WarmupConfig {
    pub fn new(ramp: f64, initial_interval: f64, horizon: f64) -> Result<WarmupConfig> {
        for (name, v) in [("ramp", ramp), ("initial_interval", initial_interval), ("horizon", horizon)] {
            if !v.is_finite() || v <= 0.0 {
                return Err(Error::BadInput(format!("warmup {name} {v} must be a finite number of seconds > 0")));
            }
            crate::clock::check_ceiling(&format!("warmup {name}"), v)?;
        }
        if horizon < ramp {
            return Err(Error::BadInput(format!("warmup horizon {horizon} must be at least its ramp {ramp}")));
        }
        Ok(WarmupConfig { ramp, initial_interval, horizon })
    }
}

impl Default for WarmupConfig {
    fn default() -> Self {
        WarmupConfig { ramp: 1800.0, initial_interval: 60.0, horizon: 86_400.0 }
    }
}

/// When a (key, exit) pairing began and when it last leased.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pairing {
    pub born: f64,
    pub last: f64,
}

impl Pairing {
    /// The rule itself, for every store: the pairing after a lease now, or the seconds to wait.
    pub fn admit(prev: Option<Pairing>, cfg: &WarmupConfig, now: f64) -> std::result::Result<Pairing, f64> {
        let fresh = Pairing { born: now, last: now };
        let Some(p) = prev else { return Ok(fresh) };
        if now - p.last > cfg.horizon {
            // Unused for a day: the site sees a stranger again.
            return Ok(fresh);
        }
        let age = now - p.born;
        if age < cfg.ramp {
            let gap = cfg.initial_interval * (1.0 - age / cfg.ramp);
            let ready = p.last + gap;
            if now < ready {
                return Err(ready - now);
            }
        }
        Ok(Pairing { born: p.born, last: now })
    }
}

#[derive(Default)]
pub struct Pairings {
    by_key: HashMap<Box<str>, Vec<(u32, Pairing)>>,
    next_prune: f64,
}

impl Pairings {
    /// `Ok(())` if `key` may lease `exit` now (and records it), else the seconds to wait.
    pub fn admit(&mut self, cfg: &WarmupConfig, key: &str, exit: u32, now: f64) -> std::result::Result<(), f64> {
        self.prune(cfg, now);
        let list = match self.by_key.get_mut(key) {
            Some(l) => l,
            None => self.by_key.entry(key.into()).or_default(),
        };
        match list.iter_mut().find(|p| p.0 == exit) {
            Some(p) => p.1 = Pairing::admit(Some(p.1), cfg, now)?,
            None => list.push((exit, Pairing::admit(None, cfg, now)?)),
        }
        Ok(())
    }

    fn prune(&mut self, cfg: &WarmupConfig, now: f64) {
        if now < self.next_prune {
            return;
        }
        self.next_prune = now + cfg.horizon / 24.0;
        self.by_key.retain(|_, l| {
            l.retain(|p| now - p.1.last <= cfg.horizon);
            !l.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramp_spaces_a_new_pairing_then_lets_it_go() {
        let cfg = WarmupConfig::default();
        let mut p = Pairings::default();
        assert_eq!(p.admit(&cfg, "k", 1, 0.0), Ok(()));
        // Right after birth the gap is the whole initial interval.
        // One second after birth the gap has shrunk by 1/1800 of itself.
        let wait = p.admit(&cfg, "k", 1, 1.0).unwrap_err();
        assert!((wait - (60.0 * (1.0 - 1.0 / 1800.0) - 1.0)).abs() < 1e-9, "{wait}");
        assert_eq!(p.admit(&cfg, "k", 1, 60.0), Ok(()));
        // Half way through the ramp the gap is half as long.
        assert_eq!(p.admit(&cfg, "k", 1, 900.0), Ok(()));
        assert!(p.admit(&cfg, "k", 1, 929.0).is_err());
        assert_eq!(p.admit(&cfg, "k", 1, 930.0), Ok(()));
        // Warm: no spacing at all.
        assert_eq!(p.admit(&cfg, "k", 1, 1800.0), Ok(()));
        assert_eq!(p.admit(&cfg, "k", 1, 1800.0), Ok(()));
        // Another exit for the same key is a new pairing.
        assert_eq!(p.admit(&cfg, "k", 2, 1800.0), Ok(()));
        assert!(p.admit(&cfg, "k", 2, 1801.0).is_err());
    }

    #[test]
    fn a_known_pairing_is_not_new_until_the_horizon_passes() {
        let cfg = WarmupConfig::default();
        let mut p = Pairings::default();
        p.admit(&cfg, "k", 1, 0.0).unwrap();
        p.admit(&cfg, "k", 1, 2000.0).unwrap();
        assert_eq!(p.admit(&cfg, "k", 1, 2000.0 + 86_400.0), Ok(()));
        assert_eq!(p.admit(&cfg, "k", 1, 2000.0 + 86_400.0 + 1.0), Ok(()));
        // More than a horizon without use: new again.
        assert_eq!(p.admit(&cfg, "k", 1, 200_000.0), Ok(()));
        assert!(p.admit(&cfg, "k", 1, 200_001.0).is_err());
    }

    #[test]
    fn bad_config_is_refused() {
        assert!(WarmupConfig::new(0.0, 60.0, 86_400.0).is_err());
        assert!(WarmupConfig::new(1800.0, f64::NAN, 86_400.0).is_err());
        assert!(WarmupConfig::new(1800.0, 60.0, 60.0).is_err());
    }
}
