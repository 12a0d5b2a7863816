//! The warm-up governor: a (key, exit) pairing that is new may lease only slowly at first.
//!
//! A pairing is new when the key has not used that exit within `horizon` (24 h). Its
//! leases must be spaced at least `initial_interval * (1 - age / ramp)` apart: the first goes
//! at once, the gap shrinks linearly to nothing over `ramp` (30 minutes, as in the article), and
//! after that the pairing is warm. Fresh pairings are the riskiest moment in an account's life;
//! this spreads their first requests out instead of forbidding them.

use crate::error::{Error, Result};
use foldhash::fast::RandomState;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::BuildHasher;

/// Deserialized from a `[warmup]` table or a `warmup=` dict; a key left out keeps its default.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WarmupConfig {
    pub ramp: f64,
    pub initial_interval: f64,
    pub horizon: f64,
}

impl WarmupConfig {
    pub fn new(ramp: f64, initial_interval: f64, horizon: f64) -> Result<WarmupConfig> {
        for (name, v) in [("ramp", ramp), ("initial_interval", initial_interval), ("horizon", horizon)] {
            if !v.is_finite() || v <= 0.0 {
                return Err(Error::setting(&["warmup", name], format!("{v} must be a finite number of seconds > 0")));
            }
            crate::clock::check_ceiling(&["warmup", name], v)?;
        }
        if horizon < ramp {
            return Err(
                Error::setting(&["warmup", "horizon"], format!("{horizon} must be at least its ramp {ramp}")).also(&["warmup", "ramp"])
            );
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
            // The gap less the time since: never more than the gap, as `last + gap - now`
            // would be by a rounding when `now` is still `last`'s clock tick.
            let wait = gap - (now - p.last);
            if wait > 0.0 {
                return Err(wait);
            }
        }
        Ok(Pairing { born: p.born, last: now })
    }
}

/// The pairings seen within the horizon, at most `max` of them.
///
/// A pairing is kept under a 64-bit hash of its key and exit, not the key itself: the rule needs
/// only the two times, and a flood of one-off keys then costs 24 bytes a pairing in the table
/// (about 40 with the table's slack) instead of an owned key and a list per key (225). Two
/// pairings share an entry only if their hashes collide (about one chance in 10^7 among a
/// million pairings, with a per-process seed an outsider cannot aim at); the cost of that is a
/// new pairing treated as one already ramping, never a lease refused for nothing.
pub struct Pairings {
    map: HashMap<u64, Pairing, RandomState>,
    /// The hash's seed: random per pool (so an outsider cannot aim at it), and saved with the
    /// pairings (`state=`) so that a restart finds them under the same ids.
    seed: u64,
    hasher: foldhash::quality::FixedState,
    max: Option<usize>,
    next_prune: f64,
}

impl Default for Pairings {
    fn default() -> Self {
        Pairings::bounded(None)
    }
}

impl Pairings {
    /// Pairings of which at most `max` are kept (`None`: no bound beyond the horizon).
    pub fn bounded(max: Option<u32>) -> Pairings {
        Pairings::seeded(max, crate::seed::random_seed())
    }

    fn seeded(max: Option<u32>, seed: u64) -> Pairings {
        let hasher = foldhash::quality::FixedState::with_seed(seed);
        Pairings { map: HashMap::default(), seed, hasher, max: max.map(|m| m as usize), next_prune: 0.0 }
    }

    /// Pairings kept now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// `Ok(evicted)` if `key` may lease `exit` now (and records it; `evicted` is how many
    /// least recently used pairings made room for a new one under the bound), else the
    /// seconds to wait.
    pub fn admit(&mut self, cfg: &WarmupConfig, key: &str, exit: u32, now: f64) -> std::result::Result<usize, f64> {
        self.prune(cfg, now, false);
        let id = self.hasher.hash_one((key, exit));
        match self.map.entry(id) {
            Entry::Occupied(mut known) => {
                *known.get_mut() = Pairing::admit(Some(*known.get()), cfg, now)?;
                Ok(0)
            }
            Entry::Vacant(new) => {
                new.insert(Pairing::admit(None, cfg, now)?);
                Ok(self.make_room(cfg, id, now))
            }
        }
    }

    /// Over the bound, forgets pairings unused for a horizon, then the least recently used
    /// ones (never `keep`, the one just made) down to `max - max / 16`, so that the next
    /// sixteenth of new pairings finds room without a scan each. A forgotten pairing is
    /// new again at its next lease: it ramps up again, which errs on the careful side.
    fn make_room(&mut self, cfg: &WarmupConfig, keep: u64, now: f64) -> usize {
        let Some(max) = self.max.filter(|&m| self.map.len() > m) else { return 0 };
        self.prune(cfg, now, true);
        let before = self.map.len();
        let excess = self.map.len().saturating_sub(crate::bound::room_target(max));
        if self.map.len() > max && excess > 0 {
            let times = self.map.iter().filter(|(id, _)| **id != keep).map(|(_, p)| p.last).collect();
            let mut cut = crate::bound::Cutoff::oldest(times, excess);
            self.map.retain(|id, p| *id == keep || !cut.take(p.last));
        }
        before - self.map.len()
    }

    /// The seed and every pairing, for a saved state (`crate::persist`).
    pub fn saved(&self) -> (u64, impl Iterator<Item = (u64, Pairing)> + '_) {
        (self.seed, self.map.iter().map(|(&id, &p)| (id, p)))
    }

    /// Pairings saved before a restart under `seed`, in place of these (same bound).
    pub fn resume(&mut self, seed: u64, saved: impl IntoIterator<Item = (u64, Pairing)>) {
        let max = self.max.map(|m| m as u32);
        *self = Pairings::seeded(max, seed);
        self.map.extend(saved);
    }

    fn prune(&mut self, cfg: &WarmupConfig, now: f64, force: bool) {
        if now < self.next_prune && !force {
            return;
        }
        self.next_prune = now + cfg.horizon / 24.0;
        self.map.retain(|_, p| now - p.last <= cfg.horizon);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pairing_used_again_within_its_clock_tick_waits_the_whole_gap_and_no_more() {
        // The coarse clock reads one tick for a lease and the next: the wait is the gap
        // exactly, never a rounding over it ("retry after 60.000000000000007").
        let cfg = WarmupConfig::default();
        for i in 0..10_000 {
            let now = 0.001 * f64::from(i) + 1e-7 * f64::from(i % 97);
            let mut p = Pairings::default();
            assert_eq!(p.admit(&cfg, "k", 1, now), Ok(0));
            assert_eq!(p.admit(&cfg, "k", 1, now), Err(cfg.initial_interval), "at {now}");
        }
    }

    #[test]
    fn ramp_spaces_a_new_pairing_then_lets_it_go() {
        let cfg = WarmupConfig::default();
        let mut p = Pairings::default();
        assert_eq!(p.admit(&cfg, "k", 1, 0.0), Ok(0));
        // Right after birth the gap is the whole initial interval.
        // One second after birth the gap has shrunk by 1/1800 of itself.
        let wait = p.admit(&cfg, "k", 1, 1.0).unwrap_err();
        assert!((wait - (60.0 * (1.0 - 1.0 / 1800.0) - 1.0)).abs() < 1e-9, "{wait}");
        assert_eq!(p.admit(&cfg, "k", 1, 60.0), Ok(0));
        // Half way through the ramp the gap is half as long.
        assert_eq!(p.admit(&cfg, "k", 1, 900.0), Ok(0));
        assert!(p.admit(&cfg, "k", 1, 929.0).is_err());
        assert_eq!(p.admit(&cfg, "k", 1, 930.0), Ok(0));
        // Warm: no spacing at all.
        assert_eq!(p.admit(&cfg, "k", 1, 1800.0), Ok(0));
        assert_eq!(p.admit(&cfg, "k", 1, 1800.0), Ok(0));
        // Another exit for the same key is a new pairing.
        assert_eq!(p.admit(&cfg, "k", 2, 1800.0), Ok(0));
        assert!(p.admit(&cfg, "k", 2, 1801.0).is_err());
    }

    #[test]
    fn a_known_pairing_is_not_new_until_the_horizon_passes() {
        let cfg = WarmupConfig::default();
        let mut p = Pairings::default();
        p.admit(&cfg, "k", 1, 0.0).unwrap();
        p.admit(&cfg, "k", 1, 2000.0).unwrap();
        assert_eq!(p.admit(&cfg, "k", 1, 2000.0 + 86_400.0), Ok(0));
        assert_eq!(p.admit(&cfg, "k", 1, 2000.0 + 86_400.0 + 1.0), Ok(0));
        // More than a horizon without use: new again.
        assert_eq!(p.admit(&cfg, "k", 1, 200_000.0), Ok(0));
        assert!(p.admit(&cfg, "k", 1, 200_001.0).is_err());
    }

    #[test]
    fn over_the_bound_the_least_recently_used_pairings_are_forgotten() {
        // A long ramp, so that a remembered pairing is still spacing its leases at the end.
        let cfg = WarmupConfig::new(100_000.0, 1000.0, 200_000.0).unwrap();
        let mut p = Pairings::bounded(Some(100));
        assert_eq!(p.admit(&cfg, "k0", 1, 0.0), Ok(0));
        for i in 1..100 {
            assert_eq!(p.admit(&cfg, &format!("k{i}"), 1, 500.0 + f64::from(i) / 100.0), Ok(0));
        }
        // "k0" leases again, its gap over: now "k1" is the least recently used.
        assert_eq!(p.admit(&cfg, "k0", 1, 1000.0), Ok(0));
        // The 101st pairing: the oldest go, down to the bound less a sixteenth (94), never
        // the new one.
        assert_eq!(p.admit(&cfg, "fresh", 1, 1000.5), Ok(7));
        assert_eq!(p.len(), 94);
        // "k0" is remembered (a new lease waits out its gap), "k1" to "k7" were forgotten (new
        // again: the first lease goes at once), "k8" is remembered.
        assert!(p.admit(&cfg, "k0", 1, 1001.0).is_err());
        assert!(p.admit(&cfg, "k8", 1, 1001.0).is_err());
        assert_eq!(p.admit(&cfg, "k1", 1, 1001.0), Ok(0));
        assert_eq!(p.admit(&cfg, "k7", 1, 1001.0), Ok(0));
        assert!(p.admit(&cfg, "fresh", 1, 1002.0).is_err());
        // A flood of one-off keys keeps at most the bound.
        for i in 0..10_000 {
            p.admit(&cfg, &format!("flood{i}"), 2, 200.0 + f64::from(i)).unwrap();
            assert!(p.len() <= 100);
        }
    }

    #[test]
    fn pairings_unused_for_a_horizon_make_room_first() {
        let cfg = WarmupConfig::default();
        let mut p = Pairings::bounded(Some(2));
        p.admit(&cfg, "a", 1, 0.0).unwrap();
        p.admit(&cfg, "b", 1, 90_000.0).unwrap();
        // "a" is past the horizon: pruned, and not counted as forgotten early.
        assert_eq!(p.admit(&cfg, "c", 1, 90_001.0), Ok(0));
        assert_eq!(p.len(), 2);
        assert!(p.admit(&cfg, "b", 1, 90_002.0).is_err());
    }

    #[test]
    fn bad_config_is_refused() {
        assert!(WarmupConfig::new(0.0, 60.0, 86_400.0).is_err());
        assert!(WarmupConfig::new(1800.0, f64::NAN, 86_400.0).is_err());
        assert!(WarmupConfig::new(1800.0, 60.0, 60.0).is_err());
    }
}
