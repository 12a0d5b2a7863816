//! The records a reader gets: events with names resolved, and the snapshot of every exit,
//! every (exit, site) cell and the pool-wide figures.

use super::state::State;
use super::{Counts, Pool};
use crate::exit::Exit;
use crate::health::{Admit, State as Health};
use crate::metrics::Tally;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One event, with names resolved. Serializes (for `pool.events()`) with the keys of the
/// stub's `Event` TypedDict, in this order.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EventRecord {
    pub seq: u64,
    pub time: f64,
    pub kind: &'static str,
    pub exit_id: Option<String>,
    pub site: Option<String>,
    pub from: Option<&'static str>,
    pub to: Option<&'static str>,
    pub message: String,
}

/// Per-exit figures for snapshots.
#[derive(Debug, Clone)]
pub struct ExitRecord {
    pub exit: Arc<Exit>,
    /// The tunnel's state: the exit's state for every site.
    pub state: Health,
    pub state_since: f64,
    pub quarantines: u32,
    pub quarantined_seconds: f64,
    pub active: u32,
    pub benched: bool,
    pub sessions: u32,
    pub tally: Tally,
    /// The share of its capacity the exit gets now (health and adaptive weight).
    pub weight: f64,
    /// A gateway slot's token: `None` for a plain exit.
    pub token: Option<SlotToken>,
}

/// A gateway slot's token as a snapshot shows it: which generation, when it next rotates,
/// and the IP a probe saw through it. Never the token's credentials (the exit's proxy URL,
/// masked, carries the token where the username holds it).
#[derive(Debug, Clone, Copy)]
pub struct SlotToken {
    /// Index into `Snapshot::gateways`.
    pub gateway: u32,
    pub generation: u64,
    /// Pool clock; infinite for a token that never expires.
    pub rotates_at: f64,
    pub learned_ip: Option<std::net::IpAddr>,
}

impl GatewayRecord {
    /// Counts one of its slots in (of state rank `rank`, with `sessions` live sessions).
    fn add_slot(&mut self, s: &super::state::ExitSlot, rank: usize, sessions: u32) {
        self.states[rank] += 1;
        self.benched += s.benched as u32;
        self.active += s.active as u64;
        self.sessions += sessions as u64;
        self.leases += s.tally.leases;
        self.next_rotation = self.next_rotation.min(s.rotates_at);
    }
}

/// One gateway: its settings, its breaker on the health board, and its slots summed.
#[derive(Debug, Clone)]
pub struct GatewayRecord {
    pub gateway: Arc<crate::gateway::Gateway>,
    /// The breaker's state: healthy, quarantined (every slot out) or probing (one trial).
    pub state: Health,
    /// Why it went out last: `None` while healthy.
    pub cause: Option<&'static str>,
    pub since: f64,
    /// When a trial may go, while quarantined.
    pub until: Option<f64>,
    pub outages: u32,
    pub credential_rejections: u64,
    /// Slot failures charged to the gateway instead of the slot.
    pub absorbed: u64,
    pub out_seconds: f64,
    /// Distinct slots failing to connect now, with no success since.
    pub failing: u32,
    /// Token rotations so far.
    pub rotations: u64,
    /// Its slots in the pool (one removed is no member any more).
    pub members: u32,
    /// While probing: the one trial lease is out.
    pub trial_out: bool,
    /// Its slots by their own breakers' state, in `Health::ALL` order.
    pub states: [u32; 5],
    pub benched: u32,
    pub active: u64,
    pub sessions: u64,
    pub leases: u64,
    /// The soonest rotation of any slot (pool clock); infinite when tokens never expire.
    pub next_rotation: f64,
}

/// The name a state is shown by: "cooling" for an exit resting after a 429 (cooling ends by
/// time, not by evidence, so it is no breaker state), else the breaker's state. An exit out of
/// service shows that instead: it would not serve when its cooling ends either.
pub const COOLING: &str = "cooling";

pub(super) fn shown_state(health: Health, cooling: bool) -> &'static str {
    if cooling && !health.is_ejected() {
        COOLING
    } else {
        health.name()
    }
}

/// One cell of the exit x site matrix.
#[derive(Debug, Clone)]
pub struct Cell {
    pub state: Health,
    /// Resting after a 429 for this site (see [`COOLING`]).
    pub cooling: bool,
    pub tally: Tally,
    pub quarantines: u32,
    pub quarantined_seconds: f64,
}

impl Cell {
    /// The cell's state as shown: its breaker state, or "cooling".
    pub fn state_name(&self) -> &'static str {
        shown_state(self.state, self.cooling)
    }
}

#[derive(Debug, Clone)]
pub struct SiteRecord {
    pub site: String,
    pub incident: bool,
    /// Too few exits serve the site: those out for it serve it again (see `HealthBoard`).
    pub panic: bool,
    /// Outcomes on the site over every exit in the pool, listed or not.
    pub outcomes: [u64; 8],
    /// Indexed like `Snapshot::exits`; `None` where the exit has not served the site.
    pub cells: Vec<Option<Cell>>,
}

/// Which exits a snapshot lists (gives a record and a matrix row of their own). The pool-wide
/// figures, the per-site totals and the groups always cover every exit: a dashboard that
/// polls asks for the few exits it shows and still gets the whole pool's counts.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// Only exits whose (tunnel) state is one of these; empty: any state.
    pub states: Vec<Health>,
    /// Only exits carrying every one of these tags.
    pub tags: Vec<(String, String)>,
    /// Only the exits with these ids (an id the pool does not hold matches nothing, as a tag
    /// value no exit has does: a poller must not fail because an exit was removed).
    pub exit_ids: Option<Vec<String>>,
    /// At most this many, the worst states first and ties in pool order, listed in pool order:
    /// the set changes only when states do, so series built from it do not churn. `Some(0)`
    /// lists none: the summary.
    pub limit: Option<usize>,
    /// Sum the exits' figures by the value of this tag (`Snapshot::groups`).
    pub by_tag: Option<String>,
    /// List gateway slots too; `false`: plain exits only (each gateway's entry in
    /// `Snapshot::gateways` sums its slots), for readers that must bound what they list.
    pub slots: bool,
}

impl Default for Selection {
    /// Every exit, slots included.
    fn default() -> Selection {
        Selection { states: Vec::new(), tags: Vec::new(), exit_ids: None, limit: None, by_tag: None, slots: true }
    }
}

impl Selection {
    /// The health state named `name`, as `Selection::states` takes it.
    pub fn state_named(name: &str) -> crate::Result<Health> {
        Health::ALL.into_iter().find(|s| s.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Health::ALL.iter().map(|s| s.name()).collect();
            crate::error::Error::BadInput(format!("snapshot state '{name}' is no health state: one of {}", names.join(", ")))
        })
    }
}

/// The figures of the exits sharing one value of the grouping tag.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupFigures {
    pub exits: u32,
    /// Per health state, in `Health::ALL` order.
    pub states: [u32; 5],
    pub benched: u32,
    pub active: u64,
    pub sessions: u64,
    pub leases: u64,
    pub outcomes: [u64; 8],
}

/// Pool-wide figures.
#[derive(Debug, Clone, Default)]
pub struct PoolFigures {
    /// Exits per health state, in `Health::ALL` order (benched exits counted too).
    pub states: [u32; 5],
    pub in_service: u32,
    pub benched: u32,
    /// Leases per second over the last one to two minutes.
    pub throughput: f64,
    /// Gini coefficient of leases over the exits in service.
    pub gini: f64,
    pub ejected_fraction: f64,
    pub trials: u64,
    pub trials_recovered: u64,
    pub wait_p50: f64,
    pub wait_p99: f64,
    pub incidents: Vec<String>,
    pub global_incident: bool,
    /// Fewer than `panic_threshold` of the exits in service: every exit serves.
    pub panic: bool,
}

/// One paced (exit, site) pair that has been used or has learned something.
#[derive(Debug, Clone, PartialEq)]
pub struct PaceRecord {
    pub exit_id: String,
    pub site: String,
    /// The site's configured rate: the ceiling learning climbs back to.
    pub limit: crate::pacing::Rate,
    /// The learned rate, requests per second.
    pub rate: f64,
    /// Requests that fit now, at once.
    pub tokens: u32,
    /// Seconds until the next request fits (0: now).
    pub next_free: f64,
}

#[derive(Debug, Clone)]
pub struct Snapshot {
    pub now: f64,
    /// The listed exits (see [`Selection`]), in pool order.
    pub exits: Vec<ExitRecord>,
    /// Exits in the pool, listed or not.
    pub total_exits: usize,
    /// By the value of `Selection::by_tag` (exits without the tag under ""), sorted.
    pub groups: Option<Vec<(String, GroupFigures)>>,
    pub sites: Vec<SiteRecord>,
    pub pool: PoolFigures,
    /// Every gateway, listed exits or not (indexed as the slots' `SlotToken::gateway`).
    pub gateways: Vec<GatewayRecord>,
    pub sessions: usize,
    pub live_leases: usize,
    pub counts: Counts,
    /// The listed exits' paced pairs, by site then exit (pool order).
    pub pacing: Vec<PaceRecord>,
}

impl Pool {
    /// Events with a sequence number of at least `since`, oldest first.
    pub fn events(&self, since: u64) -> Vec<EventRecord> {
        let st = self.state.lock();
        st.board
            .events
            .since(since)
            .map(|e| EventRecord {
                seq: e.seq,
                time: e.time,
                kind: e.kind.name(),
                exit_id: e.exit.map(|h| st.exits[h as usize].exit.id.clone()),
                site: e.site.map(|s| st.site_names[s as usize].to_string()),
                from: e.from,
                to: e.to,
                message: e.message.clone(),
            })
            .collect()
    }

    /// Every exit and every figure (the whole pool listed).
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_of(&Selection::default())
    }

    /// The pool-wide figures with the exits `sel` lists.
    ///
    /// A snapshot of a large pool must not hold up the threads leasing meanwhile: one hold of
    /// the lock takes the pool-wide figures (one pass of counting, no per-exit copy), then the
    /// listed exits' records and matrix cells are copied `EXITS_PER_HOLD` exits per hold, the
    /// lock let go between holds. Each exit's record is whole and self-consistent; exits far
    /// apart in the list may be copied a few milliseconds apart, as in any scrape of a live
    /// system. (Copying 10,000 exits x 5 sites in one hold took 32 ms, most of it the kernel
    /// handing out fresh pages for 20 MB of records.) Every derived figure (rates, quantiles,
    /// the document) is computed by the reader after the last hold.
    pub fn snapshot_of(&self, sel: &Selection) -> Snapshot {
        if let Some(fl) = &self.fleet {
            self.sync_health(fl);
        }
        let now = self.clock.now();
        let (mut snap, listed, sessions_per_exit) = self.pool_figures(sel, now);
        // The first batch came with the pool-wide figures.
        for batch in listed[listed.len().min(EXITS_PER_HOLD)..].chunks(EXITS_PER_HOLD) {
            let mut st = self.state.lock();
            for &h in batch {
                st.refresh(h, now);
                st.copy_exit(h, now, sessions_per_exit[h as usize], &mut snap);
            }
            drop(st);
            // The lock does not hand itself over: without a yield this thread takes it again
            // before a waiter woken by the unlock has run, and holds it up for every batch.
            std::thread::yield_now();
        }
        snap
    }

    /// The first hold: the figures over the whole pool, which exits `sel` lists (with their
    /// live sessions, counted in the same pass), and the first `EXITS_PER_HOLD` of them, so
    /// that a snapshot listing no more is one instant of the pool (its counts and its exits'
    /// agree exactly).
    fn pool_figures(&self, sel: &Selection, now: f64) -> (Snapshot, Vec<u32>, Vec<u32>) {
        let mut guard = self.state.lock();
        if guard.expire(now) && guard.waiters > 0 {
            self.freed.notify_all();
        }
        guard.board.poll(now);
        // Every slot shows the token it would lease with now, and the soonest rotation is
        // one still to come: one comparison a slot whose token is current, in the pass that
        // finds the exits present anyway.
        let mut present: Vec<u32> = Vec::with_capacity(guard.exits.len());
        for h in 0..guard.exits.len() as u32 {
            if !guard.exits[h as usize].removed {
                guard.refresh(h, now);
                present.push(h);
            }
        }
        // Throughput is measured between marks at least a minute apart.
        let acquired = guard.counts.acquired;
        if now - guard.rate_mark.0 >= 60.0 {
            guard.rate_prev = guard.rate_mark;
            guard.rate_mark = (now, acquired);
        }
        let st = &*guard;
        let mut sessions_per_exit = vec![0u32; st.exits.len()];
        for (_, s) in st.sessions.iter() {
            if s.expires > now {
                sessions_per_exit[s.exit as usize] += 1;
            }
        }
        let listed = st.listed(&present, sel);
        let sites: Vec<SiteRecord> = (1..st.site_names.len() as u32)
            .map(|site| {
                let tallies = st.site_tallies.get(site as usize).map_or(&[][..], |t| &t[..]);
                SiteRecord {
                    site: st.site_names[site as usize].to_string(),
                    incident: st.board.incident_open(site),
                    panic: st.board.site_panic(site),
                    outcomes: sum_outcomes(present.iter().filter_map(|&h| tallies.get(h as usize))),
                    cells: Vec::new(),
                }
            })
            .collect();
        let mut figures = PoolFigures::default();
        let mut gateways = st.gateway_records(now);
        for &h in &present {
            let (b, s) = (st.board.tunnel_breaker(h), &st.exits[h as usize]);
            // Pool figures count a slot of a gateway that is out as out; the gateway's own
            // row counts its slots by their own breakers (its state is beside them).
            figures.states[state_rank(st.board.state(h, None))] += 1;
            figures.benched += s.benched as u32;
            // A gateway's slots summed in the same pass; the group is read with the breaker.
            if let Some(r) = gateways.get_mut((b.group() as usize).wrapping_sub(1)) {
                r.add_slot(s, state_rank(b.state()), sessions_per_exit[h as usize]);
            }
        }
        figures.in_service = st.views[0].members.len() as u32;
        let (t0, a0) = st.rate_prev;
        figures.throughput = if now > t0 { (acquired - a0) as f64 / (now - t0) } else { 0.0 };
        let mut loads: Vec<u64> = st.views[0].members.iter().map(|&h| st.exits[h as usize].tally.leases).collect();
        figures.gini = crate::metrics::gini(&mut loads);
        figures.ejected_fraction = if figures.in_service == 0 { 0.0 } else { st.board.ejected() as f64 / figures.in_service as f64 };
        (figures.trials, figures.trials_recovered) = st.board.trials();
        figures.wait_p50 = st.waits.quantile(0.5);
        figures.wait_p99 = st.waits.quantile(0.99);
        figures.incidents =
            st.board.open_incidents().into_iter().filter(|&s| s != 0).map(|s| st.site_names[s as usize].to_string()).collect();
        figures.global_incident = st.board.global_incident_open();
        figures.panic = st.board.panic();
        let groups = sel.by_tag.as_deref().map(|tag| st.groups(&present, tag, &sessions_per_exit));
        let snap = Snapshot {
            now,
            exits: Vec::new(),
            total_exits: present.len(),
            groups,
            sites,
            pool: figures,
            gateways,
            sessions: sessions_per_exit.iter().map(|&n| n as usize).sum(),
            live_leases: st.leases.live(),
            counts: Counts { waits: st.waits.waited_total, ..st.counts.clone() },
            pacing: st.pace_records(&listed, now),
        };
        let mut snap = snap;
        snap.exits.reserve_exact(listed.len());
        for site in &mut snap.sites {
            site.cells.reserve_exact(listed.len());
        }
        for &h in listed.iter().take(EXITS_PER_HOLD) {
            st.copy_exit(h, now, sessions_per_exit[h as usize], &mut snap);
        }
        (snap, listed, sessions_per_exit)
    }
}

/// Listed exits copied per hold of the pool's lock: well under a millisecond at 5 sites.
const EXITS_PER_HOLD: usize = 128;

/// A state's place in `Health::ALL` (best first).
fn state_rank(state: Health) -> usize {
    Health::ALL.iter().position(|s| *s == state).unwrap_or(0)
}

fn sum_outcomes<'a>(tallies: impl Iterator<Item = &'a Tally>) -> [u64; 8] {
    let mut total = [0u64; 8];
    for t in tallies {
        for (a, n) in total.iter_mut().zip(t.outcomes) {
            *a += n;
        }
    }
    total
}

impl State {
    /// Appends exit `h`'s record and its matrix cells (one per site of `snap`) to `snap`;
    /// nothing for an exit removed since the first hold, so records and rows stay aligned.
    fn copy_exit(&self, h: u32, now: f64, sessions: u32, snap: &mut Snapshot) {
        let Some(s) = self.exits.get(h as usize).filter(|s| !s.removed) else { return };
        let b = self.board.tunnel_breaker(h);
        snap.exits.push(ExitRecord {
            exit: s.exit.clone(),
            // Its gateway's state too: a slot of a gateway that is out is out, as `pool.state`
            // says; since when is its own breaker's.
            state: self.board.state(h, None),
            state_since: b.since(),
            quarantines: b.quarantines,
            quarantined_seconds: b.total_quarantined(now),
            active: s.active,
            benched: s.benched,
            sessions,
            tally: s.tally.clone(),
            weight: self.board.weight(h, 0),
            token: s.exit.gateway.map(|link| SlotToken {
                gateway: link.gateway,
                generation: s.generation,
                rotates_at: s.rotates_at,
                learned_ip: s.learned_ip,
            }),
        });
        for (site, record) in (1u32..).zip(&mut snap.sites) {
            let tally = self.site_tallies.get(site as usize).and_then(|t| t.get(h as usize)).filter(|t| t.reports() > 0);
            record.cells.push(tally.map(|tally| {
                let b = self.board.site_breaker(h, site);
                Cell {
                    state: self.board.state(h, Some(site)),
                    cooling: matches!(self.board.admits(h, site, now), Admit::Cooling(_)),
                    tally: tally.clone(),
                    quarantines: b.map_or(0, |b| b.quarantines),
                    quarantined_seconds: b.map_or(0.0, |b| b.total_quarantined(now)),
                }
            }));
        }
    }

    /// The paced pairs of the `listed` exits (ascending handles) that were used or learned.
    fn pace_records(&self, listed: &[u32], now: f64) -> Vec<PaceRecord> {
        let mut out = Vec::new();
        for (site, row) in self.pacer.iter().flat_map(|p| p.rows()) {
            for (h, g) in row.cells().filter(|(h, _)| listed.binary_search(h).is_ok()) {
                out.push(PaceRecord {
                    exit_id: self.exits[h as usize].exit.id.clone(),
                    site: self.site_names[site as usize].to_string(),
                    limit: row.limit,
                    rate: g.rate,
                    tokens: g.tokens(row.limit, now),
                    next_free: g.wait(row.limit, now),
                });
            }
        }
        out
    }

    /// The handles `sel` lists among `present` (ascending), in pool order: one pass to match,
    /// and with a limit one count per state to find the worst `limit` without sorting.
    fn listed(&self, present: &[u32], sel: &Selection) -> Vec<u32> {
        // Named exits are looked up, not searched for: three ids of a 100,000-exit pool cost three.
        let named: Vec<u32>;
        let candidates = match &sel.exit_ids {
            None => present,
            Some(ids) => {
                let mut hs: Vec<u32> =
                    ids.iter().filter_map(|id| self.by_id.get(id).copied()).filter(|&h| !self.exits[h as usize].removed).collect();
                hs.sort_unstable();
                hs.dedup();
                named = hs;
                &named
            }
        };
        let matching: Vec<u32> = candidates
            .iter()
            .copied()
            .filter(|&h| {
                (sel.slots || self.exits[h as usize].exit.gateway.is_none())
                    && (sel.states.is_empty() || sel.states.contains(&self.board.state(h, None)))
                    && sel.tags.iter().all(|(k, v)| self.exits[h as usize].exit.tag(k) == Some(v.as_str()))
            })
            .collect();
        let Some(limit) = sel.limit.filter(|&l| l < matching.len()) else { return matching };
        // Take whole states from the worst down; the state where the limit falls gives its
        // first exits in pool order.
        let mut per_state = [0usize; 5];
        for &h in &matching {
            per_state[state_rank(self.board.state(h, None))] += 1;
        }
        let mut room = limit;
        let mut quota = [0usize; 5];
        for rank in (0..5).rev() {
            quota[rank] = per_state[rank].min(room);
            room -= quota[rank];
        }
        matching
            .into_iter()
            .filter(|&h| {
                let q = &mut quota[state_rank(self.board.state(h, None))];
                let take = *q > 0;
                *q = q.saturating_sub(1);
                take
            })
            .collect()
    }

    /// Every present exit's figures summed by its value of `tag` ("" without it), sorted.
    fn groups(&self, present: &[u32], tag: &str, sessions_per_exit: &[u32]) -> Vec<(String, GroupFigures)> {
        let mut groups: BTreeMap<&str, GroupFigures> = BTreeMap::new();
        for &h in present {
            let s = &self.exits[h as usize];
            let g = groups.entry(s.exit.tag(tag).unwrap_or("")).or_default();
            g.exits += 1;
            g.states[state_rank(self.board.tunnel_breaker(h).state())] += 1;
            g.benched += s.benched as u32;
            g.active += s.active as u64;
            g.sessions += sessions_per_exit[h as usize] as u64;
            g.leases += s.tally.leases;
            for (a, n) in g.outcomes.iter_mut().zip(s.tally.outcomes) {
                *a += n;
            }
        }
        groups.into_iter().map(|(k, g)| (k.to_string(), g)).collect()
    }

    /// Every gateway's breaker, indexed as its group on the board less one (the groups are
    /// the gateways, in order), its slots' figures still to add ([`GatewayRecord::add_slot`]).
    fn gateway_records(&self, now: f64) -> Vec<GatewayRecord> {
        debug_assert_eq!(self.board.group_count() as usize, self.gateways.len(), "groups are gateways");
        self.gateways
            .iter()
            .zip(&self.gateway_books)
            .enumerate()
            .map(|(i, (gw, book))| {
                debug_assert_eq!(book.group as usize, i + 1, "gateway {i}'s group");
                let grp = self.board.group(book.group).expect("every gateway has its group");
                debug_assert_eq!(grp.name(), gw.id, "a gateway's group is named after it");
                let out = grp.state() != Health::Healthy;
                GatewayRecord {
                    gateway: gw.clone(),
                    state: grp.state(),
                    cause: out.then(|| grp.cause().name()),
                    since: grp.since(),
                    until: (grp.state() == Health::Quarantined).then(|| grp.until()),
                    outages: grp.outages,
                    credential_rejections: grp.credential_rejections,
                    absorbed: grp.absorbed,
                    out_seconds: grp.total_out(now),
                    failing: grp.failing(),
                    rotations: book.rotations,
                    members: grp.members(),
                    trial_out: grp.trial_out(),
                    states: [0; 5],
                    benched: 0,
                    active: 0,
                    sessions: 0,
                    leases: 0,
                    next_rotation: f64::INFINITY,
                }
            })
            .collect()
    }
}
