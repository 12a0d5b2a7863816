//! Keyless selection: which exit serves a task that has no account to stick to.
//!
//! Each strategy sees the view's members in a fixed order plus a few questions about a member
//! (may it serve now, its weight, its active leases); none of them allocates per pick, and
//! none looks at every member: see `Selector` for what each one keeps.

use crate::error::{Error, Result};
use rand::rngs::SmallRng;
use rand::RngExt;
use ranking::{Key, Ranking};

mod ranking;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    RoundRobin,
    /// Earliest deadline first (Envoy): the weights' ratios, without bursts.
    Weighted,
    /// Fewest active leases per unit of capacity (HAProxy).
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
                return Err(Error::setting(
                    &["strategy"],
                    format!("{} is not one of 'round_robin', 'weighted', 'least_conn', 'lru', 'p2c'", crate::mask::shown(s)),
                ))
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
    /// At its bound of concurrent leases (`max_leases`): out for every site until one ends.
    fn full(&self, m: usize) -> bool;
    /// Its tunnel admits leases, whatever the site.
    fn serving(&self, m: usize) -> bool;
    /// It may serve the site being picked for, given that it serves at all (its breaker and
    /// rate limit for the site).
    fn suits(&self, m: usize) -> bool;
    /// The caller asked to pass it over (`avoid=`): for this pick only, so it keeps its turn.
    #[inline]
    fn avoided(&self, _m: usize) -> bool {
        false
    }
    #[inline]
    fn eligible(&self, m: usize) -> bool {
        !self.full(m) && self.serving(m) && !self.avoided(m) && self.suits(m)
    }
    fn weight(&self, m: usize) -> i64;
    /// Its weight in full health: what a turn it is not there to take is worth.
    fn full_weight(&self, m: usize) -> i64;
    fn active(&self, m: usize) -> u32;
    fn capacity(&self, m: usize) -> u32;
    /// When the member last served the site being picked for (`-inf` if never).
    fn last_used(&self, m: usize) -> f64;
    /// Starts loading what the questions above read about member `m`, for a pick that is
    /// about to ask them of members drawn at random.
    #[inline]
    fn prefetch(&self, _m: usize) {}
}

/// What a pick knows besides the members: the site's index, how many times the health board
/// has readmitted exits (so parked ones are looked at again only then), and for `lru` the
/// clock and the cooldown.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context {
    pub site: u32,
    pub readmissions: u64,
    pub lru: Option<(f64, f64)>,
}

/// Per-view selection state. `weighted` and `least_conn` rank the members in one tree, `lru`
/// in one tree per site (each site has its own idle order); `round_robin` and `p2c` need none.
#[derive(Default, Debug)]
pub struct Selector {
    cursor: usize,
    scratch: Vec<u32>,
    /// `weighted`: each member's next deadline; `least_conn`: its load.
    ranked: Ranking,
    /// `lru`, per site: when each member last served it.
    idle: Vec<Ranking>,
    /// `weighted`: the virtual time, the deadline of the last pick.
    clock: f64,
    /// Picks made: the tie-break, so that equal members take turns.
    seq: u64,
}

/// A `least_conn` rank: active leases per unit of capacity. Not HAProxy's (active + 1) /
/// weight, which sends every lease of a sequential scraper to its largest exit: idle exits
/// rank equal here, and take turns.
#[inline]
pub fn load(active: u32, capacity: u32) -> f64 {
    active as f64 / capacity.max(1) as f64
}

impl Selector {
    /// Forgets positional state; called when the member list changes. The trees are rebuilt
    /// on the next pick, once however many exits joined or left meanwhile.
    pub fn reset(&mut self) {
        self.cursor = 0;
        self.ranked = Ranking::default();
        self.idle.clear();
    }

    /// Member `m`'s active leases changed: `least_conn` re-ranks it, and one parked at its
    /// bound may serve again once it is below it (`below_max`).
    #[inline]
    pub fn active_changed(&mut self, strategy: Strategy, m: usize, load: f64, below_max: bool) {
        if strategy == Strategy::LeastConn && self.ranked.len() > m {
            let seq = self.ranked.key(m).1;
            self.ranked.set_later(m, Key(load, seq));
        }
        if below_max {
            self.ranked.unfull(m);
            for r in self.idle.iter_mut() {
                r.unfull(m);
            }
        }
    }

    /// Member `m` served `site` at `at` through another view of the same exits.
    pub fn used(&mut self, site: u32, m: usize, at: f64) {
        if let Some(r) = self.idle.get_mut(site as usize).filter(|r| r.len() > m) {
            self.seq += 1;
            r.set(m, Key(at, self.seq));
        }
    }

    pub fn pick(
        &mut self,
        strategy: Strategy,
        members: &impl Members,
        rng: &mut SmallRng,
        cx: Context,
    ) -> std::result::Result<usize, NoPick> {
        let n = members.len();
        if n == 0 {
            return Err(NoPick::Nothing);
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
                // Envoy's earliest deadline first: a member picked at virtual time t is due
                // again at t + 1/weight, so shares follow the weights read at each pick and
                // equal deadlines go in turn. Starting half a period in interleaves members
                // from the first round (5, 1, 1 gives a a b c a a a).
                let clock = self.clock;
                // Half a period in, at full weight: the weight a member has now may be nil
                // (out of service), which would put it out of reach once it is back.
                let first = |m: usize| clock + 0.5 / members.full_weight(m) as f64;
                if self.ranked.len() != n {
                    self.seq = n as u64;
                    self.ranked.build((0..n).map(|m| Key(first(m), m as u64)), cx.readmissions);
                }
                let pass_over = |r: &mut Ranking, m: usize| {
                    // Passed over for this site: it gives up one turn rather than bank it.
                    let k = r.key(m);
                    r.set(m, Key(k.0.max(clock) + 1.0 / members.full_weight(m) as f64, k.1));
                };
                let m = best(&mut self.ranked, members, cx.readmissions, pass_over).ok_or(NoPick::Nothing)?;
                // A member back from being parked is due now, not at its old deadline: no
                // burst of catch-up picks.
                let due = self.ranked.key(m).0.max(clock);
                self.clock = due;
                self.seq += 1;
                self.ranked.set(m, Key(due + 1.0 / members.weight(m) as f64, self.seq));
                Ok(m)
            }
            Strategy::LeastConn => {
                if self.ranked.len() != n {
                    self.seq = n as u64;
                    self.ranked.build((0..n).map(|m| Key(load(members.active(m), members.capacity(m)), m as u64)), cx.readmissions);
                }
                let m = best(&mut self.ranked, members, cx.readmissions, |_, _| {}).ok_or(NoPick::Nothing)?;
                // To the back of its equals: ties take turns. Its load moves when the lease
                // is committed (`active_changed`); both re-rank it once, at the next pick.
                self.seq += 1;
                let k = self.ranked.key(m);
                self.ranked.set_later(m, Key(k.0, self.seq));
                Ok(m)
            }
            Strategy::P2c => {
                // Draw members directly: when most are eligible two draws find two, so a pick
                // costs O(1) however large the pool. Only a mostly-ineligible pool falls back
                // to listing the eligible ones.
                // The first two draws are made, and their members' state asked for, before
                // either is looked at: in a pool larger than the caches their misses overlap.
                let first = [rng.random_range(0..n), rng.random_range(0..n)];
                members.prefetch(first[0]);
                members.prefetch(first[1]);
                let draw = |rng: &mut SmallRng, not: usize, first: usize| {
                    std::iter::once(first).chain((1..DRAWS).map(|_| rng.random_range(0..n))).find(|&m| m != not && members.eligible(m))
                };
                let (a, b) = match draw(rng, usize::MAX, first[0]) {
                    Some(a) => match draw(rng, a, first[1]) {
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
                let (now, cooldown) = cx.lru.unwrap_or((0.0, 0.0));
                let site = cx.site as usize;
                if self.idle.len() <= site {
                    self.idle.resize_with(site + 1, Ranking::default);
                }
                let r = &mut self.idle[site];
                if r.len() != n {
                    self.seq = self.seq.max(n as u64);
                    r.build((0..n).map(|m| Key(members.last_used(m), m as u64)), cx.readmissions);
                }
                let m = best(r, members, cx.readmissions, |_, _| {}).ok_or(NoPick::Nothing)?;
                let idle = now - r.key(m).0;
                if idle < cooldown {
                    return Err(NoPick::Cooling(cooldown - idle));
                }
                self.seq += 1;
                r.set(m, Key(now, self.seq));
                Ok(m)
            }
        }
    }
}

/// The best-ranked member that may serve the site: members that serve no site are parked
/// (looked at again when a lease of theirs ends or the board readmits exits), members that
/// only cannot serve this site are passed over for this pick (`pass_over` may re-rank them
/// first). Costs O(log n) plus O(log n) for each member parked or passed over.
#[inline]
fn best(r: &mut Ranking, members: &impl Members, readmissions: u64, mut pass_over: impl FnMut(&mut Ranking, usize)) -> Option<usize> {
    r.settle();
    if r.stale(readmissions) {
        r.recheck(readmissions, |m| members.serving(m).then(|| members.full(m)));
    }
    let mut rechecked = false;
    let found = loop {
        let Some(m) = r.top() else {
            r.restore();
            // Before saying no, look at every parked member: a refusal must never rest on a
            // parking whose end the pool missed. Nothing left is rare, and answering why
            // costs a pass over the members anyway.
            if rechecked || !r.unpark_all(|m| !members.full(m) && members.serving(m)) {
                return None;
            }
            rechecked = true;
            continue;
        };
        if members.full(m) {
            r.park(m, true);
        } else if !members.serving(m) {
            r.park(m, false);
        } else if members.avoided(m) {
            r.skip(m);
        } else if members.suits(m) {
            break m;
        } else {
            pass_over(r, m);
            r.skip(m);
        }
    };
    r.restore();
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Members with fixed answers: `full`, `sick` (tunnel out) and `unsuited` (out for the site).
    struct Fixed {
        weights: Vec<i64>,
        full_weights: Vec<i64>,
        active: Vec<u32>,
        full: Vec<bool>,
        sick: Vec<bool>,
        unsuited: Vec<bool>,
        last: Vec<f64>,
    }

    impl Members for Fixed {
        fn len(&self) -> usize {
            self.weights.len()
        }
        fn full(&self, m: usize) -> bool {
            self.full[m]
        }
        fn serving(&self, m: usize) -> bool {
            !self.sick[m]
        }
        fn suits(&self, m: usize) -> bool {
            !self.unsuited[m]
        }
        fn weight(&self, m: usize) -> i64 {
            self.weights[m]
        }
        fn active(&self, m: usize) -> u32 {
            self.active[m]
        }
        fn capacity(&self, _: usize) -> u32 {
            1
        }
        fn full_weight(&self, m: usize) -> i64 {
            self.full_weights.get(m).copied().unwrap_or(self.weights[m])
        }
        fn last_used(&self, m: usize) -> f64 {
            self.last.get(m).copied().unwrap_or(f64::NEG_INFINITY)
        }
    }

    fn fixed(weights: &[i64]) -> Fixed {
        let n = weights.len();
        Fixed {
            weights: weights.to_vec(),
            full_weights: vec![],
            active: vec![0; n],
            full: vec![false; n],
            sick: vec![false; n],
            unsuited: vec![false; n],
            last: vec![],
        }
    }

    fn picks(s: &mut Selector, strategy: Strategy, members: &Fixed, n: usize, readmissions: u64) -> Vec<usize> {
        let mut rng = SmallRng::seed_from_u64(1);
        (0..n).map(|_| s.pick(strategy, members, &mut rng, Context { readmissions, ..Context::default() }).unwrap()).collect()
    }

    #[test]
    fn weighted_is_smooth_earliest_deadline_first() {
        let mut s = Selector::default();
        let members = fixed(&[5, 1, 1]);
        assert_eq!(picks(&mut s, Strategy::Weighted, &members, 7, 0), [0, 0, 1, 2, 0, 0, 0]);
        // Over many rounds each member's count stays within one pick of its share.
        let order = picks(&mut s, Strategy::Weighted, &members, 700, 0);
        for (m, share) in [(0, 5.0 / 7.0), (1, 1.0 / 7.0), (2, 1.0 / 7.0)] {
            let mut got = 0.0;
            for (i, &p) in order.iter().enumerate() {
                got += (p == m) as u8 as f64;
                assert!((got - share * (i + 1) as f64).abs() <= 1.5, "member {m} after {} picks: {got}", i + 1);
            }
        }
    }

    #[test]
    fn weighted_passes_over_and_parks_without_bursts_on_return() {
        let mut s = Selector::default();
        let mut members = fixed(&[1, 1, 1, 1]);
        members.sick[1] = true;
        members.unsuited[2] = true;
        members.full[3] = true;
        assert_eq!(picks(&mut s, Strategy::Weighted, &members, 5, 0), [0; 5]);
        // Back in service (the board readmitted): it takes its turn, not a burst to catch up.
        members.sick[1] = false;
        let order = picks(&mut s, Strategy::Weighted, &members, 40, 1);
        let ones = order.iter().filter(|&&m| m == 1).count();
        assert!((19..=21).contains(&ones), "{order:?}");
        assert!(order.windows(3).all(|w| w != [1, 1, 1]), "{order:?}");
        // A sick member does not come back before the board readmits anything.
        members.sick[0] = true;
        picks(&mut s, Strategy::Weighted, &members, 2, 1);
        members.sick[0] = false;
        assert_eq!(picks(&mut s, Strategy::Weighted, &members, 4, 1), [1; 4]);
        // A full member comes back when a lease of its ends, and takes its turn at once.
        members.full[3] = false;
        s.active_changed(Strategy::Weighted, 3, 1.0, true);
        assert_eq!(picks(&mut s, Strategy::Weighted, &members, 2, 1), [3, 1]);
        members.full = vec![true; 4];
        let mut rng = SmallRng::seed_from_u64(1);
        assert_eq!(s.pick(Strategy::Weighted, &members, &mut rng, Context { readmissions: 1, ..Context::default() }), Err(NoPick::Nothing));
    }

    #[test]
    fn weighted_takes_back_an_exit_that_was_out_when_the_tree_was_built() {
        // Out of service from the start, with the weight that state gives (1 of 1000).
        let mut s = Selector::default();
        let mut members = fixed(&[1000, 1000, 1]);
        members.full_weights = vec![1000; 3];
        members.sick[2] = true;
        picks(&mut s, Strategy::Weighted, &members, 6, 0);
        members.sick[2] = false;
        members.weights[2] = 1000;
        let order = picks(&mut s, Strategy::Weighted, &members, 6, 1);
        assert_eq!(order.iter().filter(|&&m| m == 2).count(), 2, "{order:?}");
    }

    #[test]
    fn a_refusal_never_rests_on_a_stale_parking() {
        // Every member parked, then free again with no event saying so: the pick looks
        // again rather than refuse.
        for strategy in [Strategy::Weighted, Strategy::LeastConn, Strategy::Lru] {
            let mut s = Selector::default();
            let mut members = fixed(&[1, 1]);
            members.full = vec![true, false];
            members.sick = vec![false, true];
            let mut rng = SmallRng::seed_from_u64(1);
            assert_eq!(s.pick(strategy, &members, &mut rng, Context::default()), Err(NoPick::Nothing));
            members.full[0] = false;
            members.sick[1] = false;
            let got: Vec<usize> = (0..2).map(|_| s.pick(strategy, &members, &mut rng, Context::default()).unwrap()).collect();
            assert_eq!(got.len(), 2, "{strategy:?}");
        }
    }

    #[test]
    fn round_robin_skips_the_ineligible() {
        let mut s = Selector::default();
        let mut members = fixed(&[1, 1, 1]);
        members.unsuited[1] = true;
        assert_eq!(picks(&mut s, Strategy::RoundRobin, &members, 4, 0), [0, 2, 0, 2]);
        members.unsuited = vec![true; 3];
        let mut rng = SmallRng::seed_from_u64(1);
        assert_eq!(s.pick(Strategy::RoundRobin, &members, &mut rng, Context::default()), Err(NoPick::Nothing));
    }

    #[test]
    fn least_conn_and_p2c_prefer_the_idle() {
        let mut s = Selector::default();
        let mut rng = SmallRng::seed_from_u64(7);
        let mut members = fixed(&[1, 1, 1]);
        members.active = vec![3, 0, 2];
        assert_eq!(s.pick(Strategy::LeastConn, &members, &mut rng, Context::default()), Ok(1));
        // The lease is committed: member 1 now has one, still the least.
        members.active[1] = 1;
        s.active_changed(Strategy::LeastConn, 1, load(1, 1), false);
        assert_eq!(s.pick(Strategy::LeastConn, &members, &mut rng, Context::default()), Ok(1));
        members.active[1] = 2;
        s.active_changed(Strategy::LeastConn, 1, load(2, 1), false);
        // Tied with member 2 at two: the one picked less recently goes first.
        assert_eq!(s.pick(Strategy::LeastConn, &members, &mut rng, Context::default()), Ok(2));
        members.unsuited[2] = true;
        assert_eq!(s.pick(Strategy::LeastConn, &members, &mut rng, Context::default()), Ok(1));
        // With two members p2c always compares both, so it always takes the idler one.
        let mut members = fixed(&[1, 1, 1]);
        members.active = vec![3, 0, 2];
        members.unsuited[2] = true;
        for _ in 0..20 {
            assert_eq!(s.pick(Strategy::P2c, &members, &mut rng, Context::default()), Ok(1));
        }
    }

    #[test]
    fn lru_takes_the_idle_longest_and_cools() {
        let mut s = Selector::default();
        let mut rng = SmallRng::seed_from_u64(1);
        let mut members = fixed(&[1, 1, 1]);
        members.last = vec![10.0, 12.0, 5.0];
        members.unsuited[2] = true;
        let cx = |now| Context { lru: Some((now, 8.0)), ..Context::default() };
        assert_eq!(s.pick(Strategy::Lru, &members, &mut rng, cx(20.0)), Ok(0));
        assert_eq!(s.pick(Strategy::Lru, &members, &mut rng, cx(15.0)), Err(NoPick::Cooling(5.0)));
        members.unsuited[2] = false;
        assert_eq!(s.pick(Strategy::Lru, &members, &mut rng, cx(20.0)), Ok(2), "idle longest, once it may serve");
        // Each site keeps its own order.
        let other = Context { site: 1, lru: Some((20.0, 0.0)), ..Context::default() };
        assert_eq!(s.pick(Strategy::Lru, &members, &mut rng, other), Ok(2));
    }
}
