//! `Pool::update`: a new list of exits applied as a difference, so that a list that changes
//! daily costs no state. Every exit is matched by id: an unchanged one is not touched; a changed
//! one (new proxy, credentials, capacity or tags) keeps its slot, so its health, breakers,
//! sessions, pairings and counters carry over and its next lease gets the new URL; a new one
//! joins as `add` does (warm-up applies to it as to any new exit); a missing one drains as
//! `remove` does (no new lease, live leases finish, its sessions end visibly). The ring changes
//! only by the removed, added and re-weighted exits' own points.
//!
//! Everything is checked before anything changes: bad input leaves the pool as it was.
//! In fleet mode the ring is computed by each worker, so an update is local: every worker
//! applies the same list (each watches the same file).

use super::state::ExitSlot;
use super::{Member, Pool, State};
use crate::error::{Error, Result};
use crate::events::EventKind;
use crate::exit::Exit;
use crate::gateway::{Gateway, GatewayLink};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// What an update did, by exit id (sorted); `unchanged` only counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Update {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    pub unchanged: usize,
}

/// One exit the new list asks for: its exit now (a gateway slot's in its current token) and,
/// for a slot, its token generation and when that rotates (pool clock).
struct Wanted {
    exit: Exit,
    token: Option<(u64, f64)>,
}

/// The difference, checked, ready to apply.
struct Plan {
    /// New gateways by their index in the pool's list (an existing index: replaced in place).
    gateways: Vec<(usize, Arc<Gateway>)>,
    added: Vec<Wanted>,
    changed: Vec<(u32, Wanted)>,
    removed: Vec<u32>,
    unchanged: usize,
}

impl Pool {
    /// Applies `members` as the pool's new list (see the module's notes). Bad input (an id
    /// twice, a bad capacity, a ring that would overfill) changes nothing.
    pub fn update(&self, members: Vec<Member>) -> Result<Update> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let plan = st.plan_update(members, now)?;
        let done = st.apply_update(plan, now)?;
        let msg = format!(
            "exits updated: {} added, {} removed (draining), {} changed, {} unchanged",
            done.added.len(),
            done.removed.len(),
            done.changed.len(),
            done.unchanged
        );
        st.board.events.push(now, EventKind::ExitsUpdated, None, None, msg);
        drop(st);
        // Removed exits may have had waiters' slots; a new exit may serve one now.
        self.freed.notify_all();
        Ok(done)
    }
}

impl State {
    /// The difference between the pool and `members`, every part checked; changes nothing.
    fn plan_update(&self, members: Vec<Member>, now: f64) -> Result<Plan> {
        let unix = now + self.unix_offset;
        let mut wanted: Vec<Wanted> = Vec::with_capacity(members.len());
        let mut gateways = Vec::new();
        let mut gateway_ids = HashSet::new();
        for m in members {
            match m {
                Member::Exit(e) => {
                    crate::exit::validate_capacity(e.capacity.into())?;
                    wanted.push(Wanted { exit: Exit { gateway: None, ..e }, token: None });
                }
                Member::Gateway(g) => {
                    if !gateway_ids.insert(g.id.clone()) {
                        return Err(Error::DuplicateExit(g.id));
                    }
                    // The gateway's place in the pool's list: its own if it is there already.
                    let index = self.gateways.iter().rposition(|old| old.id == g.id).unwrap_or(self.gateways.len() + gateways.len());
                    for slot in 0..g.slots {
                        let generation = g.generation(slot, unix);
                        let rotates_at = g.rotates_at(slot, generation) - self.unix_offset;
                        wanted.push(Wanted { exit: g.slot_exit(slot, generation, index as u32), token: Some((generation, rotates_at)) });
                    }
                    gateways.push((index, Arc::new(g)));
                }
            }
        }
        if wanted.is_empty() {
            return Err(Error::BadInput("an update needs at least one exit (a pool is never empty)".into()));
        }
        let mut listed: HashSet<String> = HashSet::with_capacity(wanted.len());
        if let Some(w) = wanted.iter().find(|w| !listed.insert(w.exit.id.clone())) {
            return Err(Error::DuplicateExit(w.exit.id.clone()));
        }
        let new_gateway = |index: usize| gateways.iter().find(|(i, _)| *i == index).map(|(_, g)| g);
        let (mut added, mut changed, mut unchanged) = (Vec::new(), Vec::new(), 0);
        for w in wanted {
            let Ok(h) = self.handle(&w.exit.id) else {
                added.push(w);
                continue;
            };
            let slot = &self.exits[h as usize];
            let (cur, new) = (&slot.exit, &w.exit);
            let same = match (cur.gateway, w.exit.gateway) {
                // Against the capacity last listed: one measured since is kept.
                (None, None) => {
                    (&cur.id, &cur.proxy, cur.ip, &cur.tags, slot.listed_capacity) == (&new.id, &new.proxy, new.ip, &new.tags, new.capacity)
                }
                // A slot of the same gateway, unchanged, in the same place: its token moves on
                // its own schedule.
                (Some(a), Some(b)) => a == b && new_gateway(b.gateway as usize).is_some_and(|g| **g == *self.gateways[a.gateway as usize]),
                _ => false,
            };
            if same {
                unchanged += 1;
            } else {
                changed.push((h, w));
            }
        }
        let mut removed: Vec<u32> =
            self.by_id.iter().filter(|&(id, &h)| !self.exits[h as usize].removed && !listed.contains(id)).map(|(_, &h)| h).collect();
        removed.sort_unstable();
        let plan = Plan { gateways, added, changed, removed, unchanged };
        self.check_update_room(&plan)?;
        Ok(plan)
    }

    /// Refuses, before anything changes, an update after which some view's ring would hold
    /// more points than a ring may: counted per view with every removal, change and addition.
    fn check_update_room(&self, plan: &Plan) -> Result<()> {
        for view in &self.views {
            let replicas = view.ring.replicas();
            let mut exits = view.ring.len() as i64;
            let mut units = (view.ring.point_count() / replicas as usize) as i64;
            let leaves = |h: u32| view.position(h).is_some();
            let units_of = |c: u32| i64::from(c.max(1));
            for &h in &plan.removed {
                if leaves(h) {
                    exits -= 1;
                    units -= units_of(self.exits[h as usize].exit.capacity);
                }
            }
            for (h, w) in &plan.changed {
                if leaves(*h) {
                    exits -= 1;
                    units -= units_of(self.exits[*h as usize].exit.capacity);
                }
                if !self.exits[*h as usize].benched && view.matches(&w.exit) {
                    exits += 1;
                    units += units_of(w.exit.capacity);
                }
            }
            for w in plan.added.iter().filter(|w| view.matches(&w.exit)) {
                exits += 1;
                units += units_of(w.exit.capacity);
            }
            crate::ring::check_size(replicas, exits.max(0) as usize, units.max(0) as u64)?;
        }
        Ok(())
    }

    /// Applies a checked plan; what could fail was checked by [`State::plan_update`].
    fn apply_update(&mut self, plan: Plan, now: f64) -> Result<Update> {
        let mut done = Update { unchanged: plan.unchanged, ..Update::default() };
        let mut joined_gateways: HashMap<usize, Vec<u32>> = HashMap::new();
        for (index, g) in plan.gateways {
            if index < self.gateways.len() {
                self.gateways[index] = g;
            } else {
                self.gateways.push(g);
                joined_gateways.insert(index, Vec::new());
            }
        }
        // Removals first: their points leave the rings before any new ones arrive.
        for h in plan.removed {
            done.removed.push(self.exits[h as usize].exit.id.clone());
            self.remove_slot(h, now)?;
        }
        // Shrinking exits first: then no ring is fuller on the way than at the end, which is
        // what `check_update_room` checked.
        let mut changed = plan.changed;
        changed.sort_by_key(|(h, w)| i64::from(w.exit.capacity) - i64::from(self.exits[*h as usize].exit.capacity));
        for (h, w) in changed {
            done.changed.push(w.exit.id.clone());
            let in_service = !self.exits[h as usize].benched;
            if in_service {
                self.leave_views(h, now)?;
            }
            let link = w.exit.gateway;
            let group = link.map(|link| self.group_of_gateway(link, &joined_gateways));
            self.exits[h as usize].replace(w.exit, w.token);
            self.board.set_group(h, group.unwrap_or(0));
            // A slot of a gateway joining now is grouped with its other slots below.
            if let Some(joining) = link.and_then(|l| joined_gateways.get_mut(&(l.gateway as usize))) {
                joining.push(h);
            }
            if in_service {
                self.join_views(h, now)?;
            }
        }
        for w in plan.added {
            done.added.push(w.exit.id.clone());
            let link = w.exit.gateway;
            let h = self.add_slot(w.exit, w.token, now);
            match link {
                Some(link) if joined_gateways.contains_key(&(link.gateway as usize)) => {
                    joined_gateways.get_mut(&(link.gateway as usize)).expect("checked").push(h)
                }
                Some(link) => {
                    let group = self.gateway_books[link.gateway as usize].group;
                    self.board.set_group(h, group);
                }
                None => {}
            }
            self.join_views(h, now)?;
        }
        let mut joined: Vec<_> = joined_gateways.into_iter().collect();
        joined.sort_by_key(|(i, _)| *i);
        for (index, handles) in joined {
            self.gateway_joined(index as u32, &handles, now);
        }
        done.added.sort();
        done.removed.sort();
        done.changed.sort();
        Ok(done)
    }

    /// The health group a slot of gateway `link.gateway` belongs to: its gateway's, or 0 for a
    /// gateway joining in this update (grouped once all its slots are in).
    fn group_of_gateway(&self, link: GatewayLink, joining: &HashMap<usize, Vec<u32>>) -> u32 {
        if joining.contains_key(&(link.gateway as usize)) {
            return 0;
        }
        self.gateway_books[link.gateway as usize].group
    }

    /// Exit `exit` joins: into the slot of a removed exit of the same id (its history and
    /// pairings carry over; its health starts afresh), else a new slot. Not yet in any view.
    pub(super) fn add_slot(&mut self, exit: Exit, token: Option<(u64, f64)>, now: f64) -> u32 {
        match self.by_id.get(&exit.id).copied() {
            Some(h) => {
                let slot = &mut self.exits[h as usize];
                slot.replace(exit, token);
                slot.removed = false;
                slot.benched = false;
                self.board.forget(h, now);
                h
            }
            None => {
                let h = self.exits.len() as u32;
                self.board.ensure_exit(h, now);
                self.by_id.insert(exit.id.clone(), h);
                let slot = match token {
                    Some((generation, rotates_at)) => ExitSlot::for_gateway(exit, generation, rotates_at),
                    None => ExitSlot::new(exit),
                };
                self.exits.push(slot);
                h
            }
        }
    }

    /// Takes exit `h` out for good: no new lease or session; live leases may still be
    /// released (and count), and its sessions get `SessionExitLost` at their next lease.
    pub(super) fn remove_slot(&mut self, h: u32, now: f64) -> Result<()> {
        if !self.exits[h as usize].benched {
            self.leave_views(h, now)?;
        }
        self.board.forget(h, now);
        let slot = &mut self.exits[h as usize];
        slot.removed = true;
        slot.benched = false;
        Ok(())
    }
}

impl Pool {
    /// A watched list or config file changed but could not be read: says so and keeps the
    /// list as it is. `why` is an error message already (credentials masked by its maker).
    pub fn reload_failed(&self, source: &str, why: &str) {
        let now = self.clock.now();
        let msg = format!("{source} changed but was not applied, the exits stay as they were: {why}");
        self.state.lock().board.events.push(now, EventKind::ExitsReloadFailed, None, None, msg);
    }
}
