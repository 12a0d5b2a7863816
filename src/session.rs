//! Sticky sessions: `key -> exit` for a TTL that every lease extends. While a binding lives the
//! key never moves; rotation happens only when a session ends.

use foldhash::fast::RandomState;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Session {
    pub exit: u32,
    /// The exit's token generation when the session was bound (0 for a plain exit): a
    /// gateway slot whose token has rotated since no longer holds the session's address.
    /// It sits in what was padding, so a session costs no more than before.
    pub generation: u32,
    pub expires: f64,
}

#[derive(Default)]
pub struct Sessions {
    map: HashMap<Box<str>, Session, RandomState>,
    /// At most this many sessions are kept, bar those holding a lease (`None`: no bound).
    max: Option<usize>,
    /// Live sessions per exit handle, for bounded loads and for draining a benched exit.
    load: Vec<u32>,
    total: u32,
    next_sweep: f64,
}

impl Sessions {
    /// Sessions of which at most `max` are kept idle (`None`: only their TTL ends them).
    pub fn bounded(max: Option<u32>) -> Sessions {
        Sessions { max: max.map(|m| m as usize), ..Sessions::default() }
    }

    /// Sessions kept now, expired ones not yet swept included.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The live session of `key`, dropping it first if its time has passed.
    #[inline]
    pub fn live(&mut self, key: &str, now: f64) -> Option<Session> {
        let s = *self.map.get(key)?;
        if s.expires > now {
            return Some(s);
        }
        self.end(key);
        None
    }

    /// The live session of `key` as it was, now extended to `expires` in the same lookup: a
    /// keyed lease that finds its session renews it (a second lookup to extend it was a tenth
    /// of a keyed pair's own work). A lease refused after all gives it back its old expiry
    /// ([`Sessions::restore`]). Dropped first if its time has passed.
    #[inline]
    pub fn renew(&mut self, key: &str, now: f64, expires: f64) -> Option<Session> {
        match self.map.get_mut(key) {
            Some(s) if s.expires > now => {
                let was = *s;
                s.expires = expires;
                Some(was)
            }
            Some(_) => {
                self.end(key);
                None
            }
            None => None,
        }
    }

    /// Undoes a [`Sessions::renew`] whose lease was refused: only a lease extends a session.
    #[cold]
    pub fn restore(&mut self, key: &str, expires: f64) {
        if let Some(s) = self.map.get_mut(key) {
            s.expires = expires;
        }
    }

    /// Binds or extends; a new binding is counted against its exit. True when the new
    /// binding took the table over its bound: the caller then calls [`Sessions::evict_idle`].
    #[inline]
    #[must_use = "over the bound, the caller must make room with evict_idle"]
    /// `generation` (the exit's token generation) is kept only by a new binding: an extended
    /// session keeps the one it was bound in.
    pub fn bind(&mut self, key: &str, exit: u32, generation: u32, expires: f64) -> bool {
        if let Some(s) = self.map.get_mut(key) {
            debug_assert_eq!(s.exit, exit, "a live session never moves");
            s.expires = expires;
            return false;
        }
        self.map.insert(key.into(), Session { exit, generation, expires });
        self.count(exit, 1);
        self.max.is_some_and(|m| self.map.len() > m)
    }

    /// Over the bound: drops expired sessions, then ends the least recently leased ones down
    /// to `max - max / 16` (a batch, so that a flood of new keys costs no pass per key). Never
    /// `keep` (the session just bound) and never one that `may_hold(exit, expires)` says may
    /// still hold a lease: ending a session in use would let its key move between two leases
    /// of one task without anyone asking. If too few are idle the table stays over its bound
    /// by the sessions in use, which live leases bound in turn. Returns how many live sessions
    /// ended (expired ones are not counted).
    pub fn evict_idle(&mut self, now: f64, keep: &str, may_hold: impl Fn(u32, f64) -> bool) -> usize {
        let Some(max) = self.max else { return 0 };
        self.drop_expired(now);
        let before = self.map.len();
        let excess = self.map.len().saturating_sub(crate::bound::room_target(max));
        if self.map.len() > max && excess > 0 {
            let idle = |k: &str, s: &Session| k != keep && !may_hold(s.exit, s.expires);
            let times = self.map.iter().filter(|(k, s)| idle(k, s)).map(|(_, s)| s.expires).collect();
            let mut cut = crate::bound::Cutoff::oldest(times, excess);
            let (load, total) = (&mut self.load, &mut self.total);
            self.map.retain(|k, s| {
                let evict = idle(k, s) && cut.take(s.expires);
                if evict {
                    load[s.exit as usize] -= 1;
                    *total -= 1;
                }
                !evict
            });
        }
        before - self.map.len()
    }

    /// Moves a live session to its exit's new token generation (a quiet rebind). Once per
    /// rotation: it replaces the entry rather than call `get_mut`, whose one other caller,
    /// `bind`, is on every keyed lease and stays inlined only while it is the one caller.
    #[cold]
    pub fn regenerate(&mut self, key: &str, generation: u32) {
        if let Some(&s) = self.map.get(key) {
            self.map.insert(key.into(), Session { generation, ..s });
        }
    }

    pub fn end(&mut self, key: &str) -> Option<Session> {
        let s = self.map.remove(key)?;
        self.count(s.exit, -1);
        Some(s)
    }

    /// Drops every expired session; run at most every `interval` so that the per-exit counts
    /// used by bounded loads stay close to the truth without a scan per lease.
    pub fn sweep(&mut self, now: f64, interval: f64) {
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + interval;
        self.drop_expired(now);
    }

    fn drop_expired(&mut self, now: f64) {
        let load = &mut self.load;
        let total = &mut self.total;
        self.map.retain(|_, s| {
            let keep = s.expires > now;
            if !keep {
                load[s.exit as usize] -= 1;
                *total -= 1;
            }
            keep
        });
    }

    fn count(&mut self, exit: u32, delta: i32) {
        let i = exit as usize;
        if self.load.len() <= i {
            self.load.resize(i + 1, 0);
        }
        self.load[i] = self.load[i].wrapping_add_signed(delta);
        self.total = self.total.wrapping_add_signed(delta);
    }

    pub fn load(&self, exit: u32) -> u32 {
        self.load.get(exit as usize).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u32 {
        self.total
    }

    /// Keys of the live sessions on an exit, sorted.
    pub fn keys_on(&self, exit: u32, now: f64) -> Vec<String> {
        let mut keys: Vec<String> =
            self.map.iter().filter(|(_, s)| s.exit == exit && s.expires > now).map(|(k, _)| k.to_string()).collect();
        keys.sort();
        keys
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Session)> {
        self.map.iter().map(|(k, s)| (&**k, s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(s: &mut Sessions, key: &str, exit: u32, expires: f64) -> bool {
        s.bind(key, exit, 0, expires)
    }

    #[test]
    fn over_the_bound_the_least_recently_leased_idle_sessions_end() {
        let mut s = Sessions::bounded(Some(16));
        for i in 0..16 {
            assert!(!bind(&mut s, &format!("k{i}"), i % 3, 100.0 + f64::from(i)));
        }
        // The 17th goes over: the oldest idle ones end down to the bound less a sixteenth
        // (15), never k16 itself.
        assert!(bind(&mut s, "k16", 0, 200.0));
        assert_eq!(s.evict_idle(50.0, "k16", |_, _| false), 2);
        assert_eq!(s.len(), 15);
        assert!(s.live("k1", 50.0).is_none() && s.live("k2", 50.0).is_some() && s.live("k16", 50.0).is_some());
        // The counts used by bounded loads follow.
        assert_eq!((s.total(), s.load(0) + s.load(1) + s.load(2)), (15, 15));
    }

    #[test]
    fn a_session_that_may_hold_a_lease_is_never_evicted() {
        let mut s = Sessions::bounded(Some(4));
        for (i, key) in ["a", "b", "c", "d"].iter().enumerate() {
            assert!(!bind(&mut s, key, i as u32, 100.0 + i as f64));
        }
        assert!(bind(&mut s, "e", 9, 200.0));
        // "a" (oldest) holds a lease: "b" and "c" go in its place (down to 3).
        assert_eq!(s.evict_idle(50.0, "e", |exit, _| exit == 0), 2);
        assert!(s.live("a", 50.0).is_some() && s.live("b", 50.0).is_none() && s.live("c", 50.0).is_none());
        assert!(!bind(&mut s, "f", 9, 201.0));
        // Every other one holds a lease: the table stays over its bound instead.
        assert!(bind(&mut s, "g", 8, 202.0));
        assert_eq!(s.evict_idle(50.0, "g", |_, _| true), 0);
        assert_eq!(s.len(), 5);
    }

    #[test]
    fn expired_sessions_make_room_first_and_are_not_counted_as_evicted() {
        let mut s = Sessions::bounded(Some(2));
        assert!(!bind(&mut s, "old", 0, 10.0));
        assert!(!bind(&mut s, "new", 0, 100.0));
        assert!(bind(&mut s, "newer", 0, 101.0));
        assert_eq!(s.evict_idle(20.0, "newer", |_, _| false), 0);
        assert_eq!((s.len(), s.total()), (2, 2));
        assert!(s.live("new", 20.0).is_some());
    }

    #[test]
    fn unbounded_sessions_never_evict() {
        let mut s = Sessions::default();
        for i in 0..1000 {
            assert!(!bind(&mut s, &format!("k{i}"), 0, 100.0));
        }
        assert_eq!(s.evict_idle(0.0, "k0", |_, _| false), 0);
        assert_eq!(s.len(), 1000);
    }
}
