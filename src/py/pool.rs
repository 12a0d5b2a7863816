//! `Pool` and `Lease`: the bindings over the core pool. They convert arguments, delegate, and
//! turn refusals into exceptions; the decisions are the core's.

use super::clock::PyManualClock;
use super::config::{extract_health, extract_warmup, seconds};
use super::errors::{at_key, full_message, invalid_input, refusal_to_py, IntoPyResult};
use super::exit::{capacity_of, extract_int, judged_int, Float, PyExit};
use super::ring::extract_replicas;
use super::text::{any_text, check_text, opt_text, text, with_key, with_str};
use crate::clock::{Clock, SystemClock};
use crate::exit::Exit;
use crate::health::State as Health;
use crate::lease::LeaseId;
use crate::metrics::Tally;
use crate::outcome::{ErrorKind, Report, OUTCOMES};
use crate::pool::{Config, Grant, Pool, Refusal};
use crate::select::Strategy;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyString, PyType};
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[pyclass(name = "Pool", module = "exitpool", frozen)]
pub struct PyPool {
    core: Arc<Pool>,
    view: u32,
    /// How messages name this pool or subset.
    what: Arc<str>,
    dispatch: Arc<Dispatch>,
}

/// Hands new events to the `exitpool` logger and the `on_event` callbacks, once each.
#[derive(Default)]
struct Dispatch {
    listeners: Mutex<Vec<Py<PyAny>>>,
    delivered: AtomicU64,
}

impl Dispatch {
    /// Costs one atomic load when nothing happened, which is nearly always.
    #[inline]
    fn deliver(&self, py: Python<'_>, core: &Pool) {
        let seq = core.event_seq();
        let from = self.delivered.load(Ordering::Acquire);
        if seq <= from || self.delivered.compare_exchange(from, seq, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return;
        }
        // Delivery must never fail the call that triggered it.
        let _ = self.deliver_range(py, core, from, seq);
    }

    /// Delivers events `from..to`: exactly the range this caller claimed, since another
    /// thread may already have claimed the events after it.
    fn deliver_range(&self, py: Python<'_>, core: &Pool, from: u64, to: u64) -> PyResult<()> {
        static DELIVER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let events = events_list(py, core, from, to)?;
        let listeners: Vec<Py<PyAny>> = self.listeners.lock().iter().map(|l| l.clone_ref(py)).collect();
        DELIVER.import(py, "exitpool._events", "_deliver")?.call1((listeners, events))?;
        Ok(())
    }
}

fn events_list<'py>(py: Python<'py>, core: &Pool, since: u64, until: u64) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for e in core.events(since).into_iter().take_while(|e| e.seq < until) {
        let d = PyDict::new(py);
        d.set_item("seq", e.seq)?;
        d.set_item("time", e.time)?;
        d.set_item("kind", e.kind)?;
        d.set_item("exit_id", e.exit_id)?;
        d.set_item("site", e.site)?;
        d.set_item("from", e.from)?;
        d.set_item("to", e.to)?;
        d.set_item("message", e.message)?;
        out.append(d)?;
    }
    Ok(out)
}

fn extract_exits(py: Python<'_>, exits: &Bound<'_, PyAny>) -> PyResult<Vec<Exit>> {
    let mut out = Vec::new();
    for item in exits.try_iter()? {
        let item = item?;
        let exit = item.cast::<PyExit>().map_err(|_| {
            invalid_input(
                py,
                format!("a Pool holds Exit objects, got {}", item.get_type().name().map(|n| n.to_string()).unwrap_or_default()),
            )
        })?;
        out.push((*exit.get().inner).clone());
    }
    Ok(out)
}

fn timeout_of(py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<f64>> {
    timeout.map(|t| seconds(py, "timeout", t)).transpose()
}

#[pymethods]
impl PyPool {
    #[new]
    // The strings' defaults are applied below, where every str is read as text (a str default
    // cannot be a `Bound`); the signature Python shows keeps them.
    #[pyo3(signature = (exits, *, strategy=None, replicas=None, session_ttl=Float(900.0), lease_ttl=Float(120.0),
                        max_leases=None, balance_factor=None, warmup=None, clock=None, seed=None, cooldown=Float(8.0),
                        health=None, calibrate=false, store=None, namespace=None),
           text_signature = "(exits, *, strategy=\"weighted\", replicas=None, session_ttl=900.0, lease_ttl=120.0, max_leases=None, balance_factor=None, warmup=None, clock=None, seed=None, cooldown=8.0, health=None, calibrate=False, store=None, namespace=\"exitpool\")")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        exits: &Bound<'_, PyAny>,
        strategy: Option<&Bound<'_, PyString>>,
        replicas: Option<&Bound<'_, PyAny>>,
        session_ttl: Float,
        lease_ttl: Float,
        max_leases: Option<&Bound<'_, PyAny>>,
        balance_factor: Option<Float>,
        warmup: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyManualClock>>,
        seed: Option<&Bound<'_, PyAny>>,
        cooldown: Float,
        health: Option<&Bound<'_, PyDict>>,
        calibrate: bool,
        store: Option<&Bound<'_, PyString>>,
        namespace: Option<&Bound<'_, PyString>>,
    ) -> PyResult<PyPool> {
        let max_leases = match max_leases {
            Some(m) if !m.is_none() => Some(judged_int(py, m, "max_leases", crate::pool::check_max_leases)?),
            _ => None,
        };
        let seed = match seed {
            Some(s) if !s.is_none() => Some(
                extract_int(py, s, "seed", 0..=u64::MAX.into(), " (None means a random seed)")
                    .map_err(|e| at_key(py, e, &["seed"], "seed"))? as u64,
            ),
            _ => None,
        };
        let strategy = opt_text(strategy, "strategy")?.unwrap_or(Cow::Borrowed("weighted"));
        let (store, namespace) = (opt_text(store, "store")?, opt_text(namespace, "namespace")?.unwrap_or(Cow::Borrowed("exitpool")));
        let cfg = Config {
            strategy: Strategy::parse(&strategy).py_err(py)?,
            replicas: match replicas {
                Some(r) => extract_replicas(py, r)?,
                None => crate::ring::DEFAULT_REPLICAS,
            },
            session_ttl: session_ttl.0,
            lease_ttl: lease_ttl.0,
            max_leases,
            balance_factor: balance_factor.map(|Float(f)| f),
            warmup: match warmup {
                Some(w) => extract_warmup(py, w)?,
                None => None,
            },
            cooldown: cooldown.0,
            seed,
            health: extract_health(py, health)?,
            calibrate,
        };
        let clock: Arc<dyn Clock> = match clock {
            Some(c) => Arc::new(c.get().inner.clone()),
            None => Arc::new(SystemClock::new()),
        };
        let exits = extract_exits(py, exits)?;
        let store = match store {
            None => None,
            Some(url) => {
                let (url, namespace, clock) = (url.into_owned(), namespace.into_owned(), clock.clone());
                Some(py.detach(move || crate::store::open(&url, &namespace, clock)).py_err(py)?)
            }
        };
        let core = py
            .detach(move || match store {
                None => Pool::new(exits, cfg, clock),
                Some(store) => Pool::with_store(exits, cfg, clock, store),
            })
            .py_err(py)?;
        Ok(PyPool { core: core.into_arc(), view: 0, what: "the pool".into(), dispatch: Arc::default() })
    }

    /// A pool built from a TOML file; the loader and its validation live in Python
    /// (`exitpool._config`), where `tomllib` is.
    /// Keywords given here (a `clock`, a `store` for tests) win over the file's.
    #[classmethod]
    #[pyo3(signature = (path, **overrides))]
    fn from_config(cls: &Bound<'_, PyType>, path: &Bound<'_, PyAny>, overrides: Option<&Bound<'_, PyDict>>) -> PyResult<Py<PyAny>> {
        let py = cls.py();
        Ok(py.import("exitpool._config")?.getattr("from_config")?.call((cls, path), overrides)?.unbind())
    }

    /// A context manager (`with` and `async with`) that leases an exit for `key`.
    #[pyo3(signature = (key=None, *, site=None, timeout=None, avoid=None))]
    fn lease(
        &self,
        py: Python<'_>,
        key: Option<Bound<'_, PyString>>,
        site: Option<Bound<'_, PyString>>,
        timeout: Option<Float>,
        avoid: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyLease> {
        let avoid = match avoid {
            None => None,
            Some(ids) => avoid_of(py, ids, key.is_some())?,
        };
        // Read once here, so that a key that is not valid text is refused by name; the lease
        // reads the cached UTF-8 again when it is entered.
        key.as_ref().map(|k| check_text(k, "key")).transpose()?;
        site.as_ref().map(|s| check_text(s, "site")).transpose()?;
        Ok(PyLease {
            core: self.core.clone(),
            dispatch: self.dispatch.clone(),
            view: self.view,
            what: self.what.clone(),
            key: key.map(Bound::unbind),
            site: site.map(Bound::unbind),
            timeout: timeout_of(py, timeout.map(|Float(t)| t))?,
            avoid,
            state: Mutex::new(LeaseState::default()),
        })
    }

    /// Leases at once (waiting up to `timeout` for a free slot); pair with `release`.
    #[pyo3(signature = (key=None, *, site=None, timeout=None, avoid=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        key: Option<Bound<'_, PyString>>,
        site: Option<Bound<'_, PyString>>,
        timeout: Option<Float>,
        avoid: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyLease> {
        let lease = self.lease(py, key, site, timeout, avoid)?;
        lease.enter(py)?;
        Ok(lease)
    }

    /// Ends a lease, with an outcome if given (else the one reported, else success).
    /// Returns False if the lease had already ended (expired or released): nothing changes.
    /// The slot is always freed: a report that is bad input frees it without health evidence,
    /// then raises.
    #[pyo3(signature = (lease, *, status=None, latency=None, captcha=None, error=None, retry_after=None))]
    #[allow(clippy::too_many_arguments)]
    fn release(
        &self,
        py: Python<'_>,
        lease: &Bound<'_, PyLease>,
        status: Option<&Bound<'_, PyAny>>,
        latency: Option<&Bound<'_, PyAny>>,
        captcha: Option<&Bound<'_, PyAny>>,
        error: Option<&Bound<'_, PyAny>>,
        retry_after: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let lease = lease.get();
        let recorded = if !Arc::ptr_eq(&lease.core, &self.core) {
            Err(invalid_input(py, "this lease belongs to another pool (it was freed, unreported)"))
        } else if status.is_some() || latency.is_some() || captcha.is_some() || error.is_some() || retry_after.is_some() {
            lease.record(py, status, latency, captcha, error, retry_after)
        } else {
            Ok(())
        };
        match recorded {
            Ok(()) => Ok(lease.finish(py, Ending::Report(None))),
            Err(e) => {
                lease.finish(py, Ending::Unused);
                Err(e)
            }
        }
    }

    /// Where `key` lives now (its live session's exit, else its ring exit), without leasing.
    fn assign(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<PyExit> {
        // With a shared store this asks the store for the key's session: without the GIL.
        let shared = self.core.is_shared();
        with_key(key, "key", |k| if shared { py.detach(|| self.core.assign(self.view, k)) } else { self.core.assign(self.view, k) })?
            .map(|inner| PyExit { inner })
            .map_err(|e| refusal_to_py(py, e, &self.what, None))
    }

    /// Stops new sessions on the exit; live ones drain. Returns the keys of the live sessions,
    /// which will move when they end.
    fn bench(&self, py: Python<'_>, exit_id: &Bound<'_, PyString>) -> PyResult<Vec<String>> {
        self.core.bench(&text(exit_id, "exit_id")?).py_err(py).inspect(|_| self.dispatch.deliver(py, &self.core))
    }

    /// Puts a benched exit back in service.
    fn unbench(&self, py: Python<'_>, exit_id: &Bound<'_, PyString>) -> PyResult<()> {
        self.core.unbench(&text(exit_id, "exit_id")?).py_err(py).inspect(|_| self.dispatch.deliver(py, &self.core))
    }

    /// Ends the key's sticky session; returns whether there was one.
    fn end_session(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        with_key(key, "key", |k| py.detach(|| self.core.end_session(k)))
    }

    /// Changes an exit's capacity (its weight); only its own arcs of the ring move.
    fn set_capacity(&self, py: Python<'_>, exit_id: &Bound<'_, PyString>, capacity: &Bound<'_, PyAny>) -> PyResult<()> {
        let exit_id = text(exit_id, "exit_id")?;
        let c = capacity_of(py, capacity)?;
        self.core.set_capacity(&exit_id, c).py_err(py)
    }

    /// Adds an exit; only keys in its new arcs move to it (when their sessions end).
    fn add(&self, py: Python<'_>, exit: &Bound<'_, PyExit>) -> PyResult<()> {
        self.core.add((*exit.get().inner).clone()).py_err(py)
    }

    /// Removes an exit for good and returns it. Live sessions on it get `SessionExitLost`.
    fn remove(&self, py: Python<'_>, exit_id: &Bound<'_, PyString>) -> PyResult<PyExit> {
        self.core.remove(&text(exit_id, "exit_id")?).py_err(py).map(|inner| PyExit { inner })
    }

    /// A view over the exits whose tags match, with its own ring, sharing leases, sessions
    /// and health with the whole pool.
    #[pyo3(signature = (**tags))]
    fn subset(&self, py: Python<'_>, tags: Option<&Bound<'_, PyDict>>) -> PyResult<PyPool> {
        let mut filter = Vec::new();
        if let Some(tags) = tags {
            for (k, v) in tags.iter() {
                let Ok(v) = v.cast::<PyString>() else {
                    return Err(invalid_input(py, format!("subset tag {k} must be a str, got {}", v.repr()?)));
                };
                filter.push((any_text(&k, "a subset tag name")?.into_owned(), text(v, "a subset tag value")?.into_owned()));
            }
        }
        filter.sort();
        let what: String = if filter.is_empty() {
            "the pool".into()
        } else {
            let parts: Vec<String> = filter.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            format!("subset({})", parts.join(", "))
        };
        let view = self.core.subset(filter).py_err(py)?;
        Ok(PyPool { core: self.core.clone(), view, what: what.into(), dispatch: self.dispatch.clone() })
    }

    /// The exits in service in this pool or subset.
    #[getter]
    fn exits(&self) -> Vec<PyExit> {
        self.core.members(self.view).into_iter().map(|inner| PyExit { inner }).collect()
    }

    /// The pool's exit by id (benched ones included).
    fn exit(&self, py: Python<'_>, exit_id: &Bound<'_, PyString>) -> PyResult<PyExit> {
        self.core.exit(&text(exit_id, "exit_id")?).py_err(py).map(|inner| PyExit { inner })
    }

    /// An exit's health: "healthy", "degraded", "probing", "quarantined" or "dead". With a
    /// site, the worse of its tunnel's state and its state for that site.
    #[pyo3(signature = (exit_id, site=None))]
    fn state(&self, py: Python<'_>, exit_id: &Bound<'_, PyString>, site: Option<&Bound<'_, PyString>>) -> PyResult<&'static str> {
        let (exit_id, site) = (text(exit_id, "exit_id")?, opt_text(site, "site")?);
        py.detach(|| self.core.state_name(&exit_id, site.as_deref())).py_err(py)
    }

    /// Puts an exit back in service (healthy) everywhere, whatever its state.
    fn revive(&self, py: Python<'_>, exit_id: &Bound<'_, PyString>) -> PyResult<()> {
        let exit_id = text(exit_id, "exit_id")?;
        py.detach(|| self.core.revive(&exit_id)).py_err(py).inspect(|_| self.dispatch.deliver(py, &self.core))
    }

    /// The events kept in the buffer (the last 1,000) with `seq >= since`, oldest first.
    #[pyo3(signature = (since=None))]
    fn events<'py>(&self, py: Python<'py>, since: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyList>> {
        let since = match since {
            Some(s) if !s.is_none() => extract_int(py, s, "since", 0..=u64::MAX.into(), " (an event's seq)")? as u64,
            _ => 0,
        };
        self.dispatch.deliver(py, &self.core);
        events_list(py, &self.core, since, u64::MAX)
    }

    /// Calls `fn(event)` for every event from now on (after the call that produced it);
    /// returns `fn`, so it works as a decorator. A raising callback is logged, never raised.
    fn on_event(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<Py<PyAny>> {
        if !callback.bind(py).is_callable() {
            return Err(invalid_input(py, format!("on_event takes a callable, got {}", callback.bind(py).repr()?)));
        }
        self.dispatch.listeners.lock().push(callback.clone_ref(py));
        Ok(callback)
    }

    /// Sets capacities from the last 24 h of measurement (needs `calibrate=True`); returns the
    /// changes, an exit whose new capacity is 0 having been benched.
    fn recalibrate<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        let changes = self.core.recalibrate().py_err(py)?;
        self.dispatch.deliver(py, &self.core);
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

    /// The exits a probe loop should check now: quarantined exits whose backoff is over, dead
    /// exits, and exits in service that took no lease for `idle` seconds.
    #[pyo3(signature = (idle=Float(30.0)), text_signature = "($self, idle=30.0)")]
    fn probe_due(&self, py: Python<'_>, idle: Float) -> PyResult<Vec<PyExit>> {
        let idle = seconds(py, "idle", idle.0)?;
        Ok(self.core.probe_due(idle).into_iter().map(|inner| PyExit { inner }).collect())
    }

    /// Feeds an active probe's verdict into the exit's health: probes decide who comes back.
    /// An `observed_ip` other than the exit's `ip` is drift: an event, and a failure. Returns
    /// whether the exit drifted.
    #[pyo3(signature = (exit_id, ok, *, observed_ip=None, detail=None), text_signature = "($self, exit_id, ok, *, observed_ip=None, detail=\"\")")]
    fn record_probe(
        &self,
        py: Python<'_>,
        exit_id: &Bound<'_, PyString>,
        ok: bool,
        observed_ip: Option<&Bound<'_, PyString>>,
        detail: Option<&Bound<'_, PyString>>,
    ) -> PyResult<bool> {
        let (exit_id, observed_ip) = (text(exit_id, "exit_id")?, opt_text(observed_ip, "observed_ip")?);
        let detail = opt_text(detail, "detail")?.unwrap_or_default();
        let (exit_id, detail) = (&*exit_id, &*detail);
        let observed = match observed_ip.as_deref() {
            None => None,
            Some(s) => Some(
                s.trim()
                    .parse::<std::net::IpAddr>()
                    .map_err(|_| invalid_input(py, format!("observed_ip {} is not an IP address", crate::mask::shown(s))))?,
            ),
        };
        let drifted = py.detach(|| self.core.record_probe(exit_id, ok, observed, detail)).py_err(py)?;
        self.dispatch.deliver(py, &self.core);
        Ok(drifted)
    }

    /// The current time on the pool's clock.
    fn now(&self) -> f64 {
        self.core.now()
    }

    /// Everything the pool knows, as plain data (JSON-serialisable); the schema is the
    /// `Snapshot` TypedDict in the stubs.
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (snap, fleet) = py.detach(|| {
            let snap = self.core.snapshot();
            let ids: Vec<&str> = snap.exits.iter().map(|e| e.exit.id.as_str()).collect();
            let fleet = self.core.fleet_counts(&ids);
            (snap, fleet)
        });
        self.dispatch.deliver(py, &self.core);
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
        let store = match self.core.store_status() {
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

    /// The shared store's URL (credentials masked), or None for a pool of its own.
    #[getter]
    fn store(&self) -> Option<String> {
        self.core.store_status().map(|s| s.0)
    }

    /// Whether calls wait on a network store: `async with` then runs them on a thread.
    #[getter]
    fn _shared(&self) -> bool {
        self.core.is_shared()
    }

    fn __len__(&self) -> usize {
        self.core.members(self.view).len()
    }

    fn __contains__(&self, item: &Bound<'_, PyAny>) -> PyResult<bool> {
        let id = match item.cast::<PyExit>() {
            Ok(e) => e.get().inner.id.clone(),
            Err(_) => match item.cast::<PyString>() {
                Ok(s) => s.to_string(),
                Err(_) => return Ok(false),
            },
        };
        Ok(self.core.members(self.view).iter().any(|e| e.id == id))
    }

    fn __repr__(&self) -> String {
        let n = self.core.members(self.view).len();
        if self.view == 0 {
            match self.core.store_status() {
                None => format!("Pool({n} exits, strategy='{}')", self.core.config().strategy.name()),
                Some((url, _)) => format!("Pool({n} exits, strategy='{}', store='{url}')", self.core.config().strategy.name()),
            }
        } else {
            format!("Pool.{} ({n} exits)", self.what)
        }
    }
}

#[derive(Default)]
struct LeaseState {
    id: Option<LeaseId>,
    exit: Option<Arc<Exit>>,
    choice: &'static str,
    health: &'static str,
    report: Option<Report>,
    /// Ended (released, expired, or given up before it was granted): a grant that arrives
    /// after this is handed back unused.
    done: bool,
    /// When the async acquire first found every slot full (the sync one keeps it on its stack).
    waiting_since: Option<Instant>,
}

/// How a lease ends.
#[derive(Clone, Copy)]
enum Ending {
    /// With the reported outcome, else this fallback, else success.
    Report(Option<Report>),
    /// With no evidence about the exit: its caller was gone, or its report was bad input.
    Unused,
}

/// One lease of one exit. Made by `pool.lease(...)` (acquired on entering the block) or
/// `pool.acquire(...)` (acquired already).
#[pyclass(name = "Lease", module = "exitpool", frozen)]
pub struct PyLease {
    core: Arc<Pool>,
    dispatch: Arc<Dispatch>,
    view: u32,
    what: Arc<str>,
    key: Option<Py<PyString>>,
    site: Option<Py<PyString>>,
    timeout: Option<f64>,
    /// Exit ids a keyless pick passes over (`avoid=`); `None` for nearly every lease.
    avoid: Option<Box<[Box<str>]>>,
    state: Mutex<LeaseState>,
}

/// `avoid=`: exit ids (strings) for a keyless lease. A key with a non-empty `avoid` is bad
/// input: an account goes to its own exit, and a caller who wants it elsewhere ends its session.
fn avoid_of(py: Python<'_>, ids: &Bound<'_, PyAny>, keyed: bool) -> PyResult<Option<Box<[Box<str>]>>> {
    if ids.is_instance_of::<PyString>() {
        return Err(invalid_input(py, "avoid must be a collection of exit ids, not one string"));
    }
    let mut out = Vec::new();
    for id in ids.try_iter()? {
        let id = id?;
        let id = id.cast::<PyString>().map_err(|_| {
            invalid_input(
                py,
                format!("avoid holds {}, not an exit id (str)", id.get_type().name().map(|n| n.to_string()).unwrap_or_default()),
            )
        })?;
        out.push(Box::<str>::from(text(id, "an exit id in avoid")?));
    }
    if out.is_empty() {
        return Ok(None);
    }
    if keyed {
        return Err(invalid_input(
            py,
            "avoid is for keyless leases: a keyed lease goes to its session's exit (end the session to move it)",
        ));
    }
    Ok(Some(out.into_boxed_slice()))
}

/// `None` means "as long as it takes"; a slot always frees within `lease_ttl` anyway.
fn wait_budget(timeout: Option<f64>) -> Duration {
    timeout.and_then(|t| Duration::try_from_secs_f64(t).ok()).unwrap_or(Duration::MAX)
}

/// How long one GIL-free wait lasts before Python gets a chance to see Ctrl-C.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

impl PyLease {
    fn attempt(&self, py: Python<'_>, wait: Duration) -> Result<Grant, Refusal> {
        // Nearly always empty: no allocation then.
        let avoid: Vec<&str> = match &self.avoid {
            None => Vec::new(),
            Some(ids) => ids.iter().map(|id| &**id).collect(),
        };
        let run = |k: Option<&str>, s: Option<&str>| {
            if wait.is_zero() && !self.core.is_shared() {
                self.core.try_acquire_avoiding(self.view, k, s, &avoid)
            } else if wait.is_zero() {
                // A shared store is a network round trip: other threads run meanwhile.
                py.detach(|| self.core.try_acquire_avoiding(self.view, k, s, &avoid))
            } else {
                py.detach(|| self.core.acquire_within_avoiding(self.view, k, s, &avoid, wait))
            }
        };
        // Both strings are immutable and held by this lease for the whole call.
        let key = self.key.as_ref().map(|k| k.bind(py));
        let site = self.site.as_ref().map(|s| s.bind(py));
        let r = match (key, site) {
            (None, None) => Ok(run(None, None)),
            (Some(k), None) => with_str(k, |k| run(Some(k), None)),
            (None, Some(s)) => with_str(s, |s| run(None, Some(s))),
            (Some(k), Some(s)) => with_str(k, |k| with_str(s, |s| run(Some(k), Some(s)))).and_then(|r| r),
        };
        // Cannot fail: `lease()` read both strings already (refusing one that is not valid
        // text by name), and they are immutable with their UTF-8 cached since.
        r.unwrap_or(Err(Refusal::NoExits))
    }

    /// Takes a grant; `false` if the lease was given up meanwhile (a cancelled async acquire
    /// whose attempt on a worker thread succeeded after the cancel), the slot then going back
    /// unused. A grant that had to wait since `waiting_since` counts as a wait, on both paths.
    fn granted(&self, py: Python<'_>, grant: Grant, waiting_since: Option<Instant>) -> bool {
        let mut st = self.state.lock();
        if st.done {
            drop(st);
            self.core_release(py, grant.id, None);
            return false;
        }
        if let Some(since) = waiting_since {
            self.core.record_wait(since.elapsed().as_secs_f64());
        }
        st.id = Some(grant.id);
        st.exit = Some(grant.exit);
        st.choice = grant.choice.name();
        st.health = grant.state.name();
        true
    }

    /// The core's release, without the GIL when it may talk to a store.
    fn core_release(&self, py: Python<'_>, id: LeaseId, report: Option<&Report>) -> bool {
        let end = || match report {
            Some(r) => self.core.release(id, r),
            None => self.core.release_unused(id),
        };
        if self.core.is_shared() {
            py.detach(end)
        } else {
            end()
        }
    }

    fn check_fresh(&self, py: Python<'_>) -> PyResult<()> {
        let st = self.state.lock();
        if st.id.is_some() || st.done {
            return Err(invalid_input(py, "this lease was already entered; make a new one with pool.lease(...)"));
        }
        Ok(())
    }

    /// The sync acquire: one try with the GIL held (the common case), then GIL-free waits.
    fn enter(&self, py: Python<'_>) -> PyResult<()> {
        self.check_fresh(py)?;
        let mut result = self.attempt(py, Duration::ZERO);
        let waited = matches!(result, Err(Refusal::Full));
        // Clock reads cost tens of nanoseconds here: only a lease that must wait pays them.
        let started = waited.then(Instant::now);
        if let Some(started) = started {
            let budget = wait_budget(self.timeout);
            while matches!(result, Err(Refusal::Full)) {
                let left = budget.saturating_sub(started.elapsed());
                if left.is_zero() {
                    break;
                }
                result = self.attempt(py, left.min(SIGNAL_CHECK));
                if matches!(result, Err(Refusal::Full)) {
                    py.check_signals()?;
                }
            }
        }
        self.dispatch.deliver(py, &self.core);
        match result {
            Ok(grant) => {
                self.granted(py, grant, started);
                Ok(())
            }
            Err(r) => Err(refusal_to_py(py, r, &self.what, self.timeout)),
        }
    }

    /// Checks a report's every argument; bad input raises `InvalidInput` naming the value
    /// (never `TypeError` or `OverflowError`) and records nothing.
    fn record(
        &self,
        py: Python<'_>,
        status: Option<&Bound<'_, PyAny>>,
        latency: Option<&Bound<'_, PyAny>>,
        captcha: Option<&Bound<'_, PyAny>>,
        error: Option<&Bound<'_, PyAny>>,
        retry_after: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let status = status.map(|s| status_of(py, s)).transpose()?;
        let latency = latency.map(|v| seconds_of(py, "latency", v)).transpose()?;
        let captcha = match captcha {
            None => false,
            Some(c) => c
                .cast::<PyBool>()
                .map(|b| b.is_true())
                .map_err(|_| invalid_input(py, format!("captcha must be True or False, got {}", shown_repr(c))))?,
        };
        let error = error.map(|e| error_kind(py, e)).transpose()?;
        let retry_after = retry_after.map(|v| seconds_of(py, "retry_after", v)).transpose()?;
        let report = Report::new(status, latency, captcha, error, retry_after).py_err(py)?;
        self.state.lock().report = Some(report);
        Ok(())
    }

    /// Ends the lease once; later calls (and releases after expiry) change nothing.
    fn finish(&self, py: Python<'_>, ending: Ending) -> bool {
        let (id, report) = {
            let mut st = self.state.lock();
            let Some(id) = st.id else {
                st.done = true;
                return false;
            };
            if st.done {
                // Released before: the core ignores a spent id, and counts it as ignored.
                drop(st);
                return self.core.release(id, &Report::SUCCESS);
            }
            st.done = true;
            let report = match ending {
                Ending::Report(fallback) => Some(st.report.or(fallback).unwrap_or(Report::SUCCESS)),
                Ending::Unused => None,
            };
            (id, report)
        };
        let released = self.core_release(py, id, report.as_ref());
        self.dispatch.deliver(py, &self.core);
        released
    }

    fn exit_or_err(&self, py: Python<'_>) -> PyResult<Arc<Exit>> {
        self.state
            .lock()
            .exit
            .clone()
            .ok_or_else(|| invalid_input(py, "this lease has not been acquired yet: use it inside `with pool.lease(...)`"))
    }
}

/// A value as an error message may show it: its repr, masked (a proxy URL passed in the
/// wrong place keeps its password).
pub(super) fn shown_repr(v: &Bound<'_, PyAny>) -> String {
    v.repr().map(|r| crate::mask::mask_raw(&r.to_string_lossy())).unwrap_or_else(|_| "?".into())
}

/// `status=`: any whole number a client could give (see `Report::new`); a float, a str or a
/// number outside 64 bits is bad input, named.
fn status_of(py: Python<'_>, s: &Bound<'_, PyAny>) -> PyResult<i64> {
    if s.is_instance_of::<PyBool>() || !s.is_instance_of::<PyInt>() {
        return Err(invalid_input(py, format!("status must be a whole number, got {}", shown_repr(s))));
    }
    s.extract::<i64>().map_err(|_| invalid_input(py, crate::outcome::status_refusal(&s.to_string())))
}

/// `latency=` and `retry_after=`: a number, as Python's `float()` of it (range checked by
/// `Report::new`); a bool, anything that is no number, or an int too large for a float is bad
/// input, named (never `TypeError` or `OverflowError`).
fn seconds_of(py: Python<'_>, name: &str, v: &Bound<'_, PyAny>) -> PyResult<f64> {
    let f = if v.is_instance_of::<PyBool>() { None } else { v.extract::<f64>().ok() };
    f.ok_or_else(|| invalid_input(py, format!("{name} must be a number of seconds, got {}", shown_repr(v))))
}

fn classify(py: Python<'_>, exc: &Bound<'_, PyAny>) -> PyResult<ErrorKind> {
    static CLASSIFY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let f = CLASSIFY.import(py, "exitpool._outcome", "_classify")?;
    let kind: String = f.call1((exc,))?.extract()?;
    ErrorKind::parse(&kind).py_err(py)
}

/// `error=` may be an exception (classified) or one of the class names.
fn error_kind(py: Python<'_>, e: &Bound<'_, PyAny>) -> PyResult<ErrorKind> {
    if let Ok(s) = e.cast::<PyString>() {
        return ErrorKind::parse(&text(s, "error")?).py_err(py);
    }
    if e.is_instance_of::<pyo3::exceptions::PyBaseException>() {
        return classify(py, e);
    }
    Err(invalid_input(py, format!("error must be an exception or 'timeout', 'connect', 'proxy', 'other', got {}", e.repr()?)))
}

#[pymethods]
impl PyLease {
    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().enter(slf.py())?;
        Ok(slf)
    }

    /// Ends the lease: with the reported outcome, else success on a clean exit, else a
    /// failure classified from the exception (which propagates unchanged).
    #[pyo3(signature = (exc_type=None, exc=None, tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        let _ = tb;
        let fallback = if exc_type.is_some_and(|t| !t.is_none()) {
            let kind = match exc {
                Some(e) if !e.is_none() => classify(py, e).unwrap_or(ErrorKind::Other),
                _ => ErrorKind::Other,
            };
            Report::new(None, None, false, Some(kind), None).ok()
        } else {
            None
        };
        self.finish(py, Ending::Report(fallback));
        false
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        static AENTER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        slf.get().check_fresh(py)?;
        let timeout = slf.get().timeout;
        AENTER.import(py, "exitpool._lease", "_aenter")?.call1((slf, timeout))
    }

    #[pyo3(signature = (exc_type=None, exc=None, tb=None))]
    fn __aexit__<'py>(
        slf: Bound<'py, Self>,
        exc_type: Option<Bound<'py, PyAny>>,
        exc: Option<Bound<'py, PyAny>>,
        tb: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        static AEXIT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        AEXIT.import(py, "exitpool._lease", "_aexit")?.call1((slf, exc_type, exc, tb))
    }

    /// One non-waiting attempt for the async path: True when acquired, False while full;
    /// raises for refusals that waiting cannot fix.
    fn _try_enter(&self, py: Python<'_>) -> PyResult<bool> {
        if self.state.lock().id.is_some() {
            return Ok(true);
        }
        match self.attempt(py, Duration::ZERO) {
            Ok(grant) => {
                let since = self.state.lock().waiting_since;
                let taken = self.granted(py, grant, since);
                self.dispatch.deliver(py, &self.core);
                Ok(taken)
            }
            Err(Refusal::Full) => {
                self.state.lock().waiting_since.get_or_insert_with(Instant::now);
                Ok(false)
            }
            Err(r) => {
                self.dispatch.deliver(py, &self.core);
                Err(refusal_to_py(py, r, &self.what, Some(0.0)))
            }
        }
    }

    #[getter]
    fn _shared(&self) -> bool {
        self.core.is_shared()
    }

    /// Gives the lease up: the async acquire calls this when its task is cancelled. A slot
    /// already granted goes back unused, and so does one granted later by an attempt still
    /// running on a worker thread.
    fn _abandon(&self, py: Python<'_>) {
        self.finish(py, Ending::Unused);
    }

    fn _full_message(&self, timeout: Option<f64>) -> String {
        full_message(&self.what, timeout)
    }

    /// Records the outcome of the request made through this lease; it is applied when the
    /// lease ends and wins over any exception. An invalid report raises and records nothing.
    #[pyo3(signature = (*, status=None, latency=None, captcha=None, error=None, retry_after=None))]
    fn report(
        &self,
        py: Python<'_>,
        status: Option<&Bound<'_, PyAny>>,
        latency: Option<&Bound<'_, PyAny>>,
        captcha: Option<&Bound<'_, PyAny>>,
        error: Option<&Bound<'_, PyAny>>,
        retry_after: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.record(py, status, latency, captcha, error, retry_after)
    }

    #[getter]
    fn exit_id(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.exit_or_err(py)?.id.clone())
    }

    #[getter]
    fn exit(&self, py: Python<'_>) -> PyResult<PyExit> {
        Ok(PyExit { inner: self.exit_or_err(py)? })
    }

    /// The proxy URL (credentials included) for aiohttp's and httpx's `proxy=`.
    #[getter]
    fn proxy(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.exit_or_err(py)?.proxy.as_str().to_owned())
    }

    /// `{"http": url, "https": url}` for requests' `proxies=`.
    #[getter]
    fn proxies<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let exit = self.exit_or_err(py)?;
        let d = PyDict::new(py);
        d.set_item("http", exit.proxy.as_str())?;
        d.set_item("https", exit.proxy.as_str())?;
        Ok(d)
    }

    #[getter]
    fn key(&self, py: Python<'_>) -> Option<Py<PyString>> {
        self.key.as_ref().map(|k| k.clone_ref(py))
    }

    #[getter]
    fn site(&self, py: Python<'_>) -> Option<Py<PyString>> {
        self.site.as_ref().map(|s| s.clone_ref(py))
    }

    /// How the exit was chosen: 'session', 'ring', 'ring_bounded' or the keyless strategy.
    #[getter]
    fn strategy(&self) -> Option<&'static str> {
        let st = self.state.lock();
        st.id.map(|_| st.choice)
    }

    /// The exit's health for this lease's site when it was chosen ("healthy", "degraded" or
    /// "probing"), to log beside the request's own outcome.
    #[getter]
    fn exit_state(&self) -> Option<&'static str> {
        let st = self.state.lock();
        st.id.map(|_| st.health)
    }

    /// Whether the lease is live: acquired, not released, and not expired by the pool's clock
    /// (past `lease_ttl` its slot may be someone else's).
    #[getter]
    fn active(&self) -> bool {
        let st = self.state.lock();
        st.id.is_some_and(|id| !st.done && self.core.is_live(id))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let st = self.state.lock();
        let key = match &self.key {
            Some(k) => k.bind(py).repr().map(|r| r.to_string()).unwrap_or_default(),
            None => "None".into(),
        };
        let state = match st.id {
            _ if st.done => "released",
            Some(id) if self.core.is_live(id) => "active",
            Some(_) => "expired",
            None => "not acquired",
        };
        match &st.exit {
            Some(e) => format!("<Lease key={key} exit='{}' via {} ({state})>", e.id, e.proxy.masked()),
            None => format!("<Lease key={key} ({state})>"),
        }
    }
}
