//! The snapshot and recalibration records as plain Python data.

use super::events::Dispatch;
use crate::health::State as Health;
use crate::metrics::Tally;
use crate::outcome::OUTCOMES;
use crate::pool::{Pool, Recalibration};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Everything the pool knows, as plain data (JSON-serialisable); the schema is the
/// `Snapshot` TypedDict in the stubs.
pub(super) fn snapshot<'py>(py: Python<'py>, core: &Pool, dispatch: &Dispatch) -> PyResult<Bound<'py, PyDict>> {
    let (snap, fleet) = py.detach(|| {
        let snap = core.snapshot();
        let ids: Vec<&str> = snap.exits.iter().map(|e| e.exit.id.as_str()).collect();
        let fleet = core.fleet_counts(&ids);
        (snap, fleet)
    });
    dispatch.deliver(py, core);
    let names = OUTCOMES.map(|o| o.name());
    let outcomes = |counts: &[u64; 8]| -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (name, n) in names.iter().zip(counts) {
            d.set_item(*name, *n)?;
        }
        Ok(d)
    };
    let latency = |t: &Tally| -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("p50", t.latency.quantile(0.5))?;
        d.set_item("p95", t.latency.quantile(0.95))?;
        d.set_item("p99", t.latency.quantile(0.99))?;
        d.set_item("count", t.latency.count())?;
        Ok(d)
    };
    let exits = PyList::empty(py);
    for e in &snap.exits {
        let d = PyDict::new(py);
        d.set_item("exit_id", &e.exit.id)?;
        d.set_item("proxy", e.exit.proxy.masked())?;
        d.set_item("ip", e.exit.ip.map(|ip| ip.to_string()))?;
        d.set_item("capacity", e.exit.capacity)?;
        let tags = PyDict::new(py);
        for (k, v) in &e.exit.tags {
            tags.set_item(k, v)?;
        }
        d.set_item("tags", tags)?;
        d.set_item("state", e.state.name())?;
        d.set_item("state_since", e.state_since)?;
        d.set_item("time_in_state", snap.now - e.state_since)?;
        d.set_item("quarantines", e.quarantines)?;
        d.set_item("quarantined_seconds", e.quarantined_seconds)?;
        d.set_item("benched", e.benched)?;
        d.set_item("active_leases", e.active)?;
        d.set_item("sessions", e.sessions)?;
        d.set_item("leases", e.tally.leases)?;
        d.set_item("outcomes", outcomes(&e.tally.outcomes)?)?;
        let rates = e.tally.recent_rates();
        d.set_item("success_rate", rates.map(|r| r.0))?;
        d.set_item("captcha_rate", rates.map(|r| r.1))?;
        d.set_item("latency", latency(&e.tally)?)?;
        d.set_item("weight", e.weight)?;
        exits.append(d)?;
    }
    // The exit x site matrix, compact: one row per exit (in `exits` order), one cell per
    // site, each cell a list in `columns` order or None where the exit has not served the site.
    let matrix = PyDict::new(py);
    matrix.set_item("exits", snap.exits.iter().map(|e| e.exit.id.as_str()).collect::<Vec<_>>())?;
    matrix.set_item("sites", snap.sites.iter().map(|s| s.site.as_str()).collect::<Vec<_>>())?;
    matrix.set_item("columns", ["state", "reports", "success_rate", "captcha_rate", "p50", "p95", "p99", "quarantines"])?;
    let rows = PyList::empty(py);
    for i in 0..snap.exits.len() {
        let row = PyList::empty(py);
        for site in &snap.sites {
            match &site.cells[i] {
                None => row.append(py.None())?,
                Some(c) => {
                    let rates = c.tally.recent_rates();
                    let cell = (
                        c.state_name(),
                        c.tally.reports(),
                        rates.map(|r| r.0),
                        rates.map(|r| r.1),
                        c.tally.latency.quantile(0.5),
                        c.tally.latency.quantile(0.95),
                        c.tally.latency.quantile(0.99),
                        c.quarantines,
                    );
                    row.append(PyList::new(py, cell.into_pyobject(py)?.iter())?)?;
                }
            }
        }
        rows.append(row)?;
    }
    matrix.set_item("cells", rows)?;
    let sites = PyList::empty(py);
    for s in &snap.sites {
        let d = PyDict::new(py);
        d.set_item("site", &s.site)?;
        d.set_item("incident", s.incident)?;
        let mut total = [0u64; 8];
        for c in s.cells.iter().flatten() {
            for (t, n) in total.iter_mut().zip(c.tally.outcomes) {
                *t += n;
            }
        }
        d.set_item("outcomes", outcomes(&total)?)?;
        sites.append(d)?;
    }
    let f = &snap.pool;
    let pool = PyDict::new(py);
    pool.set_item("exits", snap.exits.len())?;
    pool.set_item("in_service", f.in_service)?;
    pool.set_item("benched", f.benched)?;
    let states = PyDict::new(py);
    for (s, n) in Health::ALL.iter().zip(f.states) {
        states.set_item(s.name(), n)?;
    }
    pool.set_item("states", states)?;
    pool.set_item("throughput", f.throughput)?;
    pool.set_item("gini", f.gini)?;
    pool.set_item("ejected_fraction", f.ejected_fraction)?;
    let half_open = PyDict::new(py);
    half_open.set_item("trials", f.trials)?;
    half_open.set_item("succeeded", f.trials_recovered)?;
    half_open.set_item("success_rate", (f.trials > 0).then(|| f.trials_recovered as f64 / f.trials as f64))?;
    pool.set_item("half_open", half_open)?;
    let wait = PyDict::new(py);
    wait.set_item("p50", f.wait_p50)?;
    wait.set_item("p99", f.wait_p99)?;
    pool.set_item("wait", wait)?;
    pool.set_item("incidents", &f.incidents)?;
    pool.set_item("global_incident", f.global_incident)?;
    pool.set_item("sessions", snap.sessions)?;
    pool.set_item("live_leases", snap.live_leases)?;
    let counts = PyDict::new(py);
    counts.set_item("acquired", snap.counts.acquired)?;
    counts.set_item("released", snap.counts.released)?;
    counts.set_item("expired", snap.counts.expired)?;
    counts.set_item("ignored_releases", snap.counts.ignored_releases)?;
    counts.set_item("waits", snap.counts.waits)?;
    counts.set_item("outcomes", outcomes(&snap.counts.outcomes)?)?;
    let d = PyDict::new(py);
    d.set_item("version", 1)?;
    d.set_item("time", snap.now)?;
    d.set_item("pool", pool)?;
    d.set_item("counts", counts)?;
    d.set_item("exits", exits)?;
    d.set_item("sites", sites)?;
    d.set_item("matrix", matrix)?;
    d.set_item("sessions", snap.sessions)?;
    d.set_item("live_leases", snap.live_leases)?;
    let store = match core.store_status() {
        None => None,
        Some((url, online)) => {
            let sd = PyDict::new(py);
            sd.set_item("url", url)?;
            sd.set_item("online", online)?;
            let per_exit = PyDict::new(py);
            if let Some(counts) = &fleet {
                for (e, c) in snap.exits.iter().zip(counts) {
                    let x = PyDict::new(py);
                    x.set_item("active", c.active)?;
                    x.set_item("leases", c.leases)?;
                    x.set_item("outcomes", outcomes(&c.outcomes)?)?;
                    per_exit.set_item(&e.exit.id, x)?;
                }
            }
            sd.set_item("exits", per_exit)?;
            Some(sd)
        }
    };
    d.set_item("store", store)?;
    Ok(d)
}

/// `recalibrate()`'s changes, one dict each.
pub(super) fn changes_list(py: Python<'_>, changes: Vec<Recalibration>) -> PyResult<Bound<'_, PyList>> {
    let out = PyList::empty(py);
    for c in changes {
        let d = PyDict::new(py);
        d.set_item("exit_id", c.exit_id)?;
        d.set_item("old", c.old)?;
        d.set_item("new", c.new)?;
        d.set_item("served", c.served)?;
        d.set_item("safe", c.safe)?;
        out.append(d)?;
    }
    Ok(out)
}
