//! A view's exits as the selection strategies see them: eligible or not, weighted by
//! capacity and health.

use super::state::ExitSlot;
use crate::health::{Admit, HealthBoard};
use crate::pacing::Row;
use crate::select::Members;

/// The view's members as the selection strategies see them.
pub(super) struct ViewMembers<'a> {
    pub(super) members: &'a [u32],
    /// `members` is every handle from 0 in order (see [`dense`]): member `m` is exit `m`.
    pub(super) dense: bool,
    pub(super) exits: &'a [ExitSlot],
    pub(super) max_leases: u32,
    pub(super) last_used: &'a [f64],
    pub(super) board: &'a HealthBoard,
    pub(super) site: u32,
    pub(super) now: f64,
}

/// Whether a view's member list (ascending handles, each once) is `0, 1, 2, ...`: the whole
/// pool with nothing benched or removed, as most pools are. Then a pick need not read the
/// list to find a member's exit, one cache miss less for each exit p2c draws in a large pool.
#[inline]
pub(super) fn dense(members: &[u32]) -> bool {
    members.last().is_none_or(|&last| last as usize + 1 == members.len())
}

/// A view's members less the exits a keyless retry must pass over, and, for a paced site,
/// less those without budget for it (for this pick only). A type of its own, so the common
/// pick, with nothing to avoid and no pacing, runs the strategies exactly as it did without it.
pub(super) struct Avoiding<'a> {
    pub(super) inner: ViewMembers<'a>,
    pub(super) avoid: &'a [u32],
    /// The site's request budgets, if it is paced.
    pub(super) pace: Option<&'a Row>,
}

impl Members for Avoiding<'_> {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn full(&self, m: usize) -> bool {
        self.inner.full(m)
    }
    fn serving(&self, m: usize) -> bool {
        self.inner.serving(m)
    }
    fn suits(&self, m: usize) -> bool {
        self.inner.suits(m) && self.pace.is_none_or(|r| r.admits(self.inner.handle(m), self.inner.now))
    }
    fn avoided(&self, m: usize) -> bool {
        self.avoid.contains(&self.inner.handle(m))
    }
    fn capacity(&self, m: usize) -> u32 {
        self.inner.capacity(m)
    }
    fn full_weight(&self, m: usize) -> i64 {
        self.inner.full_weight(m)
    }
    fn weight(&self, m: usize) -> i64 {
        self.inner.weight(m)
    }
    fn active(&self, m: usize) -> u32 {
        self.inner.active(m)
    }
    fn last_used(&self, m: usize) -> f64 {
        self.inner.last_used(m)
    }
}

/// Weights go to the strategies as integers; this many units stand for one unit of capacity,
/// so health can shade a weight finely.
const WEIGHT_SCALE: f64 = 1000.0;

impl ViewMembers<'_> {
    /// Member `m`'s exit handle.
    #[inline]
    pub(super) fn handle(&self, m: usize) -> u32 {
        if self.dense {
            debug_assert_eq!(self.members[m], m as u32);
            m as u32
        } else {
            self.members[m]
        }
    }

    /// Member `m`'s handle and its active leases and capacity, from the board's record of the
    /// exit (one cache line with its tunnel's admission and weight factor), not its slot.
    #[inline]
    fn load(&self, m: usize) -> (u32, u32, u32) {
        let h = self.handle(m);
        let (active, capacity) = self.board.load(h);
        debug_assert_eq!(
            (active, capacity),
            (self.exits[h as usize].active, self.exits[h as usize].capacity()),
            "exit {h}'s record disagrees with its slot"
        );
        (h, active, capacity)
    }
}

impl Members for ViewMembers<'_> {
    fn len(&self) -> usize {
        self.members.len()
    }
    #[inline]
    fn full(&self, m: usize) -> bool {
        self.load(m).1 >= self.max_leases
    }
    #[inline]
    fn serving(&self, m: usize) -> bool {
        self.board.tunnel_admits(self.handle(m))
    }
    #[inline]
    fn suits(&self, m: usize) -> bool {
        self.board.site_admits(self.handle(m), self.site, self.now) == Admit::Yes
    }
    #[inline]
    fn capacity(&self, m: usize) -> u32 {
        self.load(m).2
    }
    #[inline]
    fn weight(&self, m: usize) -> i64 {
        let (h, _, capacity) = self.load(m);
        let capacity = capacity.max(1) as f64;
        // Round half up by hand: weights are never negative, and `f64::round` is a libm call
        // on baseline x86-64 (no SSE4.1) that perf put at 8% of a keyless pair.
        ((capacity * self.board.weight(h, self.site) * WEIGHT_SCALE + 0.5) as i64).max(1)
    }
    #[inline]
    fn prefetch(&self, m: usize) {
        self.board.prefetch_pick(self.handle(m), self.site);
    }
    #[inline]
    fn full_weight(&self, m: usize) -> i64 {
        (self.load(m).2.max(1) as f64 * WEIGHT_SCALE) as i64
    }
    #[inline]
    fn active(&self, m: usize) -> u32 {
        self.load(m).1
    }
    #[inline]
    fn last_used(&self, m: usize) -> f64 {
        self.last_used.get(self.handle(m) as usize).copied().unwrap_or(f64::NEG_INFINITY)
    }
}
