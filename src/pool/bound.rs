//! The pool's bounds on what keys keep alive (`max_sessions`, `max_pairings`): making room
//! when a new key would go over one, and saying so.

use super::state::State;
use crate::events::EventKind;
use foldhash::fast::RandomState;
use std::collections::HashSet;

impl State {
    /// Binds or extends `key`'s session on exit `h` until `expires`. When the new session
    /// takes the pool over `max_sessions`, the least recently leased idle sessions end (see
    /// [`crate::session::Sessions::evict_idle`]). A session whose latest lease is still out
    /// never does: a lease that started on its exit at the very moment of its last lease is
    /// that lease (or, rarely, another key's taken at the same instant, which only keeps one
    /// more session). The live leases tell that in one pass when room is needed, so the lease
    /// path itself keeps no count.
    pub(super) fn bind_session(&mut self, key: &str, h: u32, expires: f64, now: f64) {
        let generation = self.exits[h as usize].generation as u32;
        if !self.sessions.bind(key, h, generation, expires) {
            return;
        }
        let ttl = self.cfg.session_ttl;
        // A session's expiry is its last lease's start plus `ttl`, computed the same way, so
        // the two compare exactly.
        let out: HashSet<(u32, u64), RandomState> = self.leases.starts().map(|(exit, start)| (exit, (start + ttl).to_bits())).collect();
        let ended = self.sessions.evict_idle(now, key, |exit, expires| out.contains(&(exit, expires.to_bits())));
        if ended > 0 {
            self.counts.evicted_sessions += ended as u64;
            let max = self.cfg.max_sessions.unwrap_or(u32::MAX);
            let msg = format!(
                "{ended} idle sessions ended early, least recently leased first, to keep max_sessions {max}; \
                 their keys bind afresh from the ring at their next lease"
            );
            self.board.events.push(now, EventKind::SessionsEvicted, None, None, msg);
        }
    }

    /// Says that `forgotten` warm-up pairings made room for a new one under `max_pairings`.
    pub(super) fn pairings_evicted(&mut self, forgotten: usize, now: f64) {
        self.counts.evicted_pairings += forgotten as u64;
        let max = self.cfg.max_pairings.unwrap_or(u32::MAX);
        let msg = format!(
            "{forgotten} warm-up pairings forgotten early, least recently used first, to keep max_pairings {max}; \
             they ramp up again at their next lease"
        );
        self.board.events.push(now, EventKind::PairingsEvicted, None, None, msg);
    }
}
