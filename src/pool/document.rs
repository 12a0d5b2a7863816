//! The snapshot as a reader gets it: one document with every figure, the derived ones
//! (time in state, recent rates, latency quantiles, per-site totals, the half-open success
//! rate, the exit x site matrix) computed here, once. Its fields are, in order, the keys of the
//! stub's `Snapshot` TypedDict (`python/exitpool/_core.pyi`): the bindings convert it with one
//! serde call, so the order of fields here is the order of keys a Python reader sees.
//!
//! Lists serialize as sequences and never as tuples (a fixed-size array would be a tuple).

use super::{Cell, ExitRecord, GatewayRecord, GroupFigures, Pool, Selection, Snapshot};
use crate::health::State as Health;
use crate::metrics::Tally;
use crate::outcome::OUTCOMES;
use crate::store::ExitCounts;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;

/// The schema's version, `Snapshot["version"]`.
pub const VERSION: u32 = 1;

/// The matrix's columns, the order of every cell's values.
pub const MATRIX_COLUMNS: &[&str] = &["state", "reports", "success_rate", "captcha_rate", "p50", "p95", "p99", "quarantines"];

/// Everything `Pool::snapshot` saw, with the fleet's figures and the store's status, taken at
/// once; serializes as the document (see [`SnapshotDocument::paced`]).
pub struct SnapshotDocument {
    snap: Snapshot,
    /// Fleet-wide figures, indexed like `snap.exits`; `None` without a store, or while it does
    /// not answer.
    fleet: Option<Vec<ExitCounts>>,
    /// The store's URL (masked) and whether it answers; `None` for a pool of its own.
    store: Option<(String, bool)>,
}

impl Pool {
    /// The snapshot as one document, with the fleet's figures for the exits `sel` lists (the
    /// store is asked about those alone). With a shared store this asks the store: call it
    /// without holding anything others wait for.
    pub fn snapshot_document_of(&self, sel: &Selection) -> SnapshotDocument {
        let snap = self.snapshot_of(sel);
        let ids: Vec<&str> = snap.exits.iter().map(|e| e.exit.id.as_str()).collect();
        let fleet = self.fleet_counts(&ids);
        SnapshotDocument { snap, fleet, store: self.store_status() }
    }
}

impl Serialize for SnapshotDocument {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Document::new(self, Pace::NEVER).serialize(s)
    }
}

impl SnapshotDocument {
    /// The document, serializing which calls `pause` after every `every` exits of each
    /// per-exit list. A serializer that holds a lock others wait for (the bindings build Python
    /// objects under the GIL) lets them through there, so a document of 10,000 exits never
    /// holds them up for more than `every` exits' worth.
    pub fn paced<'a>(&'a self, every: usize, pause: &'a dyn Fn()) -> impl Serialize + 'a {
        Document::new(self, Pace { every: every.max(1), pause })
    }
}

/// When serializing a long list pauses, and what pausing does.
#[derive(Clone, Copy)]
struct Pace<'a> {
    every: usize,
    pause: &'a dyn Fn(),
}

impl Pace<'_> {
    const NEVER: Pace<'static> = Pace { every: usize::MAX, pause: &|| {} };

    /// Called before item `i` of a list.
    fn tick(&self, i: usize) {
        if i > 0 && i % self.every == 0 {
            (self.pause)();
        }
    }
}

#[derive(Serialize)]
struct Document<'a> {
    version: u32,
    time: f64,
    pool: PoolDoc<'a>,
    counts: CountsDoc,
    exits: Exits<'a>,
    sites: Vec<SiteDoc<'a>>,
    matrix: Matrix<'a>,
    sessions: usize,
    live_leases: usize,
    store: Option<StoreDoc<'a>>,
    groups: Option<Groups<'a>>,
    gateways: Vec<GatewayDoc<'a>>,
    pacing: Vec<PaceDoc<'a>>,
}

/// One paced (exit, site) pair: the configured rate (as written and per second), the
/// learned one and its floor, and its budget now.
#[derive(Serialize)]
struct PaceDoc<'a> {
    exit_id: &'a str,
    site: &'a str,
    configured: String,
    ceiling: f64,
    rate: f64,
    floor: f64,
    tokens: u32,
    next_free: f64,
}

impl<'a> Document<'a> {
    fn new(d: &'a SnapshotDocument, pace: Pace<'a>) -> Document<'a> {
        let snap = &d.snap;
        Document {
            version: VERSION,
            time: snap.now,
            pool: PoolDoc::new(snap),
            counts: CountsDoc {
                acquired: snap.counts.acquired,
                released: snap.counts.released,
                expired: snap.counts.expired,
                ignored_releases: snap.counts.ignored_releases,
                waits: snap.counts.waits,
                evicted_sessions: snap.counts.evicted_sessions,
                evicted_pairings: snap.counts.evicted_pairings,
                outcomes: OutcomeCounts(snap.counts.outcomes),
            },
            exits: Exits { snap, pace },
            sites: snap
                .sites
                .iter()
                .map(|s| SiteDoc { site: &s.site, incident: s.incident, panic: s.panic, outcomes: OutcomeCounts(s.outcomes) })
                .collect(),
            matrix: Matrix { snap, pace },
            sessions: snap.sessions,
            live_leases: snap.live_leases,
            store: d.store.as_ref().map(|(url, online)| StoreDoc {
                url,
                online: *online,
                exits: FleetExits { snap, fleet: d.fleet.as_deref(), pace },
            }),
            groups: snap.groups.as_deref().map(Groups),
            gateways: snap.gateways.iter().map(GatewayDoc::new).collect(),
            pacing: snap
                .pacing
                .iter()
                .map(|p| PaceDoc {
                    exit_id: &p.exit_id,
                    site: &p.site,
                    configured: p.limit.to_string(),
                    ceiling: p.limit.per_second(),
                    rate: p.rate,
                    floor: crate::pacing::Gcra::floor(p.limit),
                    tokens: p.tokens,
                    next_free: p.next_free,
                })
                .collect(),
        }
    }
}

#[derive(Serialize)]
struct PoolDoc<'a> {
    exits: usize,
    in_service: u32,
    benched: u32,
    states: StateCounts,
    throughput: f64,
    gini: f64,
    ejected_fraction: f64,
    half_open: HalfOpen,
    wait: Waits,
    incidents: &'a [String],
    global_incident: bool,
    panic: bool,
    sessions: usize,
    live_leases: usize,
}

impl<'a> PoolDoc<'a> {
    fn new(snap: &'a Snapshot) -> PoolDoc<'a> {
        let f = &snap.pool;
        PoolDoc {
            exits: snap.total_exits,
            in_service: f.in_service,
            benched: f.benched,
            states: StateCounts(f.states),
            throughput: f.throughput,
            gini: f.gini,
            ejected_fraction: f.ejected_fraction,
            half_open: HalfOpen {
                trials: f.trials,
                succeeded: f.trials_recovered,
                success_rate: (f.trials > 0).then(|| f.trials_recovered as f64 / f.trials as f64),
            },
            wait: Waits { p50: f.wait_p50, p99: f.wait_p99 },
            incidents: &f.incidents,
            global_incident: f.global_incident,
            panic: f.panic,
            sessions: snap.sessions,
            live_leases: snap.live_leases,
        }
    }
}

#[derive(Serialize)]
struct HalfOpen {
    trials: u64,
    succeeded: u64,
    success_rate: Option<f64>,
}

#[derive(Serialize)]
struct Waits {
    p50: f64,
    p99: f64,
}

#[derive(Serialize)]
struct CountsDoc {
    acquired: u64,
    released: u64,
    expired: u64,
    ignored_releases: u64,
    waits: u64,
    /// Idle sessions and warm-up pairings ended early to keep `max_sessions` / `max_pairings`.
    evicted_sessions: u64,
    evicted_pairings: u64,
    outcomes: OutcomeCounts,
}

#[derive(Serialize)]
struct ExitDoc<'a> {
    exit_id: &'a str,
    /// Masked.
    proxy: &'a str,
    ip: Option<String>,
    capacity: u32,
    tags: Tags<'a>,
    state: &'static str,
    state_since: f64,
    time_in_state: f64,
    quarantines: u32,
    quarantined_seconds: f64,
    benched: bool,
    active_leases: u32,
    sessions: u32,
    leases: u64,
    outcomes: OutcomeCounts,
    success_rate: Option<f64>,
    captcha_rate: Option<f64>,
    latency: Latency,
    weight: f64,
    /// The gateway a slot belongs to; `None` for a plain exit (and so the next three).
    gateway: Option<&'a str>,
    generation: Option<u64>,
    /// Pool clock; `None` for a token that never expires.
    rotates_at: Option<f64>,
    /// The IP a probe saw through the slot's current token.
    learned_ip: Option<String>,
}

impl<'a> ExitDoc<'a> {
    fn new(e: &'a ExitRecord, snap: &'a Snapshot) -> ExitDoc<'a> {
        let (now, token) = (snap.now, e.token.as_ref());
        let rates = e.tally.recent_rates();
        ExitDoc {
            exit_id: &e.exit.id,
            proxy: e.exit.proxy.masked(),
            ip: e.exit.ip.map(|ip| ip.to_string()),
            capacity: e.exit.capacity,
            tags: Tags(&e.exit.tags),
            state: e.state.name(),
            state_since: e.state_since,
            time_in_state: now - e.state_since,
            quarantines: e.quarantines,
            quarantined_seconds: e.quarantined_seconds,
            benched: e.benched,
            active_leases: e.active,
            sessions: e.sessions,
            leases: e.tally.leases,
            outcomes: OutcomeCounts(e.tally.outcomes),
            success_rate: rates.map(|r| r.0),
            captcha_rate: rates.map(|r| r.1),
            latency: Latency::of(&e.tally),
            weight: e.weight,
            gateway: token.map(|t| snap.gateways[t.gateway as usize].gateway.id.as_str()),
            generation: token.map(|t| t.generation),
            rotates_at: token.and_then(|t| finite(t.rotates_at)),
            learned_ip: token.and_then(|t| t.learned_ip).map(|ip| ip.to_string()),
        }
    }
}

/// A time that may be infinite ("never") as the document spells it: `None` for never.
fn finite(t: f64) -> Option<f64> {
    t.is_finite().then_some(t)
}

/// One gateway: what it is (never its templates, which may hold the password), its breaker
/// and its slots summed.
#[derive(Serialize)]
struct GatewayDoc<'a> {
    gateway_id: &'a str,
    /// Masked.
    proxy: &'a str,
    preset: Option<&'static str>,
    slots: u32,
    lifetime: Option<f64>,
    margin: f64,
    capacity: u32,
    tags: Tags<'a>,
    state: &'static str,
    cause: Option<&'static str>,
    state_since: f64,
    until: Option<f64>,
    trial_out: bool,
    outages: u32,
    credential_rejections: u64,
    absorbed: u64,
    out_seconds: f64,
    failing: u32,
    rotations: u64,
    next_rotation: Option<f64>,
    slot_states: StateCounts,
    benched: u32,
    active_leases: u64,
    sessions: u64,
    leases: u64,
}

impl<'a> GatewayDoc<'a> {
    fn new(r: &'a GatewayRecord) -> GatewayDoc<'a> {
        let g = &r.gateway;
        GatewayDoc {
            gateway_id: &g.id,
            proxy: g.masked_proxy(),
            preset: g.preset.map(|p| p.name),
            slots: r.members,
            lifetime: g.lifetime,
            margin: g.margin,
            capacity: g.capacity,
            tags: Tags(&g.tags),
            state: r.state.name(),
            cause: r.cause,
            state_since: r.since,
            until: r.until,
            trial_out: r.trial_out,
            outages: r.outages,
            credential_rejections: r.credential_rejections,
            absorbed: r.absorbed,
            out_seconds: r.out_seconds,
            failing: r.failing,
            rotations: r.rotations,
            next_rotation: finite(r.next_rotation),
            slot_states: StateCounts(r.states),
            benched: r.benched,
            active_leases: r.active,
            sessions: r.sessions,
            leases: r.leases,
        }
    }
}

#[derive(Serialize)]
struct Latency {
    p50: Option<f64>,
    p95: Option<f64>,
    p99: Option<f64>,
    count: u32,
}

impl Latency {
    fn of(t: &Tally) -> Latency {
        Latency { p50: t.latency.quantile(0.5), p95: t.latency.quantile(0.95), p99: t.latency.quantile(0.99), count: t.latency.count() }
    }
}

#[derive(Serialize)]
struct SiteDoc<'a> {
    site: &'a str,
    incident: bool,
    panic: bool,
    outcomes: OutcomeCounts,
}

/// The listed exits' records, built while serializing (10,000 need no list of their own).
struct Exits<'a> {
    snap: &'a Snapshot,
    pace: Pace<'a>,
}

impl Serialize for Exits<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.snap.exits.len()))?;
        for (i, e) in self.snap.exits.iter().enumerate() {
            self.pace.tick(i);
            seq.serialize_element(&ExitDoc::new(e, self.snap))?;
        }
        seq.end()
    }
}

/// The exits' figures summed by the value of one tag, as a map from each value.
struct Groups<'a>(&'a [(String, GroupFigures)]);

impl Serialize for Groups<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Group {
            exits: u32,
            states: StateCounts,
            benched: u32,
            active_leases: u64,
            sessions: u64,
            leases: u64,
            outcomes: OutcomeCounts,
        }
        s.collect_map(self.0.iter().map(|(value, g)| {
            let group = Group {
                exits: g.exits,
                states: StateCounts(g.states),
                benched: g.benched,
                active_leases: g.active,
                sessions: g.sessions,
                leases: g.leases,
                outcomes: OutcomeCounts(g.outcomes),
            };
            (value, group)
        }))
    }
}

/// Counts by outcome, as a map from each outcome's name in `OUTCOMES` order.
struct OutcomeCounts([u64; 8]);

impl Serialize for OutcomeCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(OUTCOMES.iter().map(|o| o.name()).zip(self.0))
    }
}

/// Exits by health state, as a map from each state's name in `Health::ALL` order.
struct StateCounts([u32; 5]);

impl Serialize for StateCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(Health::ALL.iter().map(|h| h.name()).zip(self.0))
    }
}

/// An exit's tags as a map, in their (sorted) order.
struct Tags<'a>(&'a [(String, String)]);

impl Serialize for Tags<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// The exit x site matrix, compact: one row per exit (in `exits` order), one cell per site,
/// each cell a list in `columns` order or None where the exit has not served the site.
struct Matrix<'a> {
    snap: &'a Snapshot,
    pace: Pace<'a>,
}

impl Serialize for Matrix<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Shape<'a> {
            exits: Vec<&'a str>,
            sites: Vec<&'a str>,
            columns: &'static [&'static str],
            cells: Rows<'a>,
        }
        let snap = self.snap;
        Shape {
            exits: snap.exits.iter().map(|e| e.exit.id.as_str()).collect(),
            sites: snap.sites.iter().map(|s| s.site.as_str()).collect(),
            columns: MATRIX_COLUMNS,
            cells: Rows(snap, self.pace),
        }
        .serialize(s)
    }
}

/// The matrix's rows, built while serializing: 10,000 cells need no list of their own.
struct Rows<'a>(&'a Snapshot, Pace<'a>);

impl Serialize for Rows<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let snap = self.0;
        let mut rows = s.serialize_seq(Some(snap.exits.len()))?;
        for i in 0..snap.exits.len() {
            self.1.tick(i);
            rows.serialize_element(&Row { snap, exit: i })?;
        }
        rows.end()
    }
}

struct Row<'a> {
    snap: &'a Snapshot,
    exit: usize,
}

impl Serialize for Row<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut row = s.serialize_seq(Some(self.snap.sites.len()))?;
        for site in &self.snap.sites {
            row.serialize_element(&site.cells[self.exit].as_ref().map(CellDoc))?;
        }
        row.end()
    }
}

/// One cell: its values in `MATRIX_COLUMNS` order.
struct CellDoc<'a>(&'a Cell);

impl Serialize for CellDoc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let rates = c.tally.recent_rates();
        let mut seq = s.serialize_seq(Some(MATRIX_COLUMNS.len()))?;
        seq.serialize_element(c.state_name())?;
        seq.serialize_element(&c.tally.reports())?;
        seq.serialize_element(&rates.map(|r| r.0))?;
        seq.serialize_element(&rates.map(|r| r.1))?;
        seq.serialize_element(&c.tally.latency.quantile(0.5))?;
        seq.serialize_element(&c.tally.latency.quantile(0.95))?;
        seq.serialize_element(&c.tally.latency.quantile(0.99))?;
        seq.serialize_element(&c.quarantines)?;
        seq.end()
    }
}

#[derive(Serialize)]
struct StoreDoc<'a> {
    /// Masked.
    url: &'a str,
    online: bool,
    exits: FleetExits<'a>,
}

/// Fleet-wide figures by exit id; empty while the store does not answer.
struct FleetExits<'a> {
    snap: &'a Snapshot,
    fleet: Option<&'a [ExitCounts]>,
    pace: Pace<'a>,
}

impl Serialize for FleetExits<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct FleetExit {
            active: u64,
            leases: u64,
            outcomes: OutcomeCounts,
        }
        let counts = self.fleet.unwrap_or_default();
        let mut map = s.serialize_map(Some(counts.len()))?;
        for (i, (e, c)) in self.snap.exits.iter().zip(counts).enumerate() {
            self.pace.tick(i);
            map.serialize_entry(&e.exit.id, &FleetExit { active: c.active, leases: c.leases, outcomes: OutcomeCounts(c.outcomes) })?;
        }
        map.end()
    }
}
