//! Keyless selection: which exit serves a task that has no account to stick to.
//!
//! Each strategy sees the view's members in a fixed order plus three questions about a member
//! (may it serve now, its weight, its active leases); none of them allocates per pick.

use crate::error::{Error, Result};
use rand::rngs::SmallRng;
use rand::RngExt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    RoundRobin,
    /// NGINX smooth weighted round-robin: the configured ratios, without bursts.
    Weighted,
    LeastConn,
    /// The exit idle longest for this site, with a per-site cooldown.
    Lru,
    /// Power of two choices on active leases per unit of weight.
    P2c,
}

impl Strategy {
    pub fn parse(s: &str) -> Result<Strategy> {
        Ok(match s {
            "round_robin" => Strategy::RoundRobin,
            "weighted" => Strategy::Weighted,
            "least_conn" => Strategy::LeastConn,
            "lru" => Strategy::Lru,
            "p2c" => Strategy::P2c,
            _ => {
                return Err(Error::BadInput(format!(
                    "strategy {} is not one of 'round_robin', 'weighted', 'least_conn', 'lru', 'p2c'",
                    crate::mask::shown(s)
                )))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Strategy::RoundRobin => "round_robin",
            Strategy::Weighted => "weighted",
            Strategy::LeastConn => "least_conn",
            Strategy::Lru => "lru",
            Strategy::P2c => "p2c",
        }
    }
}

/// Random draws p2c makes before listing the eligible members instead.
const DRAWS: usize = 8;

/// Why nothing was picked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NoPick {
    /// No member may serve now (all full, benched or out of service).
    Nothing,
    /// Every eligible member used this site within the cooldown; retry after this many seconds.
    Cooling(f64),
}

/// What a strategy may ask about member `m` (a position in the member list, not a handle).
pub trait Members {
    fn len(&self) -> usize;
    fn eligible(&self, m: usize) -> bool;
    fn weight(&self, m: usize) -> i64;
    fn active(&self, m: usize) -> u32;
    /// When the member last served the site being picked for (`-inf` if never).
    fn last_used(&self, m: usize) -> f64;
}

/// Per-view selection state: the round-robin cursor and the smooth-WRR current weights.
#[derive(Default, Debug)]
pub struct Selector {
    cursor: usize,
    current: Vec<i64>,
    scratch: Vec<u32>,
}

impl Selector {
    /// Forgets positional state; called when the member list changes.
    pub fn reset(&mut self, members: usize) {
        self.cursor = 0;
        self.current.clear();
        self.current.resize(members, 0);
    }

    pub fn pick(
        &mut self,
        strategy: Strategy,
        members: &impl Members,
        rng: &mut SmallRng,
        lru: Option<(f64, f64)>,
    ) -> std::result::Result<usize, NoPick> {
        let n = members.len();
        if n == 0 {
            return Err(NoPick::Nothing);
        }
        if self.current.len() != n {
            self.reset(n);
        }
        match strategy {
            Strategy::RoundRobin => {
                for i in 0..n {
                    let m = (self.cursor + i) % n;
                    if members.eligible(m) {
                        self.cursor = m + 1;
                        return Ok(m);
                    }
                }
                Err(NoPick::Nothing)
            }
            Strategy::Weighted => {
                let (mut best, mut total) = (usize::MAX, 0i64);
                for m in 0..n {
                    if !members.eligible(m) {
                        continue;
                    }
                    let w = members.weight(m).max(1);
                    self.current[m] += w;
                    total += w;
                    if best == usize::MAX || self.current[m] > self.current[best] {
                        best = m;
                    }
                }
                if best == usize::MAX {
                    return Err(NoPick::Nothing);
                }
                self.current[best] -= total;
                Ok(best)
            }
            Strategy::LeastConn => {
                // Ties go round-robin from the cursor, so equal exits share the work.
                let mut best = usize::MAX;
                for i in 0..n {
                    let m = (self.cursor + i) % n;
                    if members.eligible(m) && (best == usize::MAX || members.active(m) < members.active(best)) {
                        best = m;
                    }
                }
                if best == usize::MAX {
                    return Err(NoPick::Nothing);
                }
                self.cursor = best + 1;
                Ok(best)
            }
            Strategy::P2c => {
                // Draw members directly: when most are eligible two draws find two, so a pick
                // costs O(1) however large the pool. Only a mostly-ineligible pool falls back
                // to listing the eligible ones.
                let draw =
                    |rng: &mut SmallRng, not: usize| (0..DRAWS).map(|_| rng.random_range(0..n)).find(|&m| m != not && members.eligible(m));
                let (a, b) = match draw(rng, usize::MAX) {
                    Some(a) => match draw(rng, a) {
                        Some(b) => (a, Some(b)),
                        None => {
                            self.scratch.clear();
                            self.scratch.extend((0..n).filter(|&m| m != a && members.eligible(m)).map(|m| m as u32));
                            let b = (!self.scratch.is_empty()).then(|| self.scratch[rng.random_range(0..self.scratch.len())] as usize);
                            (a, b)
                        }
                    },
                    None => {
                        self.scratch.clear();
                        self.scratch.extend((0..n).filter(|&m| members.eligible(m)).map(|m| m as u32));
                        match self.scratch.len() {
                            0 => return Err(NoPick::Nothing),
                            1 => (self.scratch[0] as usize, None),
                            k => {
                                let i = rng.random_range(0..k);
                                let mut j = rng.random_range(0..k - 1);
                                if j >= i {
                                    j += 1;
                                }
                                (self.scratch[i] as usize, Some(self.scratch[j] as usize))
                            }
                        }
                    }
                };
                let Some(b) = b else { return Ok(a) };
                // Compare active/weight without dividing: a.active * b.w vs b.active * a.w.
                let load = |x: usize, y: usize| members.active(x) as i64 * members.weight(y).max(1);
                Ok(if load(b, a) < load(a, b) { b } else { a })
            }
            Strategy::Lru => {
                let (now, cooldown) = lru.unwrap_or((0.0, 0.0));
                let last = |m: usize| members.last_used(m);
                let mut best = usize::MAX;
                for i in 0..n {
                    let m = (self.cursor + i) % n;
                    if members.eligible(m) && (best == usize::MAX || last(m) < last(best)) {
                        best = m;
                    }
                }
                if best == usize::MAX {
                    return Err(NoPick::Nothing);
                }
                let idle = now - last(best);
                if idle < cooldown {
                    return Err(NoPick::Cooling(cooldown - idle));
                }
                self.cursor = best + 1;
                Ok(best)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    struct Fixed {
        weights: Vec<i64>,
        active: Vec<u32>,
        eligible: Vec<bool>,
        last: Vec<f64>,
    }

    impl Members for Fixed {
        fn len(&self) -> usize {
            self.weights.len()
        }
        fn eligible(&self, m: usize) -> bool {
            self.eligible[m]
        }
        fn weight(&self, m: usize) -> i64 {
            self.weights[m]
        }
        fn active(&self, m: usize) -> u32 {
            self.active[m]
        }
        fn last_used(&self, m: usize) -> f64 {
            self.last.get(m).copied().unwrap_or(f64::NEG_INFINITY)
        }
    }

    fn fixed(weights: &[i64]) -> Fixed {
        Fixed { weights: weights.to_vec(), active: vec![0; weights.len()], eligible: vec![true; weights.len()], last: vec![] }
    }

    #[test]
    fn smooth_weighted_matches_nginx() {
        let mut s = Selector::default();
        let mut rng = SmallRng::seed_from_u64(1);
        let members = fixed(&[5, 1, 1]);
        let order: Vec<usize> = (0..7).map(|_| s.pick(Strategy::Weighted, &members, &mut rng, None).unwrap()).collect();
        assert_eq!(order, [0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn round_robin_skips_the_ineligible() {
        let mut s = Selector::default();
        let mut rng = SmallRng::seed_from_u64(1);
        let mut members = fixed(&[1, 1, 1]);
        members.eligible[1] = false;
        let order: Vec<usize> = (0..4).map(|_| s.pick(Strategy::RoundRobin, &members, &mut rng, None).unwrap()).collect();
        assert_eq!(order, [0, 2, 0, 2]);
        members.eligible = vec![false; 3];
        assert_eq!(s.pick(Strategy::RoundRobin, &members, &mut rng, None), Err(NoPick::Nothing));
    }

    #[test]
    fn least_conn_and_p2c_prefer_the_idle() {
        let mut s = Selector::default();
        let mut rng = SmallRng::seed_from_u64(7);
        let mut members = fixed(&[1, 1, 1]);
        members.active = vec![3, 0, 2];
        assert_eq!(s.pick(Strategy::LeastConn, &members, &mut rng, None), Ok(1));
        // With two members p2c always compares both, so it always takes the idler one.
        members.eligible[2] = false;
        for _ in 0..20 {
            assert_eq!(s.pick(Strategy::P2c, &members, &mut rng, None), Ok(1));
        }
    }

    #[test]
    fn lru_cools() {
        let mut s = Selector::default();
        let mut rng = SmallRng::seed_from_u64(1);
        let mut members = fixed(&[1, 1]);
        members.last = vec![10.0, 12.0];
        assert_eq!(s.pick(Strategy::Lru, &members, &mut rng, Some((20.0, 8.0))), Ok(0));
        assert_eq!(s.pick(Strategy::Lru, &members, &mut rng, Some((15.0, 8.0))), Err(NoPick::Cooling(3.0)));
    }
}
