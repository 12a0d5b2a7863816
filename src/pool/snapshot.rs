//! The records a reader gets: events with names resolved, and the snapshot of every exit,
//! every (exit, site) cell and the pool-wide figures.

use super::{Counts, Pool};
use crate::exit::Exit;
use crate::health::{Admit, State as Health};
use crate::metrics::Tally;
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
    /// Indexed like `Snapshot::exits`; `None` where the exit has not served the site.
    pub cells: Vec<Option<Cell>>,
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
}

#[derive(Debug, Clone)]
pub struct Snapshot {
    pub now: f64,
    pub exits: Vec<ExitRecord>,
    pub sites: Vec<SiteRecord>,
    pub pool: PoolFigures,
    pub sessions: usize,
    pub live_leases: usize,
    pub counts: Counts,
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

    pub fn snapshot(&self) -> Snapshot {
        if let Some(fl) = &self.fleet {
            self.sync_health(fl);
        }
        let now = self.clock.now();
        let mut guard = self.state.lock();
        if guard.expire(now) && guard.waiters > 0 {
            self.freed.notify_all();
        }
        guard.board.poll(now);
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
        let listed: Vec<u32> = (0..st.exits.len() as u32).filter(|&h| !st.exits[h as usize].removed).collect();
        let exits: Vec<ExitRecord> = listed
            .iter()
            .map(|&h| {
                let s = &st.exits[h as usize];
                let b = st.board.tunnel_breaker(h);
                ExitRecord {
                    exit: s.exit.clone(),
                    state: b.state(),
                    state_since: b.since(),
                    quarantines: b.quarantines,
                    quarantined_seconds: b.total_quarantined(now),
                    active: s.active,
                    benched: s.benched,
                    sessions: sessions_per_exit[h as usize],
                    tally: s.tally.clone(),
                    weight: st.board.weight(h, 0),
                }
            })
            .collect();
        let sites: Vec<SiteRecord> = (1..st.site_names.len() as u32)
            .map(|site| SiteRecord {
                site: st.site_names[site as usize].to_string(),
                incident: st.board.incident_open(site),
                cells: listed
                    .iter()
                    .map(|&h| {
                        let tally = st.site_tallies.get(site as usize).and_then(|t| t.get(h as usize)).filter(|t| t.reports() > 0)?;
                        let b = st.board.site_breaker(h, site);
                        Some(Cell {
                            state: st.board.state(h, Some(site)),
                            cooling: matches!(st.board.admits(h, site, now), Admit::Cooling(_)),
                            tally: tally.clone(),
                            quarantines: b.map_or(0, |b| b.quarantines),
                            quarantined_seconds: b.map_or(0.0, |b| b.total_quarantined(now)),
                        })
                    })
                    .collect(),
            })
            .collect();
        let mut figures = PoolFigures::default();
        for e in &exits {
            figures.states[Health::ALL.iter().position(|s| *s == e.state).unwrap_or(0)] += 1;
            figures.benched += e.benched as u32;
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
        Snapshot {
            now,
            exits,
            sites,
            pool: figures,
            sessions: sessions_per_exit.iter().map(|&n| n as usize).sum(),
            live_leases: st.leases.live(),
            counts: Counts { waits: st.waits.waited_total, ..st.counts.clone() },
        }
    }
}
