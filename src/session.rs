//! Sticky sessions: `key -> exit` for a TTL that every lease extends. While a binding lives the
//! key never moves; rotation happens only when a session ends.

use foldhash::fast::RandomState;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Session {
    pub exit: u32,
    pub expires: f64,
}

#[derive(Default)]
pub struct Sessions {
    map: HashMap<Box<str>, Session, RandomState>,
    /// Live sessions per exit handle, for bounded loads and for draining a benched exit.
    load: Vec<u32>,
    total: u32,
    next_sweep: f64,
}

impl Sessions {
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

    /// Binds or extends; a new binding is counted against its exit.
    #[inline]
    pub fn bind(&mut self, key: &str, exit: u32, expires: f64) {
        if let Some(s) = self.map.get_mut(key) {
            debug_assert_eq!(s.exit, exit, "a live session never moves");
            s.expires = expires;
            return;
        }
        self.map.insert(key.into(), Session { exit, expires });
        self.count(exit, 1);
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
