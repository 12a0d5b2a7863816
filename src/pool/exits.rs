//! The pool's exits one by one: adding, removing, benching and resizing them, probing them,
//! and their health by name.

use super::snapshot::shown_state;
use super::Pool;
use crate::error::{Error, Result};
use crate::events::EventKind;
use crate::exit::Exit;
use crate::health::{Admit, Probe, State as Health};
use rand::RngExt;
use std::sync::Arc;

impl Pool {
    /// Stops new sessions on an exit; live ones drain. Returns their keys, which move when
    /// their sessions end.
    pub fn bench(&self, exit_id: &str) -> Result<Vec<String>> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        let keys = st.sessions.keys_on(h, now);
        if !st.exits[h as usize].benched {
            st.exits[h as usize].benched = true;
            st.leave_views(h, now)?;
            st.board.events.push(
                now,
                EventKind::Benched,
                Some(h),
                None,
                format!("benched: no new sessions; {} live sessions drain", keys.len()),
            );
        }
        Ok(keys)
    }

    pub fn unbench(&self, exit_id: &str) -> Result<()> {
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        if st.exits[h as usize].benched {
            st.check_room(&st.exits[h as usize].exit)?;
            st.exits[h as usize].benched = false;
            st.join_views(h, self.clock.now())?;
            let now = self.clock.now();
            st.board.events.push(now, EventKind::Unbenched, Some(h), None, "back in the ring".to_owned());
        }
        Ok(())
    }

    pub fn add(&self, exit: Exit) -> Result<()> {
        crate::exit::validate_capacity(exit.capacity.into())?;
        // An exit taken from a gateway elsewhere is a plain exit here: its token stays.
        let exit = Exit { gateway: None, ..exit };
        let now = self.clock.now();
        let mut st = self.state.lock();
        if st.handle(&exit.id).is_ok() {
            return Err(Error::DuplicateExit(exit.id));
        }
        st.check_room(&exit)?;
        // The same id as a removed exit: the same slot, so its history and pairings carry
        // over; its health starts afresh.
        let h = st.add_slot(exit, None, now);
        st.join_views(h, now)
    }

    /// Takes an exit out for good. Live sessions on it get `SessionExitLost` at their next
    /// lease; live leases may still be released.
    pub fn remove(&self, exit_id: &str) -> Result<Arc<Exit>> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        st.remove_slot(h, now)?;
        Ok(st.exits[h as usize].exit.clone())
    }

    /// Changes one exit's weight; only its own arcs move.
    pub fn set_capacity(&self, exit_id: &str, capacity: u32) -> Result<()> {
        let capacity = crate::exit::validate_capacity(capacity.into())?;
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        let in_service = !st.exits[h as usize].benched;
        let resized = Exit { capacity, ..(*st.exits[h as usize].exit).clone() };
        if in_service {
            st.check_room(&resized)?;
            st.leave_views(h, self.clock.now())?;
        }
        st.exits[h as usize].set_exit(resized);
        if in_service {
            st.join_views(h, self.clock.now())?;
        }
        Ok(())
    }

    /// Adds a gateway's slots as exits, all or none: refused if any slot's id is taken.
    pub fn add_gateway(&self, gateway: crate::gateway::Gateway) -> Result<()> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        for slot in 0..gateway.slots {
            let id = gateway.slot_id(slot);
            if st.handle(&id).is_ok() {
                return Err(Error::DuplicateExit(id));
            }
        }
        // Room for all the slots' points at once: their ids are new, so a probe id stands in.
        let index = st.gateways.len() as u32;
        let whole = Exit { capacity: gateway.capacity.saturating_mul(gateway.slots), ..gateway.slot_exit(0, 0, index) };
        st.check_room(&whole)?;
        let unix = now + st.unix_offset;
        let mut handles = Vec::with_capacity(gateway.slots as usize);
        for slot in 0..gateway.slots {
            let generation = gateway.generation(slot, unix);
            let rotates_at = gateway.rotates_at(slot, generation) - st.unix_offset;
            // A removed exit's id: its slot, history and pairings carry over, health afresh.
            let h = st.add_slot(gateway.slot_exit(slot, generation, index), Some((generation, rotates_at)), now);
            handles.push(h);
        }
        st.gateways.push(Arc::new(gateway));
        st.gateway_joined(index, &handles, now);
        handles.iter().try_for_each(|&h| st.join_views(h, now))
    }

    pub fn exit(&self, exit_id: &str) -> Result<Arc<Exit>> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        st.refresh(h, now);
        Ok(st.exits[h as usize].exit.clone())
    }

    /// Exits of a view that are in service, in handle order, gateway slots with their
    /// current token.
    pub fn members(&self, view: u32) -> Vec<Arc<Exit>> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let members = st.views[view as usize].members.clone();
        members
            .iter()
            .map(|&h| {
                st.refresh(h, now);
                st.exits[h as usize].exit.clone()
            })
            .collect()
    }

    /// A gateway slot's token generation now (`None` for a plain exit).
    pub fn generation(&self, exit_id: &str) -> Result<Option<u64>> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        st.refresh(h, now);
        let slot = &st.exits[h as usize];
        Ok(slot.exit.gateway.map(|_| slot.generation))
    }

    /// The exits a probe loop should check now: quarantined ones whose backoff is over (now
    /// probing, with no trial out), dead ones, and exits in service idle for `idle` seconds.
    pub fn probe_due(&self, idle: f64) -> Vec<Arc<Exit>> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        st.board.poll(now);
        let due = Self::due(&st, idle, now);
        // A probe goes through a slot's current token, whose IP is the one to learn.
        due.iter()
            .map(|&h| {
                st.refresh(h, now);
                st.exits[h as usize].exit.clone()
            })
            .collect()
    }

    fn due(st: &super::State, idle: f64, now: f64) -> Vec<u32> {
        // A gateway that is out is judged as a whole: none of its slots is due while it waits
        // out its backoff, and one slot (the first) carries its trial, not all of them.
        let mut trial_taken = vec![false; st.board.group_count() as usize + 1];
        st.views[0]
            .members
            .iter()
            .filter(|&&h| {
                let g = st.board.group_of(h);
                if let Some(group) = st.board.group(g).filter(|group| group.state() != Health::Healthy) {
                    let first = !std::mem::replace(&mut trial_taken[g as usize], true);
                    return group.state() == Health::Probing && !group.trial_out() && first;
                }
                let b = st.board.tunnel_breaker(h);
                match b.state() {
                    Health::Probing => b.trials_out() == 0,
                    Health::Dead => true,
                    Health::Quarantined => false,
                    Health::Healthy | Health::Degraded => now - st.exits[h as usize].last_lease >= idle,
                }
            })
            .copied()
            .collect()
    }

    /// Feeds an active probe's verdict into the exit's tunnel health. `observed_ip` that
    /// differs from the exit's `ip` means its token now lands elsewhere: that is an event and
    /// a failure, since an account leased there would present a new address. A gateway slot
    /// has no fixed `ip`: the first IP seen through its current token is learned, a new one
    /// after a rotation is expected, and a different one within the same token is the
    /// provider breaking stickiness (an event, a failed probe, and the new IP learned, so
    /// one break counts once). True when the address was not the one expected.
    pub fn record_probe(&self, exit_id: &str, ok: bool, observed_ip: Option<std::net::IpAddr>, detail: &str) -> Result<bool> {
        self.record_probe_status(exit_id, ok, observed_ip, None, detail)
    }

    /// [`Pool::record_probe`] with the status the proxy answered a failed probe with: a 407
    /// is the proxy refusing its credentials, which for a gateway's slot takes the gateway
    /// out (its credentials are configuration, not a bad slot) and for an exit of its own is
    /// a failed probe like any other.
    pub fn record_probe_status(
        &self,
        exit_id: &str,
        ok: bool,
        observed_ip: Option<std::net::IpAddr>,
        status: Option<u16>,
        detail: &str,
    ) -> Result<bool> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        st.refresh(h, now);
        let slot = &mut st.exits[h as usize];
        let mut broken = false;
        let expected = if slot.exit.gateway.is_some() {
            let learned = slot.learned_ip;
            if let Some(o) = observed_ip {
                broken = learned.is_some_and(|l| l != o);
                slot.learned_ip = Some(o);
            }
            if broken {
                let msg = format!(
                    "probe saw {} where {} was seen before through the same token (generation {}): \
                     the provider did not hold this session's exit",
                    observed_ip.map(|i| i.to_string()).unwrap_or_default(),
                    learned.map(|i| i.to_string()).unwrap_or_default(),
                    slot.generation
                );
                st.board.events.push(now, EventKind::StickyBroken, Some(h), None, msg);
            }
            None
        } else {
            slot.exit.ip
        };
        let drifted = matches!((expected, observed_ip), (Some(e), Some(o)) if e != o);
        if drifted {
            st.board.events.push(
                now,
                EventKind::Drifted,
                Some(h),
                None,
                format!(
                    "probe saw {} where {} was expected: the exit's token lands elsewhere now",
                    observed_ip.map(|i| i.to_string()).unwrap_or_default(),
                    expected.map(|i| i.to_string()).unwrap_or_default()
                ),
            );
        }
        if !ok && !detail.is_empty() {
            st.board.events.push(now, EventKind::ProbeFailed, Some(h), None, format!("probe failed: {detail}"));
        }
        let in_service = st.views[0].members.len() as u32;
        let jitter = st.rng.random::<f64>();
        let verdict = match (ok, drifted) {
            (_, true) => Probe::Drifted,
            (true, false) if !broken => Probe::Ok,
            (false, false) if status == Some(407) => Probe::CredentialsRejected,
            _ => Probe::Failed,
        };
        st.board.probe(h, verdict, in_service, now, jitter);
        drop(st);
        if let Some(fl) = &self.fleet {
            self.publish_verdicts(fl, now);
        }
        Ok(drifted || broken)
    }

    /// An exit's health: for a site, the worse of its tunnel's state and its state there.
    pub fn state(&self, exit_id: &str, site: Option<&str>) -> Result<Health> {
        if let Some(fl) = &self.fleet {
            self.sync_health(fl);
        }
        let now = self.clock.now();
        let mut st = self.state.lock();
        st.board.poll(now);
        let h = st.handle(exit_id)?;
        // Without a site: the state leases without a site meet (site 0), which is what
        // decides whether such a lease may use the exit.
        let site = match site {
            None => Some(0),
            Some(s) => st.sites.get(s).copied(),
        };
        Ok(st.board.state(h, site))
    }

    /// [`Pool::state`] by name, with "cooling" where a 429 has the exit resting for that site
    /// (or, without a site, for leases without one) while its breakers would still admit it:
    /// a cooling exit takes no lease for the site until its cooling ends.
    pub fn state_name(&self, exit_id: &str, site: Option<&str>) -> Result<&'static str> {
        let health = self.state(exit_id, site)?;
        let now = self.clock.now();
        let st = self.state.lock();
        let h = st.handle(exit_id)?;
        let site = match site {
            None => Some(0),
            Some(s) => st.sites.get(s).copied(),
        };
        let cooling = site.is_some_and(|s| matches!(st.board.admits(h, s, now), Admit::Cooling(_)));
        Ok(shown_state(health, cooling))
    }

    /// Puts an exit back in service everywhere (healthy), whatever its state; a gateway
    /// slot's gateway too.
    pub fn revive(&self, exit_id: &str) -> Result<()> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let h = st.handle(exit_id)?;
        st.board.revive(h, now);
        // A gateway slot that works again says its gateway does too.
        let group = st.board.group_of(h);
        if group != 0 {
            st.board.revive_group(group, now);
        }
        drop(st);
        if let Some(fl) = &self.fleet {
            self.publish_verdicts(fl, now);
        }
        Ok(())
    }
}
