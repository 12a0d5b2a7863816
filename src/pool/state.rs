//! The inner decision state behind the pool's mutex: exits, views, sessions, leases and
//! health, and the decisions made over them (which exit, or why none).

use super::calibrate::identity_of;
use super::grant::{INCIDENT, LRU_COOLDOWN, PACED_ALL, PACED_ONE, RATE_LIMITED_ALL, RATE_LIMITED_ONE, TOKEN_ROTATED};
use super::members::{Avoiding, ViewMembers};
use super::{Choice, Config, Counts, Grant, Refusal};
use crate::error::{Error, Result};
use crate::events::EventKind;
use crate::exit::Exit;
use crate::gateway::Gateway;
use crate::health::{Admit, HealthBoard, State as Health};
use crate::lease::{LeaseRec, Leases};
use crate::metrics::{Tally, Waits};
use crate::pacing::Pacer;
use crate::ring::{Ring, DEFAULT_SALT};
use crate::select::{self, Context, NoPick, Selector, Strategy};
use crate::session::Sessions;
use crate::warmup::Pairings;
use rand::rngs::SmallRng;
use std::collections::HashMap;
use std::sync::Arc;

// Laid out by hand, the fields a lease reads and writes first, in the slot's first cache line
// (aligned to it): at a random exit of a large pool the slot is a cache miss, and its 460
// bytes in compiler order put `exit`, `active` and the lease count three lines apart, so
// prefetching the slot's start fetched none of them.
#[repr(C, align(64))]
pub(super) struct ExitSlot {
    pub(super) exit: Arc<Exit>,
    pub(super) active: u32,
    /// `exit.capacity`, here beside `active`: a keyless pick reads both for each exit it
    /// weighs, and following the `Arc` was one more cache miss per exit in a large pool.
    /// Set only with the exit (`set_exit`).
    capacity: u32,
    /// When the exit last took a lease (pool clock), for choosing idle exits to probe.
    pub(super) last_lease: f64,
    /// Pool-clock time the exit's token rotates: `inf` for a plain exit, so the check a lease
    /// makes ([`State::refresh`]) is one comparison that never passes.
    pub(super) rotates_at: f64,
    /// A gateway slot's token generation (0 for a plain exit).
    pub(super) generation: u64,
    pub(super) benched: bool,
    pub(super) removed: bool,
    /// Its lease count first (`Tally` is laid out so), in the same line as the above.
    pub(super) tally: Tally,
    /// Identity (key hash) -> (last served, burned by a block or captcha), when calibrating.
    pub(super) identities: HashMap<u64, (f64, bool)>,
    /// The IP a probe saw through the current token: the one later probes expect.
    pub(super) learned_ip: Option<std::net::IpAddr>,
    /// The capacity the exit's list gave it: `Pool::update` compares a new list with this, so
    /// that a capacity measured since (`recalibrate`) is state a reload keeps, not a change.
    pub(super) listed_capacity: u32,
}

// The lease count shares the first line with the fields above it.
const _: () = assert!(std::mem::offset_of!(ExitSlot, tally) + 8 <= 64);

impl ExitSlot {
    /// A slot for an exit joining the pool: idle, in service, nothing measured yet.
    pub(super) fn new(exit: Exit) -> ExitSlot {
        ExitSlot {
            capacity: exit.capacity,
            listed_capacity: exit.capacity,
            exit: Arc::new(exit),
            identities: HashMap::new(),
            active: 0,
            last_lease: f64::NEG_INFINITY,
            benched: false,
            removed: false,
            tally: Tally::default(),
            rotates_at: f64::INFINITY,
            generation: 0,
            learned_ip: None,
        }
    }

    /// A slot for a gateway slot's exit in generation `generation`, due to rotate at `rotates_at`.
    pub(super) fn for_gateway(exit: Exit, generation: u64, rotates_at: f64) -> ExitSlot {
        ExitSlot { generation, rotates_at, ..ExitSlot::new(exit) }
    }

    /// Puts `exit` in this slot: a plain exit (`token` None: no token) or a gateway slot's
    /// exit in token generation `token.0`, rotating at `token.1` (pool clock). An IP learned
    /// through the old token or proxy is forgotten.
    pub(super) fn replace(&mut self, exit: Exit, token: Option<(u64, f64)>) {
        let (generation, rotates_at) = token.unwrap_or((0, f64::INFINITY));
        if generation != self.generation || exit.proxy != self.exit.proxy {
            self.learned_ip = None;
        }
        self.listed_capacity = exit.capacity;
        self.set_exit(exit);
        self.rotates_at = rotates_at;
        self.generation = generation;
    }

    pub(super) fn set_exit(&mut self, exit: Exit) {
        self.capacity = exit.capacity;
        self.exit = Arc::new(exit);
    }

    #[inline]
    pub(super) fn capacity(&self) -> u32 {
        self.capacity
    }
}

pub(super) struct View {
    pub(super) filter: Vec<(String, String)>,
    /// Handles of the matching exits in service, ascending.
    pub(super) members: Vec<u32>,
    /// Per exit handle: its position in `members` (`u32::MAX` if not a member), so that a
    /// lease's re-rank finds its exit without a search over a large pool.
    positions: Vec<u32>,
    pub(super) ring: Ring,
    pub(super) weight_total: u64,
    pub(super) selector: Selector,
}

impl View {
    pub(super) fn matches(&self, exit: &Exit) -> bool {
        self.filter.iter().all(|(k, v)| exit.tag(k) == Some(v.as_str()))
    }

    /// Exit `h`'s position among the members, if it is one.
    #[inline]
    pub(super) fn position(&self, h: u32) -> Option<usize> {
        self.positions.get(h as usize).filter(|&&m| m != u32::MAX).map(|&m| m as usize)
    }

    /// Recomputes the positions after the member list changed (O(n), as the change itself).
    fn place(&mut self) {
        self.positions.clear();
        if let Some(&last) = self.members.last() {
            self.positions.resize(last as usize + 1, u32::MAX);
        }
        for (m, &h) in self.members.iter().enumerate() {
            self.positions[h as usize] = m as u32;
        }
    }
}

/// Exits whose active count moved in a way the selection trees rank by (any move under
/// `least_conn`; leaving `max_leases` under every strategy) since the last keyless pick. The
/// trees re-rank them when a pick next looks ([`State::rerank_moved`]): a keyed lease, which
/// no tree decides, then touches no tree, where walking one cost a few cache misses a lease
/// in a pool of 100,000 exits, and an exit leased and released between two picks is
/// re-ranked once.
#[derive(Default)]
pub(super) struct Moved {
    list: Vec<u32>,
    listed: Vec<bool>,
}

/// Exit `h`'s active leases moved from `was` to what its slot holds now: the board's record
/// of the exit takes the count (keyless picks read it there). The test is inlined into every
/// acquire and release, the listing (`least_conn`, or an exit leaving `max_leases`) is a call.
#[inline(always)]
pub(super) fn active_changed(moved: &mut Moved, board: &mut HealthBoard, cfg: &Config, slot: &ExitSlot, h: u32, was: u32) {
    board.set_active(h, slot.active);
    let max = cfg.max_leases.unwrap_or(u32::MAX);
    let was_full = was >= max && slot.active < max;
    if cfg.strategy != Strategy::LeastConn && !was_full {
        return;
    }
    moved.list_once(h);
}

impl Moved {
    #[inline(never)]
    fn list_once(&mut self, h: u32) {
        let i = h as usize;
        if self.listed.len() <= i {
            self.listed.resize(i + 1, false);
        }
        if !self.listed[i] {
            self.listed[i] = true;
            self.list.push(h);
        }
    }
}

pub(super) struct State {
    pub(super) cfg: Config,
    pub(super) exits: Vec<ExitSlot>,
    pub(super) by_id: HashMap<String, u32>,
    pub(super) views: Vec<View>,
    /// Exits the views' trees have yet to re-rank (see [`Moved`]).
    pub(super) moved: Moved,
    /// The expiry the session a keyed lease found had before it was renewed, for a refusal
    /// that follows to give back.
    pub(super) renewed_from: f64,
    pub(super) view_ids: HashMap<Vec<(String, String)>, u32>,
    pub(super) sessions: Sessions,
    pub(super) leases: Leases,
    pub(super) pairings: Pairings,
    /// Site name -> id; 0 is "no site".
    pub(super) sites: HashMap<Box<str>, u32>,
    pub(super) site_names: Vec<Box<str>>,
    pub(super) board: HealthBoard,
    /// Each paced site's (exit, site) request budgets (see `crate::pacing`); `None` without
    /// `pacing`, so that an unpaced pool's lease reads one word for it.
    pub(super) pacer: Option<Box<Pacer>>,
    /// Per site, per exit handle: when it last served that site (for `lru`).
    pub(super) last_used: Vec<Vec<f64>>,
    pub(super) rng: SmallRng,
    pub(super) counts: Counts,
    pub(super) waiters: u32,
    /// Per site, per exit handle: that pair's counts and latencies.
    pub(super) site_tallies: Vec<Vec<Tally>>,
    pub(super) waits: Waits,
    pub(super) rate_prev: (f64, u64),
    pub(super) rate_mark: (f64, u64),
    /// The gateways whose slots are exits here, by the index their exits' links carry.
    pub(super) gateways: Vec<Arc<Gateway>>,
    /// Per gateway (indexed as `gateways`): its group on the health board and its rotations.
    pub(super) gateway_books: Vec<GatewayBook>,
    /// Unix time = pool clock + this (the clock's own offset, read at birth).
    pub(super) unix_offset: f64,
}

/// What the pool keeps about one gateway beside its slots, for snapshots and metrics.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct GatewayBook {
    /// Its exit group on the health board (its breaker).
    pub(super) group: u32,
    /// Token rotations of its slots so far.
    pub(super) rotations: u64,
}

impl State {
    /// Moves exit `h` to its current token if its token's time is up. One comparison for a
    /// plain exit (whose `rotates_at` is infinite) or a slot whose token is still current.
    #[inline]
    pub(super) fn refresh(&mut self, h: u32, now: f64) {
        if now >= self.exits[h as usize].rotates_at {
            self.rotate(h, now);
        }
    }

    /// Replaces a gateway slot's exit by one carrying the token of its generation now (a new
    /// `Arc<Exit>`; leases out keep the old one), forgets the IP learned for the old token,
    /// and says so. The event names no token: in some formats the token is in the password.
    #[cold]
    #[inline(never)]
    fn rotate(&mut self, h: u32, now: f64) {
        let slot = &mut self.exits[h as usize];
        let Some(link) = slot.exit.gateway else {
            slot.rotates_at = f64::INFINITY;
            return;
        };
        let gw = &self.gateways[link.gateway as usize];
        let unix = now + self.unix_offset;
        let (old, generation) = (slot.generation, gw.generation(link.slot, unix));
        let mut exit = gw.slot_exit(link.slot, generation, link.gateway);
        // What the pool changed about the exit since it was made (its measured capacity) stays.
        exit.capacity = slot.exit.capacity;
        slot.set_exit(exit);
        slot.generation = generation;
        slot.rotates_at = gw.rotates_at(link.slot, generation) - self.unix_offset;
        slot.learned_ip = None;
        self.gateway_books[link.gateway as usize].rotations += 1;
        let msg = format!(
            "gateway {:?} slot {}: token generation {old} -> {generation} (lifetime {} s less margin {} s); \
             sessions bound to the old token end at their next lease; the next rotation is in {:.0} s",
            gw.id,
            link.slot,
            gw.lifetime.unwrap_or(f64::INFINITY),
            gw.margin,
            slot.rotates_at - now
        );
        self.board.events.push(now, EventKind::TokenRotated, Some(h), None, msg);
    }

    /// Gateway `gateway`'s slots (handles `slots`) joined the pool: the one place they are
    /// grouped, so that health judges the gateway as a whole (one breaker takes all its slots
    /// out, one trial or probe brings them back).
    pub(super) fn gateway_joined(&mut self, gateway: u32, slots: &[u32], now: f64) {
        let group = self.board.add_group(&self.gateways[gateway as usize].id, now);
        if self.gateway_books.len() <= gateway as usize {
            self.gateway_books.resize(gateway as usize + 1, GatewayBook::default());
        }
        self.gateway_books[gateway as usize].group = group;
        for &h in slots {
            self.board.set_group(h, group);
        }
    }

    pub(super) fn site_tally(&mut self, site: u32, h: u32) -> &mut Tally {
        if self.site_tallies.len() <= site as usize {
            self.site_tallies.resize_with(site as usize + 1, Vec::new);
        }
        let row = &mut self.site_tallies[site as usize];
        if row.len() <= h as usize {
            row.resize_with(h as usize + 1, Tally::default);
        }
        &mut row[h as usize]
    }

    pub(super) fn handle(&self, exit_id: &str) -> Result<u32> {
        match self.by_id.get(exit_id) {
            Some(&h) if !self.exits[h as usize].removed => Ok(h),
            _ => Err(Error::UnknownExit(exit_id.to_owned())),
        }
    }

    pub(super) fn view(&mut self, filter: Vec<(String, String)>) -> Result<u32> {
        if let Some(&v) = self.view_ids.get(&filter) {
            return Ok(v);
        }
        let mut view = View {
            filter: filter.clone(),
            members: Vec::new(),
            positions: Vec::new(),
            ring: Ring::new(self.cfg.replicas, DEFAULT_SALT)?,
            weight_total: 0,
            selector: Selector::default(),
        };
        let members: Vec<u32> = (0..self.exits.len() as u32)
            .filter(|&h| {
                let s = &self.exits[h as usize];
                !s.removed && !s.benched && view.matches(&s.exit)
            })
            .collect();
        view.ring = Ring::build(
            self.cfg.replicas,
            DEFAULT_SALT,
            members.iter().map(|&h| {
                let e = &self.exits[h as usize].exit;
                (e.id.as_str(), e.capacity, h)
            }),
        )?;
        view.weight_total = members.iter().map(|&h| self.exits[h as usize].exit.capacity.max(1) as u64).sum();
        for &h in &members {
            self.sync_record(h);
        }
        view.members = members;
        view.place();
        let id = self.views.len() as u32;
        self.views.push(view);
        self.view_ids.insert(filter, id);
        Ok(id)
    }

    /// Refuses, before any view changes, an exit whose points would overfill a view's ring.
    pub(super) fn check_room(&self, exit: &Exit) -> Result<()> {
        self.views.iter().filter(|v| v.matches(exit)).try_for_each(|v| v.ring.check_room(&exit.id, exit.capacity))
    }

    /// Exit `h`'s record on the board (what keyless picks read) takes its slot's capacity and
    /// active leases: as it becomes a member of a view, which any new capacity takes it through.
    fn sync_record(&mut self, h: u32) {
        let slot = &self.exits[h as usize];
        self.board.set_capacity(h, slot.capacity());
        self.board.set_active(h, slot.active);
    }

    pub(super) fn join_views(&mut self, h: u32, now: f64) -> Result<()> {
        let exit = self.exits[h as usize].exit.clone();
        self.check_room(&exit)?;
        self.sync_record(h);
        for view in self.views.iter_mut().filter(|v| v.matches(&exit)) {
            if let Err(pos) = view.members.binary_search(&h) {
                view.ring.add(&exit.id, exit.capacity, h)?;
                view.members.insert(pos, h);
                view.place();
                view.weight_total += exit.capacity.max(1) as u64;
                view.selector.reset();
            }
        }
        self.board.set_members(self.views[0].members.len() as u32, now);
        Ok(())
    }

    pub(super) fn leave_views(&mut self, h: u32, now: f64) -> Result<()> {
        let exit = self.exits[h as usize].exit.clone();
        for view in self.views.iter_mut() {
            if let Ok(pos) = view.members.binary_search(&h) {
                view.ring.remove(&exit.id)?;
                view.members.remove(pos);
                view.place();
                view.weight_total -= exit.capacity.max(1) as u64;
                view.selector.reset();
            }
        }
        self.board.set_members(self.views[0].members.len() as u32, now);
        Ok(())
    }

    /// Expires overdue leases; true if any slot was freed.
    #[inline]
    pub(super) fn expire(&mut self, now: f64) -> bool {
        let mut freed = false;
        let exits = &mut self.exits;
        let counts = &mut self.counts;
        let board = &mut self.board;
        let lease_ttl = self.cfg.lease_ttl;
        let (moved, cfg) = (&mut self.moved, &self.cfg);
        self.leases.expire_due(now, |_, rec: LeaseRec| {
            exits[rec.exit as usize].active -= 1;
            active_changed(moved, board, cfg, &exits[rec.exit as usize], rec.exit, exits[rec.exit as usize].active + 1);
            counts.expired += 1;
            board.abandon(rec.exit, rec.site, rec.trial);
            board.events.push(
                now,
                EventKind::LeaseExpired,
                Some(rec.exit),
                (rec.site != 0).then_some(rec.site),
                format!("a lease taken at {:.3} was not released within lease_ttl {lease_ttl} s; its slot is free again", rec.started),
            );
            freed = true;
        });
        freed
    }

    /// A lease of exit `h` ended (released or expired): see `active_changed`. Inlined: out of
    /// line, its call cost as much as its two comparisons.
    #[inline(always)]
    pub(super) fn lease_ended(&mut self, h: u32) {
        let slot = &self.exits[h as usize];
        active_changed(&mut self.moved, &mut self.board, &self.cfg, slot, h, slot.active + 1);
    }

    /// Starts loading what a lease of exit `h` for `site` reads and writes, once its exit is
    /// known and before the work that leads there: at a random exit of a large pool these are
    /// cache misses in several arrays, which then overlap instead of following one another.
    #[inline]
    pub(super) fn prefetch(&self, h: u32, site: u32) {
        let slot = &self.exits[h as usize];
        crate::prefetch::prefetch(slot);
        // The tally's outcome counts and recent bits, a line further on.
        crate::prefetch::prefetch(&slot.tally.outcomes);
        self.board.prefetch_report(h, site);
        if let Some(t) = self.site_tallies.get(site as usize).and_then(|t| t.get(h as usize)) {
            crate::prefetch::prefetch(t);
        }
        // Last: it reads the exit's record (a pick has it; a keyed lease asked for it just
        // above), where a keyed lease may wait for it while the others are on their way.
        self.board.prefetch_home(h);
    }

    /// Re-ranks, in every view, the exits whose active count moved since the last pick: their
    /// load (`least_conn`), and back on if they were parked at `max_leases` and are below it.
    #[inline]
    pub(super) fn rerank_moved(&mut self) {
        let max = self.cfg.max_leases.unwrap_or(u32::MAX);
        let strategy = self.cfg.strategy;
        while let Some(h) = self.moved.list.pop() {
            self.moved.listed[h as usize] = false;
            let slot = &self.exits[h as usize];
            let load = select::load(slot.active, slot.capacity);
            let below = slot.active < max;
            for v in self.views.iter_mut() {
                if let Some(m) = v.position(h) {
                    v.selector.active_changed(strategy, m, load, below);
                }
            }
        }
    }

    /// A site's id, the site added on first sight. Inlined: nearly every lease has no site, and
    /// the call cost more than that answer.
    #[inline(always)]
    pub(super) fn site_id(&mut self, site: Option<&str>) -> u32 {
        match site {
            None => 0,
            Some(site) => self.named_site_id(site),
        }
    }

    fn named_site_id(&mut self, site: &str) -> u32 {
        if let Some(&id) = self.sites.get(site) {
            return id;
        }
        let id = self.sites.len() as u32 + 1;
        self.sites.insert(site.into(), id);
        self.site_names.push(site.into());
        self.last_used.push(Vec::new());
        self.board.ensure_site(id);
        if let Some(p) = &mut self.pacer {
            p.site_added(id, site);
        }
        id
    }

    /// The exit for a new session of `key` in `view`: its ring exit when that exit may serve
    /// the site (and is under its bound, with bounded loads), else the next one clockwise that
    /// is. The walk happens only when the ring exit is out, so the common case costs one lookup.
    pub(super) fn ring_pick(&self, view: u32, key: &str, site: u32, now: f64) -> std::result::Result<(u32, Choice), Refusal> {
        let v = &self.views[view as usize];
        let first = v.ring.assign(key).ok_or(Refusal::NoExits)?;
        let admitted = |h: u32| self.board.admits(h, site, now) == Admit::Yes;
        // Mirrokni, Thorup and Zadimoghaddam: no exit may carry more than c times its
        // capacity-weighted share of the live sessions, counting the one being placed.
        let total = self.sessions.total() as f64 + 1.0;
        let under = |h: u32| match self.cfg.balance_factor {
            None => true,
            Some(c) => {
                let w = self.exits[h as usize].exit.capacity.max(1) as f64;
                (self.sessions.load(h) as f64) < (c * total * w / v.weight_total.max(1) as f64).ceil()
            }
        };
        if admitted(first) && under(first) {
            return Ok((first, Choice::Ring));
        }
        let walked = if admitted(first) { Choice::Bounded } else { Choice::Next };
        if let Some(h) = v.ring.walk(key).find(|&h| admitted(h) && under(h)) {
            return Ok((h, walked));
        }
        if let Some(h) = v.ring.walk(key).find(|&h| admitted(h)) {
            return Ok((h, Choice::Next));
        }
        Err(self.why_none(view, site, &[], now))
    }

    /// Why no member of the view could take a lease: cooling (retry later), full (a release
    /// will free a slot, or a probing exit's trial will come back), or out of service.
    pub(super) fn why_none(&self, view: u32, site: u32, avoid: &[u32], now: f64) -> Refusal {
        if let Some(wait) = self.soonest_budget(view, site, avoid, now) {
            return Refusal::Cooling { wait, why: PACED_ALL };
        }
        if let Some(wait) = self.soonest_cool(view, site, now) {
            return Refusal::Cooling { wait, why: RATE_LIMITED_ALL };
        }
        let max_leases = self.cfg.max_leases.unwrap_or(u32::MAX);
        let waitable = self.views[view as usize]
            .members
            .iter()
            .filter(|h| !avoid.contains(h))
            .any(|&h| self.exits[h as usize].active >= max_leases || self.board.state(h, Some(site)) == Health::Probing);
        if waitable {
            Refusal::Full
        } else {
            Refusal::OutOfService
        }
    }

    /// With the site paced: the soonest a member that could serve but for its budget (not
    /// full, in service, not avoided) has budget again, if any is held back by pacing alone.
    fn soonest_budget(&self, view: u32, site: u32, avoid: &[u32], now: f64) -> Option<f64> {
        let row = self.pacer.as_ref()?.row(site)?;
        let max_leases = self.cfg.max_leases.unwrap_or(u32::MAX);
        self.views[view as usize]
            .members
            .iter()
            .filter(|&&h| {
                !avoid.contains(&h) && self.exits[h as usize].active < max_leases && self.board.admits(h, site, now) == Admit::Yes
            })
            .map(|&h| row.wait(h, now))
            .filter(|&w| w > 0.0)
            .fold(None, |m: Option<f64>, w| Some(m.map_or(w, |m| m.min(w))))
    }

    /// The soonest a cooling member of the view may serve the site again, if any is cooling.
    pub(super) fn soonest_cool(&self, view: u32, site: u32, now: f64) -> Option<f64> {
        self.views[view as usize]
            .members
            .iter()
            .filter_map(|&h| match self.board.admits(h, site, now) {
                Admit::Cooling(until) => Some(until - now),
                _ => None,
            })
            .fold(None, |m: Option<f64>, w| Some(m.map_or(w, |m| m.min(w))))
    }

    #[inline]
    pub(super) fn attempt(
        &mut self,
        view: u32,
        key: Option<&str>,
        site: Option<&str>,
        avoid: &[&str],
        now: f64,
    ) -> std::result::Result<Grant, Refusal> {
        let site = self.site_id(site);
        let avoid = self.avoided(key, avoid);
        let (h, choice) = self.decide(view, key, site, &avoid, now, true)?;
        if let Some(key) = key {
            if let Some(cfg) = &self.cfg.warmup {
                let admitted = self.pairings.admit(cfg, key, h, now);
                if let Ok(forgotten @ 1..) = admitted {
                    self.pairings_evicted(forgotten, now);
                }
                if let Err(wait) = admitted {
                    self.board.events.push(
                        now,
                        EventKind::WarmingUp,
                        Some(h),
                        (site != 0).then_some(site),
                        format!("a new pairing of key {key:?} must wait {wait:.3} s (warm-up ramp)"),
                    );
                    if choice == Choice::Session {
                        self.sessions.restore(key, self.renewed_from);
                    }
                    return Err(Refusal::WarmingUp { retry_after: wait, exit_id: self.exits[h as usize].exit.id.clone() });
                }
            }
            // A session found was renewed as it was found (`decide`).
            if choice != Choice::Session {
                self.bind_session(key, h, now + self.cfg.session_ttl, now);
            }
        }
        Ok(self.commit(h, choice, key, site, now, 0))
    }

    /// Where a lease would go now, deciding nothing yet: the key's session exit or its ring
    /// exit, or the strategy's pick for a keyless lease. Refuses for the reasons the caller
    /// can act on (a lost session, cooling, full, nothing in service). With a shared store the
    /// store knows the sessions (`local_sessions` false): another worker may have ended one.
    #[inline]
    pub(super) fn decide(
        &mut self,
        view: u32,
        key: Option<&str>,
        site: u32,
        avoid: &[u32],
        now: f64,
        local_sessions: bool,
    ) -> std::result::Result<(u32, Choice), Refusal> {
        let max_leases = self.cfg.max_leases.unwrap_or(u32::MAX);
        self.board.poll(now);
        self.board.gate_check(site, now).map_err(|wait| Refusal::Cooling { wait, why: INCIDENT })?;
        match key {
            Some(key) => {
                self.sessions.sweep(now, self.cfg.session_ttl / 16.0);
                // Renewed as it is found, and given back its expiry if the lease is refused.
                let live = if local_sessions { self.sessions.renew(key, now, now + self.cfg.session_ttl) } else { None };
                let decided = 'keyed: {
                    let (h, choice) = match live {
                        Some(s) => {
                            self.prefetch(s.exit, site);
                            self.renewed_from = s.expires;
                            match self.session_exit(view, key, s.exit, Some(s.generation), site, now) {
                                Ok(h) => (h, Choice::Session),
                                Err(r) => break 'keyed Err(r),
                            }
                        }
                        None => match self.ring_pick(view, key, site, now) {
                            Ok((h, choice)) => {
                                // A new session binds in the slot's token current now.
                                self.refresh(h, now);
                                (h, choice)
                            }
                            Err(r) => break 'keyed Err(r),
                        },
                    };
                    if self.exits[h as usize].active >= max_leases {
                        break 'keyed Err(Refusal::Full);
                    }
                    // Paced: the key waits for its exit's budget; it never moves for it.
                    if self.pacer.is_some() {
                        if let Some(refusal) = self.session_paced(site, h, now) {
                            break 'keyed Err(refusal);
                        }
                    }
                    Ok((h, choice))
                };
                if decided.is_err() && live.is_some() {
                    self.sessions.restore(key, self.renewed_from);
                }
                decided
            }
            None => {
                self.rerank_moved();
                let strategy = self.cfg.strategy;
                let lru = strategy == Strategy::Lru;
                if lru && self.last_used[site as usize].len() < self.exits.len() {
                    let n = self.exits.len();
                    self.last_used[site as usize].resize(n, f64::NEG_INFINITY);
                }
                let State { views, exits, last_used, rng, cfg, board, pacer, .. } = self;
                let v = &mut views[view as usize];
                let pace = pacer.as_deref().and_then(|p| p.row(site));
                let dense = super::members::dense(&v.members);
                let members =
                    ViewMembers { members: &v.members, dense, exits, max_leases, last_used: &last_used[site as usize], board, site, now };
                let cx = Context { site, readmissions: board.readmissions, lru: lru.then_some((now, cfg.cooldown)) };
                let picked = if avoid.is_empty() && pace.is_none() {
                    v.selector.pick(strategy, &members, rng, cx)
                } else {
                    v.selector.pick(strategy, &Avoiding { inner: members, avoid, pace }, rng, cx)
                };
                let m = match picked {
                    Ok(m) => m,
                    Err(NoPick::Cooling(wait)) => return Err(Refusal::Cooling { wait, why: LRU_COOLDOWN }),
                    Err(NoPick::Nothing) if v.members.is_empty() => return Err(Refusal::NoExits),
                    Err(NoPick::Nothing) => return Err(self.why_none(view, site, avoid, now)),
                };
                let h = if dense { m as u32 } else { v.members[m] };
                if lru {
                    last_used[site as usize][h as usize] = now;
                    // Other views of the same exits keep their own idle order for the site.
                    for (_, other) in views.iter_mut().enumerate().filter(|&(i, _)| i != view as usize) {
                        if let Some(m) = other.position(h) {
                            other.selector.used(site, m, now);
                        }
                    }
                }
                // What the lease reads and writes of its exit, asked for at once: at p2c's
                // random exit of a large pool these are cache misses in several arrays, which
                // then overlap instead of following one another. The other strategies' exits
                // come in order, mostly cached: they skip the instructions.
                if strategy == Strategy::P2c {
                    self.prefetch(h, site);
                }
                // The lease gets the slot's token current now.
                self.refresh(h, now);
                Ok((h, Choice::Strategy(strategy)))
            }
        }
    }

    /// A live session's exit, if it can serve: a session never moves, so an exit that cannot
    /// is reported (`SessionExitLost`), never silently replaced. `generation` is the token
    /// generation the session was bound in (`None`: not known here, as for a session another
    /// worker of a fleet bound): a session whose gateway token rotated since has ended with
    /// the provider's session, so it ends here too, and the key's next lease binds afresh
    /// (unless its gateway rebinds quietly).
    pub(super) fn session_exit(
        &mut self,
        view: u32,
        key: &str,
        h: u32,
        generation: Option<u32>,
        site: u32,
        now: f64,
    ) -> std::result::Result<u32, Refusal> {
        let slot = &self.exits[h as usize];
        // On the way: one comparison for the token's time, one for the session's generation.
        if now >= slot.rotates_at || generation.is_some_and(|g| g != slot.generation as u32) {
            return self.stale_session(view, key, h, generation, site, now);
        }
        let why = if slot.removed {
            Some("its exit was removed from the pool")
        } else if view != 0 && !self.views[view as usize].matches(&slot.exit) {
            Some("its exit is outside this subset")
        } else {
            self.board.lost(h, site)
        };
        if let Some(why) = why {
            let exit_id = slot.exit.id.clone();
            self.board.events.push(
                now,
                EventKind::SessionLost,
                Some(h),
                (site != 0).then_some(site),
                format!("session of key {key:?}: {why}; not moved"),
            );
            return Err(Refusal::SessionExitLost { key: key.to_owned(), exit_id, why });
        }
        match self.board.admits(h, site, now) {
            Admit::Yes => Ok(h),
            Admit::Cooling(until) => Err(Refusal::Cooling { wait: until - now, why: RATE_LIMITED_ONE }),
            // Probing with every trial out: wait for one to come back.
            Admit::No(_) => Err(Refusal::Full),
        }
    }

    /// [`State::session_exit`] when the slot's token is due or the session's generation is
    /// not the slot's: the token moves on; a session whose token is gone ends (the provider's
    /// session is over) and says so; one that rebinds quietly, or whose generation is not
    /// known here, carries on as usual.
    #[cold]
    #[inline(never)]
    fn stale_session(
        &mut self,
        view: u32,
        key: &str,
        h: u32,
        generation: Option<u32>,
        site: u32,
        now: f64,
    ) -> std::result::Result<u32, Refusal> {
        if !self.token_gone(key, h, generation, now) {
            return self.session_exit(view, key, h, None, site, now);
        }
        Err(self.session_rotated(key, h, site, now))
    }

    /// Ends `key`'s session on exit `h`, whose token rotated since it was bound, and says so.
    #[cold]
    #[inline(never)]
    pub(super) fn session_rotated(&mut self, key: &str, h: u32, site: u32, now: f64) -> Refusal {
        self.sessions.end(key);
        let exit_id = self.exits[h as usize].exit.id.clone();
        let msg =
            format!("session of key {key:?}: {TOKEN_ROTATED}; it ended, and the key's next lease binds afresh on the slot's new token");
        self.board.events.push(now, EventKind::SessionLost, Some(h), (site != 0).then_some(site), msg);
        Refusal::SessionExitLost { key: key.to_owned(), exit_id, why: TOKEN_ROTATED }
    }

    /// Moves exit `h` to its current token, and says whether `key`'s session, bound in
    /// `generation`, has lost its token with it; if its gateway rebinds quietly, the session
    /// moves to the new generation instead. Off the lease path.
    #[cold]
    #[inline(never)]
    fn token_gone(&mut self, key: &str, h: u32, generation: Option<u32>, now: f64) -> bool {
        self.refresh(h, now);
        let slot = &self.exits[h as usize];
        let moved = generation.is_some_and(|g| g != slot.generation as u32);
        if moved && slot.exit.gateway.is_some_and(|l| self.gateways[l.gateway as usize].rebind) {
            // Rebinding quietly: the session carries on in the slot's new token.
            self.sessions.regenerate(key, slot.generation as u32);
            return false;
        }
        moved
    }

    /// The handles of the exits a keyless pick must pass over (none for a keyed lease); ids
    /// no longer in the pool are dropped. Empty, it allocates nothing.
    /// Inlined, with the lookup out of line: nearly every lease avoids nothing.
    #[inline(always)]
    pub(super) fn avoided(&self, key: Option<&str>, avoid: &[&str]) -> Vec<u32> {
        if key.is_some() || avoid.is_empty() {
            return Vec::new();
        }
        self.avoided_handles(avoid)
    }

    fn avoided_handles(&self, avoid: &[&str]) -> Vec<u32> {
        avoid.iter().filter_map(|id| self.by_id.get(*id).copied()).collect()
    }

    /// Learns the (exit, site) pair's rate from a report, and announces a cut. No
    /// credential in the event: the exit by id, the site by name, the rates.
    ///
    /// Out of line, as every pacing hook of the lease path: a pool without pacing pays for
    /// each one test of `pacer`, and the functions it sits in keep their size (and inlining).
    #[cold]
    #[inline(never)]
    pub(super) fn pace_learned(&mut self, h: u32, site: u32, report: &crate::outcome::Report, now: f64) {
        let Some(p) = &mut self.pacer else { return };
        if let Some(cut) = p.report(site, h, report, now) {
            self.pace_cut(h, site, cut, report.retry_after, now);
        }
    }

    /// A keyed lease's refusal while its exit has no budget for the site.
    #[cold]
    #[inline(never)]
    fn session_paced(&self, site: u32, h: u32, now: f64) -> Option<Refusal> {
        let wait = self.pace_wait(site, h, now);
        (wait > 0.0).then_some(Refusal::Cooling { wait, why: PACED_ONE })
    }

    /// A lease of exit `h` for `site` spends one request of the pair's budget.
    #[cold]
    #[inline(never)]
    fn pace_take(&mut self, site: u32, h: u32, now: f64) {
        if let Some(p) = &mut self.pacer {
            p.take(site, h, now);
        }
    }

    /// Seconds until exit `h` may send to `site` (0: now, or not paced).
    #[inline]
    pub(super) fn pace_wait(&self, site: u32, h: u32, now: f64) -> f64 {
        self.pacer.as_ref().map_or(0.0, |p| p.wait(site, h, now))
    }

    #[cold]
    #[inline(never)]
    fn pace_cut(&mut self, h: u32, site: u32, cut: crate::pacing::Cut, retry_after: Option<f64>, now: f64) {
        let after = retry_after.map_or(String::new(), |a| format!(", nothing before its Retry-After of {a:.3} s"));
        let msg = format!(
            "429 from {:?}: pacing for this exit cut to {:.3}/s (configured {}, floor {:.3}/s){after}",
            self.site_names[site as usize],
            cut.rate,
            cut.limit,
            crate::pacing::Gcra::floor(cut.limit)
        );
        self.board.events.push(now, EventKind::PaceDecreased, Some(h), Some(site), msg);
        self.board.queue_pace(h, site, cut.rate, retry_after.unwrap_or(0.0));
    }

    /// Another worker of the fleet cut exit `h`'s pace for `site` to `rate`, with `hold`
    /// seconds of its `Retry-After` left: the site limits the IP, whichever worker sends.
    #[cold]
    #[inline(never)]
    pub(super) fn pace_imposed(&mut self, h: u32, site: u32, rate: f64, hold: f64, now: f64) {
        let Some(cut) = self.pacer.as_mut().and_then(|p| p.impose(site, h, rate, hold, now)) else { return };
        let after = if hold > 0.0 { format!(", nothing for {hold:.3} s more") } else { String::new() };
        let msg = format!(
            "429 from {:?} to another worker of the fleet: pacing for this exit cut to {:.3}/s (configured {}){after}",
            self.site_names[site as usize], cut.rate, cut.limit
        );
        self.board.events.push(now, EventKind::PaceDecreased, Some(h), Some(site), msg);
    }

    /// Records a lease of exit `h` (`remote`: its id in the shared store, 0 if none).
    #[inline]
    pub(super) fn commit(&mut self, h: u32, choice: Choice, key: Option<&str>, site: u32, now: f64, remote: u64) -> Grant {
        self.board.gate_pass(site, now);
        if self.pacer.is_some() {
            self.pace_take(site, h, now);
        }
        let state = self.board.state(h, Some(site));
        let trial = self.board.on_lease(h, site);
        let slot = &mut self.exits[h as usize];
        slot.active += 1;
        slot.last_lease = now;
        slot.tally.leases += 1;
        let exit = slot.exit.clone();
        self.board.set_home(h, Arc::as_ptr(&exit) as usize);
        active_changed(&mut self.moved, &mut self.board, &self.cfg, &self.exits[h as usize], h, self.exits[h as usize].active - 1);
        let identity = match key {
            Some(k) if self.cfg.calibrate => identity_of(k),
            _ => 0,
        };
        let id = self.leases.insert(LeaseRec { exit: h, site, trial, identity, remote, started: now, expires: now + self.cfg.lease_ttl });
        self.counts.acquired += 1;
        Grant { id, exit, choice, state, waited: 0.0 }
    }
}
