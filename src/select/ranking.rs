//! Members ranked by a key, so that a pick reads the best one at the root of a tournament tree
//! and pays O(log n) for each change, instead of looking at every member.
//!
//! A member that cannot serve any site (at `max_leases`, or its tunnel out of service) is
//! parked: switched off in the tree until the pool says it may serve again (a release below
//! the bound, or a change on the health board that can admit exits). A member that cannot serve
//! only the site being picked for is passed over for that one pick.

/// A member's rank: smaller first; the second field breaks ties (the order of last picks).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Key(pub f64, pub u64);

const NONE: u32 = u32::MAX;

/// A tree node: the best member below it and a copy of that member's key, as one integer
/// that orders as the key does, so that a replay compares the two children it reads (which
/// sit side by side) without looking up either member's key. A node with no member has the
/// largest order, so it loses every match without a test of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Node {
    order: u128,
    member: u32,
}

const EMPTY: Node = Node { order: u128::MAX, member: NONE };

impl Key {
    /// The key as an integer of the same order: the first field's bits flipped so that
    /// negative numbers sort below positive ones (IEEE 754's total order), then the second.
    #[inline]
    fn order(self) -> u128 {
        let bits = self.0.to_bits();
        let first = if bits >> 63 == 1 { !bits } else { bits | 1 << 63 };
        (u128::from(first) << 64) | u128::from(self.1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    On,
    /// At `max_leases`: comes back when a lease of its ends.
    Full,
    /// Its tunnel admits nothing: looked at again when the board readmits anything.
    Sick,
    /// Passed over by the pick under way; back on when the pick ends.
    Skipped,
}

#[derive(Debug, Default)]
pub(crate) struct Ranking {
    /// Leaves (a power of two, at least the member count).
    size: usize,
    /// `nodes[i]` is the best member below node `i`; leaves are `size..2 * size`.
    nodes: Vec<Node>,
    keys: Vec<Key>,
    slots: Vec<Slot>,
    /// Members parked `Sick`, and the board's readmission count when they were last looked at.
    sick: Vec<u32>,
    seen: u64,
    /// Members passed over by the pick under way.
    skipped: Vec<u32>,
    /// Members re-keyed by [`Ranking::set_later`] since the last [`Ranking::settle`], and
    /// whether each member is among them.
    pending: Vec<u32>,
    queued: Vec<bool>,
}

/// The winner of a match: the smaller order; on a tie (the same key), the left one.
#[inline]
fn better(a: Node, b: Node) -> Node {
    if b.order < a.order {
        b
    } else {
        a
    }
}

impl Ranking {
    /// Ranks `keys.len()` members, all on.
    pub(crate) fn build(&mut self, keys: impl ExactSizeIterator<Item = Key>, readmissions: u64) {
        let n = keys.len();
        self.size = n.next_power_of_two().max(1);
        self.keys.clear();
        self.keys.extend(keys);
        self.slots.clear();
        self.slots.resize(n, Slot::On);
        self.sick.clear();
        self.skipped.clear();
        self.pending.clear();
        self.queued.clear();
        self.queued.resize(n, false);
        self.seen = readmissions;
        self.nodes.clear();
        self.nodes.resize(2 * self.size, EMPTY);
        for m in 0..n {
            self.nodes[self.size + m] = self.leaf(m);
        }
        for i in (1..self.size).rev() {
            self.nodes[i] = better(self.nodes[2 * i], self.nodes[2 * i + 1]);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Member `m`'s leaf: the member and its key while it is on, empty while it is parked.
    #[inline]
    fn leaf(&self, m: usize) -> Node {
        if self.slots[m] == Slot::On {
            Node { order: self.keys[m].order(), member: m as u32 }
        } else {
            EMPTY
        }
    }

    /// Writes member `m`'s leaf and replays its matches up the tree. Stops at a node that
    /// comes out as it was: nothing above can change. A lease's re-rank under `least_conn`
    /// then touches a few nodes, not all seventeen of a 100,000-exit tree.
    ///
    /// The node just written is carried up in a register, so each level loads only its
    /// sibling, whose address does not wait on the match below: the levels' loads overlap
    /// and the chain from one level to the next is a compare.
    #[inline]
    fn fix(&mut self, m: usize) {
        let mut i = self.size + m;
        let mut won = self.leaf(m);
        self.nodes[i] = won;
        while i > 1 {
            let sibling = self.nodes[i ^ 1];
            won = if i & 1 == 0 { better(won, sibling) } else { better(sibling, won) };
            i /= 2;
            if won == self.nodes[i] {
                return;
            }
            self.nodes[i] = won;
        }
    }

    /// The best member switched on, if any.
    #[inline]
    pub(crate) fn top(&self) -> Option<usize> {
        // With one leaf, that leaf (node 1) is the root.
        let t = self.nodes.get(1)?.member;
        (t != NONE).then_some(t as usize)
    }

    #[inline]
    pub(crate) fn key(&self, m: usize) -> Key {
        self.keys[m]
    }

    /// Changes a member's key; a parked member keeps it for when it comes back.
    #[inline]
    pub(crate) fn set(&mut self, m: usize, key: Key) {
        self.keys[m] = key;
        if self.slots[m] == Slot::On {
            self.fix(m);
        }
    }

    /// Changes a member's key and replays its matches only when the next pick looks
    /// ([`Ranking::settle`]). A member re-keyed many times between two picks (`least_conn`:
    /// its pick, then each lease it takes and ends) is replayed once, and a pool leased only
    /// by key, whose picks never come, replays nothing.
    #[inline]
    pub(crate) fn set_later(&mut self, m: usize, key: Key) {
        self.keys[m] = key;
        if !self.queued[m] {
            self.queued[m] = true;
            self.pending.push(m as u32);
        }
    }

    /// Replays the matches of every member re-keyed by [`Ranking::set_later`]; a pick calls
    /// it before it reads the top. Members replayed in any order leave the tree as replaying
    /// each at its change would: a replay only stops below a node whose winner is neither
    /// changed nor the member, and such a node's ancestors never saw the member's new key.
    #[inline]
    pub(crate) fn settle(&mut self) {
        while let Some(m) = self.pending.pop() {
            let m = m as usize;
            self.queued[m] = false;
            if self.slots[m] == Slot::On {
                self.fix(m);
            }
        }
    }

    fn switch(&mut self, m: usize, slot: Slot) {
        let was_on = self.slots[m] == Slot::On;
        self.slots[m] = slot;
        if was_on != (slot == Slot::On) {
            self.fix(m);
        }
    }

    /// Parks member `m`: `full` (at `max_leases`) or sick (its tunnel admits nothing).
    pub(crate) fn park(&mut self, m: usize, full: bool) {
        if full {
            self.switch(m, Slot::Full);
        } else {
            self.switch(m, Slot::Sick);
            self.sick.push(m as u32);
        }
    }

    /// A lease of member `m` ended below `max_leases`: it may serve again if it was full.
    pub(crate) fn unfull(&mut self, m: usize) {
        if self.slots.get(m) == Some(&Slot::Full) {
            self.switch(m, Slot::On);
        }
    }

    /// Whether the board has readmitted anything since the sick were last looked at.
    #[inline]
    pub(crate) fn stale(&self, readmissions: u64) -> bool {
        self.seen != readmissions
    }

    /// Looks at every sick member again; `serves(m)` is `Some(full)` for one that is back in
    /// service (parked again as full when it is at its bound), `None` for one still out.
    pub(crate) fn recheck(&mut self, readmissions: u64, mut serves: impl FnMut(usize) -> Option<bool>) {
        self.seen = readmissions;
        let mut i = 0;
        while i < self.sick.len() {
            let m = self.sick[i] as usize;
            if self.slots[m] != Slot::Sick {
                self.sick.swap_remove(i);
                continue;
            }
            match serves(m) {
                Some(full) => {
                    self.sick.swap_remove(i);
                    self.switch(m, if full { Slot::Full } else { Slot::On });
                }
                None => i += 1,
            }
        }
    }

    /// Switches back on every parked member for which `serves(m)`; true if any came back.
    pub(crate) fn unpark_all(&mut self, serves: impl Fn(usize) -> bool) -> bool {
        let mut any = false;
        for m in 0..self.slots.len() {
            if matches!(self.slots[m], Slot::Full | Slot::Sick) && serves(m) {
                self.switch(m, Slot::On);
                any = true;
            }
        }
        any
    }

    /// Passes over member `m` for the pick under way.
    pub(crate) fn skip(&mut self, m: usize) {
        self.switch(m, Slot::Skipped);
        self.skipped.push(m as u32);
    }

    /// Ends a pick: every member passed over is back on.
    pub(crate) fn restore(&mut self) {
        while let Some(m) = self.skipped.pop() {
            if self.slots[m as usize] == Slot::Skipped {
                self.switch(m as usize, Slot::On);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranking(keys: &[f64]) -> Ranking {
        let mut r = Ranking::default();
        r.build(keys.iter().enumerate().map(|(i, &k)| Key(k, i as u64)), 0);
        r
    }

    #[test]
    fn the_root_is_the_smallest_key_switched_on() {
        let mut r = ranking(&[5.0, 3.0, 4.0, 3.0, 9.0]);
        assert_eq!(r.top(), Some(1), "ties go to the smaller second field");
        r.set(1, Key(10.0, 0));
        assert_eq!(r.top(), Some(3));
        r.park(3, true);
        assert_eq!(r.top(), Some(2));
        r.skip(2);
        assert_eq!(r.top(), Some(0));
        r.restore();
        assert_eq!(r.top(), Some(2));
        r.unfull(3);
        assert_eq!(r.top(), Some(3));
    }

    #[test]
    fn sick_members_come_back_on_recheck_only() {
        let mut r = ranking(&[1.0, 2.0]);
        r.park(0, false);
        r.unfull(0);
        assert_eq!(r.top(), Some(1), "a release does not bring back a sick member");
        assert!(r.stale(1));
        r.recheck(1, |_| None);
        assert_eq!(r.top(), Some(1));
        r.recheck(2, |_| Some(false));
        assert_eq!(r.top(), Some(0));
        assert!(!r.stale(2));
    }

    #[test]
    fn one_member_and_none() {
        let mut r = ranking(&[1.0]);
        assert_eq!(r.top(), Some(0));
        r.park(0, true);
        assert_eq!(r.top(), None);
        let r = ranking(&[]);
        assert_eq!(r.top(), None);
    }

    #[test]
    fn matches_a_scan_under_random_changes() {
        use rand::rngs::SmallRng;
        use rand::{RngExt, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(3);
        // Keys of every sign: `lru` ranks never-used exits at minus infinity.
        const KEYS: [f64; 7] = [f64::NEG_INFINITY, -2.5, -0.5, 0.0, 1.0, 3.0, f64::INFINITY];
        for n in [1usize, 2, 3, 7, 8, 33] {
            let mut r = ranking(&vec![0.0; n]);
            let mut on = vec![true; n];
            for step in 0..500u64 {
                let m = rng.random_range(0..n);
                match rng.random_range(0..4) {
                    0 => r.set(m, Key(KEYS[rng.random_range(0..KEYS.len())], step)),
                    // Re-keyed lazily, in any mix with the other changes: replayed at a settle.
                    1 => r.set_later(m, Key(KEYS[rng.random_range(0..KEYS.len())], step)),
                    2 => {
                        r.park(m, true);
                        on[m] = false
                    }
                    _ => {
                        r.unfull(m);
                        on[m] = true
                    }
                }
                let want = (0..n).filter(|&i| on[i]).min_by(|&a, &b| {
                    let (ka, kb) = (r.key(a), r.key(b));
                    ka.0.partial_cmp(&kb.0).unwrap().then(ka.1.cmp(&kb.1)).then(a.cmp(&b))
                });
                // A pick settles before it reads the top; some steps pile up changes first.
                if rng.random_range(0..3) != 0 {
                    continue;
                }
                r.settle();
                let got = r.top();
                match (want, got) {
                    (None, None) => {}
                    (Some(w), Some(g)) => assert_eq!(r.key(w), r.key(g), "n={n} step={step}"),
                    _ => panic!("n={n} step={step}: want {want:?} got {got:?}"),
                }
            }
        }
    }
}
