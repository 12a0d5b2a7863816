//! `Pool`: the bindings over the core pool. They convert arguments, delegate, and
//! turn refusals into exceptions; the decisions are the core's.

use super::clock::PyManualClock;
use super::config::{extract_health, extract_pacing, extract_warmup};
use super::errors::{at_key, invalid_input, refusal_to_py, IntoPyResult};
use super::events::{events_list, Dispatch};
use super::exit::{capacity_of, extract_int, judged_int, Float, PyExit};
use super::gateway::PyGateway;
use super::lease::{avoid_of, Avoid, Ending, LeaseState, PyLease, Timeout};
use super::ring::extract_replicas;
use super::snapshot;
use super::text::{any_text, opt_text, text, with_key};
use crate::clock::{Clock, SystemClock};
use crate::pool::{Config, Member, Pool};
use crate::select::Strategy;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyType};
use std::borrow::Cow;
use std::sync::Arc;

#[pyclass(name = "Pool", module = "exitpool", frozen, weakref)]
pub struct PyPool {
    handle: Arc<PoolHandle>,
}

/// What a pool or subset shares with each of its leases, behind one `Arc`: a lease then costs
/// one reference count to make and to free, not one per field.
pub struct PoolHandle {
    pub(super) core: Arc<Pool>,
    pub(super) view: u32,
    /// How messages name this pool or subset.
    pub(super) what: Box<str>,
    pub(super) dispatch: Arc<Dispatch>,
}

impl PyPool {
    /// A lease's arguments, checked in the order the signature gives them (`avoid=` first,
    /// then the key and site as text, then `timeout=`); the key and site are read once, for
    /// `then`, which gets them with the checked `avoid=` and `timeout=`.
    #[inline]
    fn asking<R>(
        &self,
        py: Python<'_>,
        key: Option<&Bound<'_, PyString>>,
        site: Option<&Bound<'_, PyString>>,
        timeout: Option<Float>,
        avoid: Option<&Bound<'_, PyAny>>,
        then: impl FnOnce(Option<&str>, Option<&str>, Option<f64>, Avoid) -> PyResult<R>,
    ) -> PyResult<R> {
        let avoid = match avoid {
            None => None,
            Some(ids) => avoid_of(py, ids, key.is_some())?,
        };
        let (k, s) = (opt_text(key, "key")?, opt_text(site, "site")?);
        then(k.as_deref(), s.as_deref(), timeout_of(py, timeout.map(|Float(t)| t))?, avoid)
    }

    #[inline]
    fn new_lease(
        &self,
        key: Option<Bound<'_, PyString>>,
        site: Option<Bound<'_, PyString>>,
        timeout: Option<f64>,
        avoid: Avoid,
        state: LeaseState,
    ) -> PyLease {
        PyLease {
            pool: self.handle.clone(),
            key: key.map(Bound::unbind),
            site: site.map(Bound::unbind),
            timeout: Timeout::of(timeout),
            avoid,
            state: Mutex::new(state),
        }
    }

    fn new_view(core: Arc<Pool>, view: u32, what: String, dispatch: Arc<Dispatch>) -> PyPool {
        PyPool { handle: Arc::new(PoolHandle { core, view, what: what.into(), dispatch }) }
    }
}

impl std::ops::Deref for PyPool {
    type Target = PoolHandle;

    fn deref(&self) -> &PoolHandle {
        &self.handle
    }
}

fn extract_exits(py: Python<'_>, exits: &Bound<'_, PyAny>) -> PyResult<Vec<Member>> {
    let mut out = Vec::new();
    for item in exits.try_iter()? {
        let item = item?;
        if let Ok(gateway) = item.cast::<PyGateway>() {
            out.push(Member::Gateway((*gateway.get().inner).clone()));
            continue;
        }
        let exit = item.cast::<PyExit>().map_err(|_| {
            invalid_input(
                py,
                format!("a Pool holds Exit and Gateway objects, got {}", item.get_type().name().map(|n| n.to_string()).unwrap_or_default()),
            )
        })?;
        out.push(Member::Exit((*exit.get().inner).clone()));
    }
    Ok(out)
}

/// `max_sessions` / `max_pairings` as given: left out (the default bound), `None` (no bound)
/// or a value for the core to judge.
enum KeyBound {
    Default,
    Unbounded,
    Given(Py<PyAny>),
}

impl<'a, 'py> FromPyObject<'a, 'py> for KeyBound {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(if obj.is_none() { KeyBound::Unbounded } else { KeyBound::Given(obj.to_owned().unbind()) })
    }
}

impl KeyBound {
    fn judged(self, py: Python<'_>, name: &'static str) -> PyResult<Option<u32>> {
        match self {
            KeyBound::Default => Ok(Some(crate::pool::DEFAULT_MAX_KEYS)),
            KeyBound::Unbounded => Ok(None),
            KeyBound::Given(v) => judged_int(py, v.bind(py), name, |n| crate::pool::check_max_keys(name, n)).map(Some),
        }
    }
}

/// `state=` as a path: a str or an `os.PathLike`; anything else is bad input naming it.
fn state_path(py: Python<'_>, state: Option<&Bound<'_, PyAny>>) -> PyResult<Option<std::path::PathBuf>> {
    match state {
        Some(s) if !s.is_none() => s.extract::<std::path::PathBuf>().map(Some).map_err(|_| {
            invalid_input(
                py,
                format!(
                    "state must be a path (str or os.PathLike), got {}",
                    s.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                ),
            )
        }),
        _ => Ok(None),
    }
}

fn timeout_of(py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<f64>> {
    timeout.map(|t| crate::clock::check_wait("timeout", t)).transpose().py_err(py)
}

#[pymethods]
impl PyPool {
    #[new]
    // The strings' defaults are applied below, where every str is read as text (a str default
    // cannot be a `Bound`); the signature Python shows keeps them.
    #[pyo3(signature = (exits, *, strategy=None, replicas=None, session_ttl=Float(900.0), lease_ttl=Float(120.0),
                        max_leases=None, balance_factor=None, warmup=None, max_sessions=KeyBound::Default,
                        max_pairings=KeyBound::Default, clock=None, seed=None, cooldown=Float(8.0),
                        health=None, calibrate=false, store=None, namespace=None, state=None, state_interval=Float(30.0), pacing=None),
           text_signature = "(exits, *, strategy=\"weighted\", replicas=None, session_ttl=900.0, lease_ttl=120.0, max_leases=None, balance_factor=None, warmup=None, max_sessions=1000000, max_pairings=1000000, clock=None, seed=None, cooldown=8.0, health=None, calibrate=False, store=None, namespace=\"exitpool\", state=None, state_interval=30.0, pacing=None)")]
    #[allow(clippy::too_many_arguments)]
    fn new<'py>(
        py: Python<'py>,
        exits: &Bound<'py, PyAny>,
        strategy: Option<&Bound<'_, PyString>>,
        replicas: Option<&Bound<'_, PyAny>>,
        session_ttl: Float,
        lease_ttl: Float,
        max_leases: Option<&Bound<'_, PyAny>>,
        balance_factor: Option<Float>,
        warmup: Option<&Bound<'_, PyAny>>,
        max_sessions: KeyBound,
        max_pairings: KeyBound,
        clock: Option<&Bound<'_, PyManualClock>>,
        seed: Option<&Bound<'_, PyAny>>,
        cooldown: Float,
        health: Option<&Bound<'_, PyDict>>,
        calibrate: bool,
        store: Option<&Bound<'_, PyString>>,
        namespace: Option<&Bound<'_, PyString>>,
        state: Option<&Bound<'_, PyAny>>,
        state_interval: Float,
        pacing: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyPool>> {
        let state = state_path(py, state)?;
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
            max_sessions: max_sessions.judged(py, "max_sessions")?,
            max_pairings: max_pairings.judged(py, "max_pairings")?,
            pacing: extract_pacing(py, pacing)?,
        };
        let clock: Arc<dyn Clock> = match clock {
            Some(c) => Arc::new(c.get().inner.clone()),
            None => Arc::new(SystemClock::new()),
        };
        let watch = exits.getattr_opt(pyo3::intern!(py, "_exitpool_watch"))?;
        let members = extract_exits(py, exits)?;
        let store = match store {
            None => None,
            Some(url) => {
                let (url, namespace, clock) = (url.into_owned(), namespace.into_owned(), clock.clone());
                Some(py.detach(move || crate::store::open(&url, &namespace, clock)).py_err(py)?)
            }
        };
        let core = py
            .detach(move || match store {
                None => Pool::of(members, cfg, clock),
                Some(store) => Pool::of_with_store(members, cfg, clock, store),
            })
            .py_err(py)?
            .into_arc();
        if let Some(path) = state {
            py.detach(|| core.keep_state(path, state_interval.0)).py_err(py)?;
        }
        let pool = Bound::new(py, PyPool::new_view(core, 0, "the pool".into(), Arc::default()))?;
        pool.get().dispatch.deliver(py, &pool.get().core);
        // A list from `load_exits(path, watch=True)`: the pool watches its file (holding a
        // weak reference to this very object, so `new` returns it rather than a value).
        if let Some(watch) = watch {
            watch.call1((&pool,))?;
        }
        Ok(pool)
    }

    /// A pool built from a TOML file: the core parses and checks it (`_ConfigFile`);
    /// `exitpool._config` reads the proxy list it names and calls `cls(...)`.
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
        // Read here, so that a key that is not valid text is refused by name; the lease reads
        // the cached UTF-8 again when it is entered.
        let (timeout, avoid) = self.asking(py, key.as_ref(), site.as_ref(), timeout, avoid, |_, _, t, a| Ok((t, a)))?;
        Ok(self.new_lease(key, site, timeout, avoid, LeaseState::default()))
    }

    /// Leases at once (waiting up to `timeout` for a free slot); pair with `release`.
    #[pyo3(signature = (key=None, *, site=None, timeout=None, avoid=None))]
    pub(super) fn acquire(
        &self,
        py: Python<'_>,
        key: Option<Bound<'_, PyString>>,
        site: Option<Bound<'_, PyString>>,
        timeout: Option<Float>,
        avoid: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyLease> {
        // The lease is made once it is granted, so its state is set without the lock that a
        // lease Python can see needs.
        let (grant, timeout, avoid) = self.asking(py, key.as_ref(), site.as_ref(), timeout, avoid, |k, s, timeout, avoid| {
            let grant = match &avoid {
                None => self.acquire_sync(py, k, s, &[], timeout)?,
                Some(ids) => self.acquire_sync(py, k, s, &ids.iter().map(|id| &**id).collect::<Vec<_>>(), timeout)?,
            };
            Ok((grant, timeout, avoid))
        })?;
        let mut state = LeaseState::default();
        state.take(grant);
        Ok(self.new_lease(key, site, timeout, avoid, state))
    }

    /// Ends a lease, with an outcome if given (else the one reported, else success).
    /// Returns False if the lease had already ended (expired or released): nothing changes.
    /// The slot is always freed: a report that is bad input frees it without health evidence,
    /// then raises.
    #[pyo3(signature = (lease, *, status=None, latency=None, captcha=None, error=None, retry_after=None))]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn release(
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
        let recorded = if !Arc::ptr_eq(&lease.pool.core, &self.core) {
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

    /// Adds an exit, or a gateway's slots (all or none); only keys in their new arcs move
    /// to them (when their sessions end).
    fn add(&self, py: Python<'_>, exit: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Ok(g) = exit.cast::<PyGateway>() {
            return self.core.add_gateway((*g.get().inner).clone()).py_err(py);
        }
        let exit = exit.cast::<PyExit>().map_err(|_| {
            invalid_input(
                py,
                format!("add takes an Exit or a Gateway, got {}", exit.get_type().name().map(|n| n.to_string()).unwrap_or_default()),
            )
        })?;
        self.core.add((*exit.get().inner).clone()).py_err(py)
    }

    /// Applies a new list of exits and gateways as a difference: unchanged exits keep every
    /// state, changed ones (same id) keep theirs with the new URL, new ones join, missing ones
    /// drain. Returns what changed; bad input changes nothing.
    fn update<'py>(&self, py: Python<'py>, exits: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        if self.view != 0 {
            // A subset's list is not the pool's: applying it would drain every other exit.
            return Err(invalid_input(
                py,
                format!("update applies a list to the whole pool: call it on the pool, not on {} (subsets follow)", self.what),
            ));
        }
        let members = extract_exits(py, exits)?;
        let done = py.detach(|| self.core.update(members)).py_err(py)?;
        self.dispatch.deliver(py, &self.core);
        Ok(pythonize::pythonize(py, &done)?.cast_into::<PyDict>()?)
    }

    /// Saves the state now (`state=`); a pool without `state=` has nothing to save.
    fn save_state(&self, py: Python<'_>) -> PyResult<()> {
        let r = py.detach(|| self.core.save_state());
        self.dispatch.deliver(py, &self.core);
        r.py_err(py)
    }

    /// Stops watching files and saving at an interval, and saves the state one last time.
    /// The pool still serves after it; calling it again does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        for closer in self.dispatch.closers(py) {
            closer.call0(py)?;
        }
        let r = py.detach(|| self.core.close());
        self.dispatch.deliver(py, &self.core);
        r.py_err(py)
    }

    /// Registers what `close` stops (a file watcher's thread).
    fn _on_close(&self, py: Python<'_>, callback: Py<PyAny>) {
        self.dispatch.on_close(py, callback);
    }

    /// A watched file changed but could not be read: an event; the exits stay as they are.
    fn _reload_failed(&self, py: Python<'_>, source: &Bound<'_, PyString>, why: &Bound<'_, PyString>) -> PyResult<()> {
        self.core.reload_failed(&text(source, "source")?, &text(why, "why")?);
        self.dispatch.deliver(py, &self.core);
        Ok(())
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
        Ok(PyPool::new_view(self.core.clone(), view, what, self.dispatch.clone()))
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
        self.dispatch.listen(py, &callback);
        Ok(callback)
    }

    /// Sets capacities from the last 24 h of measurement (needs `calibrate=True`); returns the
    /// changes, an exit whose new capacity is 0 having been benched.
    fn recalibrate<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let changes = self.core.recalibrate().py_err(py)?;
        self.dispatch.deliver(py, &self.core);
        snapshot::changes_list(py, changes)
    }

    /// The exits a probe loop should check now: quarantined exits whose backoff is over, dead
    /// exits, and exits in service that took no lease for `idle` seconds.
    #[pyo3(signature = (idle=Float(30.0)), text_signature = "($self, idle=30.0)")]
    fn probe_due(&self, py: Python<'_>, idle: Float) -> PyResult<Vec<PyExit>> {
        let idle = crate::clock::check_wait("idle", idle.0).py_err(py)?;
        Ok(self.core.probe_due(idle).into_iter().map(|inner| PyExit { inner }).collect())
    }

    /// Feeds an active probe's verdict into the exit's health: probes decide who comes back.
    /// An `observed_ip` other than the exit's `ip` is drift: an event, and a failure. `status`
    /// is what the proxy answered a failed probe with: 407 says it refuses the credentials.
    /// Returns whether the exit drifted.
    #[pyo3(
        signature = (exit_id, ok, *, observed_ip=None, detail=None, status=None),
        text_signature = "($self, exit_id, ok, *, observed_ip=None, detail=\"\", status=None)"
    )]
    fn record_probe(
        &self,
        py: Python<'_>,
        exit_id: &Bound<'_, PyString>,
        ok: bool,
        observed_ip: Option<&Bound<'_, PyString>>,
        detail: Option<&Bound<'_, PyString>>,
        status: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let status = status.map(|s| super::lease::status_of(py, s)).transpose()?;
        let status = status.map(crate::outcome::check_status).transpose().py_err(py)?;
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
        let drifted = py.detach(|| self.core.record_probe_status(exit_id, ok, observed, status, detail)).py_err(py)?;
        self.dispatch.deliver(py, &self.core);
        Ok(drifted)
    }

    /// The current time on the pool's clock.
    fn now(&self) -> f64 {
        self.core.now()
    }

    /// Everything the pool knows, as plain data (JSON-serialisable); the schema is the
    /// `Snapshot` TypedDict in the stubs. The arguments choose which exits are listed; the
    /// pool-wide figures always cover them all.
    #[pyo3(
        signature = (exits=None, *, state=None, tags=None, exit_ids=None, limit=None, by_tag=None, slots=None),
        text_signature = "($self, exits=True, *, state=None, tags=None, exit_ids=None, limit=None, by_tag=None, slots=True)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn snapshot<'py>(
        &self,
        py: Python<'py>,
        exits: Option<&Bound<'py, PyAny>>,
        state: Option<&Bound<'py, PyAny>>,
        tags: Option<&Bound<'py, PyAny>>,
        exit_ids: Option<&Bound<'py, PyAny>>,
        limit: Option<&Bound<'py, PyAny>>,
        by_tag: Option<&Bound<'py, PyAny>>,
        slots: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let all = pyo3::types::PyBool::new(py, true);
        let mut sel = snapshot::selection(py, exits.unwrap_or(all.as_any()), state, tags, exit_ids, limit, by_tag)?;
        if let Some(slots) = slots {
            sel.slots = snapshot::flag(py, slots, "slots")?;
        }
        snapshot::snapshot(py, &self.core, &self.dispatch, &sel)
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
