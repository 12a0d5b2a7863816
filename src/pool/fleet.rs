//! Fleet mode: a pool that shares leases, sessions, pairings, health verdicts and counters
//! with every pool on the same store. Every method here is the `Some(store)` side of the pool;
//! without a store none of it runs.

use super::grant::{PACED_ALL, PACED_ONE};
use super::state::State;
use super::{Choice, Grant, Pool, Refusal};
use crate::events::EventKind;
use crate::exit::Exit;
use crate::fork::Mutex;
use crate::health::{Admit, OutboxVerdict, Reason, State as Health, SITE_VERDICT};
use crate::store::{ExitCounts, Pace, Store, StoreError, Take, Taken, Verdict};
use std::sync::Arc;

/// A pool's link to the fleet's store. The pool's own state stays complete: it is where the
/// store's answers are recorded, and what the pool serves from while the store is away.
pub(super) struct FleetLink {
    pub(super) store: Arc<dyn Store>,
    /// This pool's name on its verdicts, so it does not apply its own.
    pub(super) origin: u64,
    pub(super) link: Mutex<LinkState>,
}

pub(super) struct LinkState {
    pub(super) online: bool,
    /// When the local copy of the fleet's health is next refreshed (pool clock).
    pub(super) next_refresh: f64,
    /// The last verdict applied.
    pub(super) seen: u64,
}

/// The store's name for the breakers of leases without a site (no host name has a control
/// character; the empty name is the tunnel).
const UNSCOPED: &str = "\u{1}";

/// How often the local copy of the fleet's health is refreshed: at most one round trip a
/// second for it, whatever the lease rate.
const HEALTH_REFRESH: f64 = 1.0;

/// With a store, a worker extends a key's session (its own copy and the fleet's, together)
/// only once this share of `session_ttl` has passed since it last did: a key leased in a loop
/// then costs the store no write per lease, and its session lapses at most this much early.
pub const RENEW_SLACK: f64 = 1.0 / 64.0;

/// A keyless lease offers the store its pick and this many more, so that one full exit
/// elsewhere in the fleet costs no second round trip.
const KEYLESS_FALLBACKS: usize = 3;

/// Fleet mode: the decisions made by the shared store.
impl Pool {
    /// One lease attempt through the store: decide locally (ring, sessions known here, health,
    /// strategy), let the store take the slot atomically (one round trip), then record what it
    /// granted. The pool's lock is not held while the store is asked. When the store cannot
    /// be reached, the pool's own state decides, as in a pool of its own.
    pub(super) fn shared_attempt(
        &self,
        fl: &FleetLink,
        view: u32,
        key: Option<&str>,
        site: Option<&str>,
        avoid: &[&str],
    ) -> std::result::Result<Grant, Refusal> {
        self.sync_health(fl);
        let now = self.clock.now();
        // While the store is away it answers at once (it retries the server once a second).
        self.shared_take(fl, view, key, site, avoid, now).unwrap_or_else(|| self.state.lock().attempt(view, key, site, avoid, now))
    }

    /// `None` when the store could not be asked.
    pub(super) fn shared_take(
        &self,
        fl: &FleetLink,
        view: u32,
        key: Option<&str>,
        site: Option<&str>,
        avoid: &[&str],
        now: f64,
    ) -> Option<std::result::Result<Grant, Refusal>> {
        let mut st = self.state.lock();
        if st.expire(now) && st.waiters > 0 {
            self.freed.notify_all();
        }
        let site_id = st.site_id(site);
        let avoid = st.avoided(key, avoid);
        let (h, choice) = match (st.decide(view, key, site_id, &avoid, now, false), key) {
            (Ok(d), _) => d,
            (Err(r), None) => return Some(Err(r)),
            (Err(r), Some(k)) => {
                // Nothing on the ring for a new session; but the key may have a live one,
                // which only the store knows, and which must be reported, not hidden.
                drop(st);
                let bound = fl.store.session(k);
                if !self.heard(fl, bound.as_ref().map(drop).map_err(Clone::clone), now) {
                    return None;
                }
                let Some(exit) = bound.ok().flatten() else { return Some(Err(r)) };
                st = self.state.lock();
                match st.adopt(view, key, &exit, site_id, now, Choice::Session) {
                    Ok(d) => d,
                    Err(r) => return Some(Err(r)),
                }
            }
        };
        let mut candidates = vec![st.exits[h as usize].exit.clone()];
        let mut token = st.token_rule(h);
        if key.is_none() {
            st.fallbacks(view, h, site_id, &avoid, now, &mut candidates);
        }
        let (max_leases, lease_ttl, session_ttl, warmup) = (st.cfg.max_leases, st.cfg.lease_ttl, st.cfg.session_ttl, st.cfg.warmup);
        let renew = key.is_none_or(|k| st.sessions.live(k, now).is_none_or(|s| s.expires - now <= session_ttl * (1.0 - RENEW_SLACK)));
        let mut spacing = st.spacing(site_id, &candidates);
        drop(st);
        let (mut h, mut choice) = (h, choice);
        // A key whose session another worker bound elsewhere is asked for again, once, for
        // that exit, after this worker has checked the exit can serve here.
        for _ in 0..2 {
            let ids: Vec<&str> = candidates.iter().map(|e| e.id.as_str()).collect();
            let (generation, rebind) = token;
            let pace = site.filter(|_| !spacing.is_empty()).map(|site| Pace { site, spacing: &spacing });
            let take = Take { key, candidates: &ids, max_leases, lease_ttl, session_ttl, renew, warmup, generation, rebind, pace };
            let taken = fl.store.take(&take);
            if !self.heard(fl, taken.as_ref().map(drop).map_err(Clone::clone), now) {
                return None;
            }
            match taken.ok()? {
                Taken::Elsewhere { exit } => {
                    let st = &mut *self.state.lock();
                    match st.adopt(view, key, &exit, site_id, now, Choice::Session) {
                        Ok((h2, c2)) => {
                            (h, choice) = (h2, c2);
                            candidates = vec![st.exits[h2 as usize].exit.clone()];
                            token = st.token_rule(h2);
                            spacing = st.spacing(site_id, &candidates);
                        }
                        Err(r) => return Some(Err(r)),
                    }
                }
                Taken::Full { .. } => return Some(Err(Refusal::Full)),
                // The fleet spent the budget: wait for it, as for this worker's own.
                Taken::Paced { wait, .. } => {
                    return Some(Err(Refusal::Cooling { wait, why: if key.is_some() { PACED_ONE } else { PACED_ALL } }))
                }
                // The fleet's session of the key was bound in an older token: the store ended
                // it, once, for every worker; this worker's copy ends with it.
                Taken::Rotated { exit } => {
                    let st = &mut *self.state.lock();
                    let Some(&h) = st.by_id.get(&exit) else { return Some(Err(Refusal::Full)) };
                    return Some(Err(st.session_rotated(key.unwrap_or_default(), h, site_id, now)));
                }
                Taken::WarmingUp { exit, wait } => {
                    let mut st = self.state.lock();
                    let eh = st.by_id.get(&exit).copied();
                    st.board.events.push(
                        now,
                        EventKind::WarmingUp,
                        eh,
                        (site_id != 0).then_some(site_id),
                        format!("a new pairing of key {:?} must wait {wait:.3} s (warm-up ramp, fleet-wide)", key.unwrap_or("")),
                    );
                    return Some(Err(Refusal::WarmingUp { retry_after: wait, exit_id: exit }));
                }
                Taken::Granted { exit, lease, session } => {
                    let mut st = self.state.lock();
                    // A keyless lease may have gone to one of the fallbacks.
                    let adopted = if exit == ids[0] { Ok((h, choice)) } else { st.adopt(view, key, &exit, site_id, now, choice) };
                    return Some(match adopted {
                        Ok((h, choice)) => {
                            let choice = if session { Choice::Session } else { choice };
                            // The lease, and a new session, get the slot's token current now.
                            st.refresh(h, now);
                            if let Some(key) = key {
                                if st.sessions.live(key, now).is_some_and(|s| s.exit != h || !session) {
                                    // Another worker bound this key meanwhile (the fleet's binding
                                    // wins), or the fleet's binding is new: this copy is bound
                                    // afresh, in the slot's token now.
                                    st.sessions.end(key);
                                }
                                // Unrenewed, the fleet's copy kept its expiry: so does this one.
                                if renew || !session || st.sessions.live(key, now).is_none() {
                                    st.bind_session(key, h, now + session_ttl, now);
                                }
                            }
                            Ok(st.commit(h, choice, key, site_id, now, lease))
                        }
                        Err(refusal) => {
                            drop(st);
                            let r = fl.store.hand_back(&exit, lease, None);
                            self.stuck(fl, r, now);
                            Err(refusal)
                        }
                    });
                }
            }
        }
        // The session moved again meanwhile: as busy as full, for a moment.
        Some(Err(Refusal::Full))
    }

    /// Records whether the store answered, announcing a change either way; true if it did.
    pub(super) fn heard(&self, fl: &FleetLink, r: std::result::Result<(), StoreError>, now: f64) -> bool {
        let mut link = fl.link.lock();
        match r {
            Ok(()) => {
                if !link.online {
                    link.online = true;
                    link.next_refresh = now;
                    drop(link);
                    let msg = format!("{} answers again: rejoining the fleet", fl.store.describe());
                    self.state.lock().board.events.push(now, EventKind::StoreRejoined, None, None, msg);
                }
                true
            }
            Err(StoreError::Unavailable(why)) | Err(StoreError::Protocol(why)) => {
                if link.online {
                    link.online = false;
                    drop(link);
                    let msg = format!("{why}; serving from this worker's own state until it answers");
                    self.state.lock().board.events.push(now, EventKind::StoreUnavailable, None, None, msg);
                }
                false
            }
        }
    }

    /// Records a failure the store reports without having been asked anything (a hand-back
    /// kept because the store did not take it): `Ok` there says nothing of whether it answers.
    pub(super) fn stuck(&self, fl: &FleetLink, r: std::result::Result<(), StoreError>, now: f64) {
        if r.is_err() {
            self.heard(fl, r, now);
        }
    }

    /// Brings the local copy of the fleet's health up to date, at most once a second.
    pub(super) fn sync_health(&self, fl: &FleetLink) {
        let now = self.clock.now();
        let since = {
            let mut link = fl.link.lock();
            if now < link.next_refresh || !link.online {
                return;
            }
            link.next_refresh = now + HEALTH_REFRESH;
            link.seen
        };
        let r = fl.store.verdicts(since);
        if !self.heard(fl, r.as_ref().map(drop).map_err(Clone::clone), now) {
            return;
        }
        let Ok((verdicts, last)) = r else { return };
        let mut st = self.state.lock();
        for v in verdicts.iter().filter(|v| v.origin != fl.origin) {
            if v.exit.is_empty() {
                if !v.site.is_empty() && v.site != UNSCOPED {
                    let site = st.site_id(Some(&v.site));
                    st.board.impose_incident(site, v.state == Health::Quarantined, v.hold, now);
                }
                continue;
            }
            let Some(&h) = st.by_id.get(&v.exit) else { continue };
            if st.exits[h as usize].removed {
                continue;
            }
            let site = match v.site.as_str() {
                "" => None,
                UNSCOPED => Some(0),
                name => Some(st.site_id(Some(name))),
            };
            match (v.pace, site) {
                (Some(rate), Some(site)) => st.pace_imposed(h, site, rate, v.hold, now),
                (Some(_), None) => {}
                (None, _) => st.board.impose(h, site, v.state, v.hold, now, Reason::Fleet),
            }
        }
        drop(st);
        let mut link = fl.link.lock();
        link.seen = link.seen.max(last);
    }

    /// Sends this worker's new verdicts to the fleet. An ejection the fleet-wide cap refuses
    /// is turned into reduced weight here, as a local refusal would have been.
    pub(super) fn publish_verdicts(&self, fl: &FleetLink, now: f64) {
        let (pending, cap) = {
            let mut st = self.state.lock();
            let Some(outbox) = st.board.outbox.as_mut() else { return };
            if outbox.is_empty() {
                return;
            }
            let pending: Vec<_> = std::mem::take(outbox);
            let in_service = st.views[0].members.len() as u32;
            // The store's cap for a site counts tunnel ejections too; here it limits soft
            // evidence only, so the tunnels out (known here as fleet verdicts) are added.
            let cap = st.board.ejection_cap(in_service).saturating_add(st.board.ejected());
            let named: Vec<_> = pending
                .into_iter()
                .map(|OutboxVerdict { exit: h, site, state, hold, pace }| {
                    let v = Verdict {
                        // A site's own verdict (an incident) names no exit.
                        exit: if h == SITE_VERDICT { String::new() } else { st.exits[h as usize].exit.id.clone() },
                        site: match site {
                            None => String::new(),
                            Some(0) => UNSCOPED.to_owned(),
                            Some(s) => st.site_names[s as usize].to_string(),
                        },
                        state,
                        hold,
                        origin: fl.origin,
                        seq: 0,
                        pace,
                    };
                    (h, site, v)
                })
                .collect();
            (named, cap)
        };
        for (h, site, v) in pending {
            // A tunnel's verdict is hard evidence: no cap, fleet-wide as here.
            let r = fl.store.publish(&v, if site.is_none() { u32::MAX } else { cap });
            if !self.heard(fl, r.as_ref().map(drop).map_err(Clone::clone), now) {
                return;
            }
            if r == Ok(false) && h != SITE_VERDICT && v.pace.is_none() {
                let mut st = self.state.lock();
                if st.board.state(h, site) == v.state {
                    st.board.impose(h, site, Health::Degraded, 0.0, now, Reason::FleetCapRefused);
                }
            }
        }
    }

    /// Fleet-wide figures for these exits, if there is a store and it answers.
    pub fn fleet_counts(&self, ids: &[&str]) -> Option<Vec<ExitCounts>> {
        let fl = self.fleet.as_ref()?;
        let r = fl.store.counts(ids);
        self.heard(fl, r.as_ref().map(drop).map_err(Clone::clone), self.clock.now());
        r.ok()
    }
}

impl State {
    /// Exit `h`'s token generation (0 for a plain exit) and whether its gateway rebinds
    /// quietly: what the store checks a key's session against.
    fn token_rule(&self, h: u32) -> (u64, bool) {
        let slot = &self.exits[h as usize];
        let rebind = slot.exit.gateway.is_some_and(|l| self.gateways[l.gateway as usize].rebind);
        (slot.generation, rebind)
    }

    /// With `site` paced: each candidate's spacing at the rate this worker learned for it, for
    /// the store to spend the fleet's budget by. Empty (no allocation) when it is not paced.
    pub(super) fn spacing(&self, site: u32, candidates: &[Arc<Exit>]) -> Vec<(f64, f64)> {
        let Some(row) = self.pacer.as_ref().and_then(|p| p.row(site)) else { return Vec::new() };
        candidates.iter().map(|e| self.by_id.get(&e.id).map_or_else(|| row.spacing(u32::MAX), |&h| row.spacing(h))).collect()
    }

    /// Other members of the view that could take a keyless lease for the site, fewest local
    /// leases first, for the store to try when the pick is full fleet-wide.
    pub(super) fn fallbacks(&self, view: u32, picked: u32, site: u32, avoid: &[u32], now: f64, out: &mut Vec<Arc<Exit>>) {
        let max_leases = self.cfg.max_leases.unwrap_or(u32::MAX);
        let mut more: Vec<u32> = self.views[view as usize]
            .members
            .iter()
            .copied()
            .filter(|&h| {
                h != picked
                    && !avoid.contains(&h)
                    && self.exits[h as usize].active < max_leases
                    && self.board.admits(h, site, now) == Admit::Yes
                    && self.pace_wait(site, h, now) == 0.0
            })
            .collect();
        more.sort_by_key(|&h| self.exits[h as usize].active);
        out.extend(more.into_iter().take(KEYLESS_FALLBACKS).map(|h| self.exits[h as usize].exit.clone()));
    }

    /// The store granted a slot on another exit than the one decided here: for a keyless
    /// lease, one of the fallbacks; for a keyed one, the exit of a session another worker
    /// bound, which must be able to serve here too.
    pub(super) fn adopt(
        &mut self,
        view: u32,
        key: Option<&str>,
        exit: &str,
        site: u32,
        now: f64,
        choice: Choice,
    ) -> std::result::Result<(u32, Choice), Refusal> {
        let Some(&h) = self.by_id.get(exit) else {
            let key = key.unwrap_or("").to_owned();
            return Err(Refusal::SessionExitLost { key, exit_id: exit.to_owned(), why: "its exit is not in this worker's pool" });
        };
        match key {
            None => Ok((h, choice)),
            // The token generation is the store's to check (`Take::generation`).
            Some(key) => Ok((self.session_exit(view, key, h, None, site, now)?, Choice::Session)),
        }
    }
}
