//! `Lease`: one lease of one exit, its acquire (and wait), its report's arguments and its end.

use super::errors::{full_message, invalid_input, refusal_to_py, IntoPyResult};
use super::exit::PyExit;
use super::pool::PoolHandle;
use super::text::{text, with_str};
use crate::acquire::{avoid_list, wait_for_slot, waits_for, WaitStart};
use crate::exit::Exit;
use crate::health::State as Health;
use crate::lease::LeaseId;
use crate::outcome::{ErrorKind, Report};
use crate::pool::{Choice, Grant, Refusal};
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyInt, PyString};
use std::num::NonZeroU64;
use std::sync::Arc;

#[derive(Default)]
pub(super) struct LeaseState {
    id: Granted,
    exit: Option<Arc<Exit>>,
    /// How the exit was chosen and its health then, named only when asked: a lease that
    /// moves through the bindings stays small.
    chosen: Option<(Choice, Health)>,
    report: Option<Report>,
    /// Ended (released, expired, or given up before it was granted): a grant that arrives
    /// after this is handed back unused.
    done: bool,
    /// When the async acquire first found every slot full (the sync one waits in the core).
    waited: WaitStart,
}

impl LeaseState {
    pub(super) fn take(&mut self, grant: Grant) {
        self.id = Granted::of(grant.id);
        self.exit = Some(grant.exit);
        self.chosen = Some((grant.choice, grant.state));
    }
}

/// A lease's id once granted, in the 8 bytes of a `u64` (an `Option<LeaseId>` takes 16), so
/// that a `PyLease` stays within the 128 bytes Rust moves with inline copies: at 152 bytes,
/// making one called `memcpy`. Kept as the id's complement, zero (an id of `u64::MAX`, slot
/// index `u32::MAX`) being a slot no pool reaches.
#[derive(Clone, Copy, Default)]
struct Granted(Option<NonZeroU64>);

impl Granted {
    fn of(id: LeaseId) -> Granted {
        Granted(NonZeroU64::new(!id))
    }

    fn get(self) -> Option<LeaseId> {
        self.0.map(|n| !n.get())
    }

    fn is_some(self) -> bool {
        self.0.is_some()
    }
}

/// `timeout=` as a lease keeps it: NaN for none (a checked timeout is a finite number), in 8
/// bytes rather than an `Option<f64>`'s 16 (see [`Granted`]).
#[derive(Clone, Copy)]
pub(super) struct Timeout(f64);

impl Timeout {
    pub(super) fn of(timeout: Option<f64>) -> Timeout {
        Timeout(timeout.unwrap_or(f64::NAN))
    }

    pub(super) fn get(self) -> Option<f64> {
        (!self.0.is_nan()).then_some(self.0)
    }
}

impl PoolHandle {
    /// One attempt that does not wait: with the GIL held for a pool of its own (the hot path),
    /// without it when the attempt is a network round trip to a shared store.
    #[inline]
    fn try_once(&self, py: Python<'_>, key: Option<&str>, site: Option<&str>, avoid: &[&str]) -> Result<Grant, Refusal> {
        if self.core.is_shared() {
            py.detach(|| self.core.try_acquire_avoiding(self.view, key, site, avoid))
        } else {
            self.core.try_acquire_avoiding(self.view, key, site, avoid)
        }
    }

    /// The sync acquire: one try with the GIL held (the common case), then the core's wait
    /// without the GIL, taking it back between slices only to let Ctrl-C through. Events are
    /// delivered; a refusal raises.
    #[inline]
    pub(super) fn acquire_sync(
        &self,
        py: Python<'_>,
        key: Option<&str>,
        site: Option<&str>,
        avoid: &[&str],
        timeout: Option<f64>,
    ) -> PyResult<Grant> {
        let result = match self.try_once(py, key, site, avoid) {
            Err(r) if waits_for(&r, timeout) => {
                py.detach(|| wait_for_slot(&self.core, self.view, key, site, avoid, timeout, || Python::attach(|py| py.check_signals())))?
            }
            first => first,
        };
        self.dispatch.deliver(py, &self.core);
        result.map_err(|r| refusal_to_py(py, r, &self.what, timeout))
    }
}

/// How a lease ends.
#[derive(Clone, Copy)]
pub(super) enum Ending {
    /// With the reported outcome, else this fallback, else success.
    Report(Option<Report>),
    /// With no evidence about the exit: its caller was gone, or its report was bad input.
    Unused,
}

/// One lease of one exit. Made by `pool.lease(...)` (acquired on entering the block) or
/// `pool.acquire(...)` (acquired already).
#[pyclass(name = "Lease", module = "exitpool", frozen)]
pub struct PyLease {
    /// The pool or subset it was made by: its core, view, name and event dispatch.
    pub(super) pool: Arc<PoolHandle>,
    pub(super) key: Option<Py<PyString>>,
    pub(super) site: Option<Py<PyString>>,
    pub(super) timeout: Timeout,
    /// Exit ids a keyless pick passes over (`avoid=`); `None` for nearly every lease.
    pub(super) avoid: Avoid,
    pub(super) state: Mutex<LeaseState>,
}

// Making a lease moves it into its Python object: within 128 bytes that is inline copies, not
// a call to `memcpy` (see `Granted`).
const _: () = assert!(std::mem::size_of::<PyLease>() <= 128);

/// Exit ids a keyless pick passes over; `None` for nearly every lease. Boxed twice, so that
/// the field is one pointer (see [`Granted`]); a list allocates anyway.
#[allow(clippy::redundant_allocation)]
pub(super) type Avoid = Option<Box<Box<[Box<str>]>>>;

/// `avoid=`: a collection of exit ids (str), read; which leases may have one is the core's
/// rule (`avoid_list`: keyless leases only).
pub(super) fn avoid_of(py: Python<'_>, ids: &Bound<'_, PyAny>, keyed: bool) -> PyResult<Avoid> {
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
    avoid_list(keyed, out).map(|ids| ids.map(Box::new)).py_err(py)
}

impl PyLease {
    /// Calls `f` with what this lease asks for: its key and site as text, and the exits it
    /// passes over. Both strings are immutable and held by this lease for the whole call.
    #[inline]
    fn asking<R>(&self, py: Python<'_>, f: impl FnOnce(Option<&str>, Option<&str>, &[&str]) -> R) -> PyResult<R> {
        // Nearly always empty: no allocation then.
        let avoid: Vec<&str> = match &self.avoid {
            None => Vec::new(),
            Some(ids) => ids.iter().map(|id| &**id).collect(),
        };
        let key = self.key.as_ref().map(|k| k.bind(py));
        let site = self.site.as_ref().map(|s| s.bind(py));
        match (key, site) {
            (None, None) => Ok(f(None, None, &avoid)),
            (Some(k), None) => with_str(k, |k| f(Some(k), None, &avoid)),
            (None, Some(s)) => with_str(s, |s| f(None, Some(s), &avoid)),
            (Some(k), Some(s)) => with_str(k, |k| with_str(s, |s| f(Some(k), Some(s), &avoid))).and_then(|r| r),
        }
    }

    /// Takes a grant; `false` if the lease was given up meanwhile (a cancelled async acquire
    /// whose attempt on a worker thread succeeded after the cancel), the slot then going back
    /// unused. A grant after the async path's polls found every slot full counts as a wait.
    fn granted(&self, py: Python<'_>, grant: Grant, waited: WaitStart) -> bool {
        let mut st = self.state.lock();
        if st.done {
            drop(st);
            self.core_release(py, grant.id, None);
            return false;
        }
        waited.granted(&self.pool.core);
        st.take(grant);
        true
    }
    /// The core's release, without the GIL when it may talk to a store.
    fn core_release(&self, py: Python<'_>, id: LeaseId, report: Option<&Report>) -> bool {
        let end = || match report {
            Some(r) => self.pool.core.release(id, r),
            None => self.pool.core.release_unused(id),
        };
        if self.pool.core.is_shared() {
            py.detach(end)
        } else {
            end()
        }
    }

    pub(super) fn check_fresh(&self, py: Python<'_>) -> PyResult<()> {
        let st = self.state.lock();
        if st.id.is_some() || st.done {
            return Err(invalid_input(py, "this lease was already entered; make a new one with pool.lease(...)"));
        }
        Ok(())
    }

    /// `with pool.lease(...)`: the sync acquire of a lease made before.
    pub(super) fn enter(&self, py: Python<'_>) -> PyResult<()> {
        self.check_fresh(py)?;
        let grant = self.obtain(py)?;
        self.granted(py, grant, WaitStart::default());
        Ok(())
    }

    /// The sync acquire's attempt and wait for this lease, events delivered; a refusal raises.
    fn obtain(&self, py: Python<'_>) -> PyResult<Grant> {
        // Reading cannot fail: `lease()` read both strings already (refusing one that is not
        // valid text by name), and they are immutable with their UTF-8 cached since.
        let timeout = self.timeout.get();
        self.asking(py, |key, site, avoid| self.pool.acquire_sync(py, key, site, avoid, timeout))
            .unwrap_or_else(|_| Err(refusal_to_py(py, Refusal::NoExits, &self.pool.what, timeout)))
    }

    /// Checks a report's every argument; bad input raises `InvalidInput` naming the value
    /// (never `TypeError` or `OverflowError`) and records nothing.
    pub(super) fn record(
        &self,
        py: Python<'_>,
        status: Option<&Bound<'_, PyAny>>,
        latency: Option<&Bound<'_, PyAny>>,
        captcha: Option<&Bound<'_, PyAny>>,
        error: Option<&Bound<'_, PyAny>>,
        retry_after: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let mut status = status.map(|s| status_of(py, s)).transpose()?;
        let latency = latency.map(|v| seconds_of(py, "latency", v)).transpose()?;
        let captcha = match captcha {
            None => false,
            Some(c) => c
                .cast::<PyBool>()
                .map(|b| b.is_true())
                .map_err(|_| invalid_input(py, format!("captcha must be True or False, got {}", shown_repr(c))))?,
        };
        let error = match error.map(|e| error_kind(py, e)).transpose()? {
            Some((kind, proxy_status)) => {
                // A status given by hand wins over the one the exception carries.
                status = status.or(proxy_status);
                Some(kind)
            }
            None => None,
        };
        let retry_after = retry_after.map(|v| seconds_of(py, "retry_after", v)).transpose()?;
        let report = Report::new(status, latency, captcha, error, retry_after).py_err(py)?;
        self.state.lock().report = Some(report);
        Ok(())
    }

    /// Ends the lease once; later calls (and releases after expiry) change nothing.
    pub(super) fn finish(&self, py: Python<'_>, ending: Ending) -> bool {
        let (id, report) = {
            let mut st = self.state.lock();
            let Some(id) = st.id.get() else {
                st.done = true;
                return false;
            };
            if st.done {
                // Released before: the core ignores a spent id, and counts it as ignored.
                drop(st);
                return self.pool.core.release(id, &Report::SUCCESS);
            }
            st.done = true;
            let report = match ending {
                Ending::Report(fallback) => Some(st.report.or(fallback).unwrap_or(Report::SUCCESS)),
                Ending::Unused => None,
            };
            (id, report)
        };
        let released = self.core_release(py, id, report.as_ref());
        self.pool.dispatch.deliver(py, &self.pool.core);
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
pub(super) fn status_of(py: Python<'_>, s: &Bound<'_, PyAny>) -> PyResult<i64> {
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

/// The class of an exception that ended a request, and the status a proxy refused its tunnel
/// with when the exception carries one (a 407 to CONNECT: the gateway's credentials).
fn classify(py: Python<'_>, exc: &Bound<'_, PyAny>) -> PyResult<(ErrorKind, Option<i64>)> {
    static CLASSIFY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let f = CLASSIFY.import(py, "exitpool._outcome", "_classify_failure")?;
    let (kind, status): (String, Option<i64>) = f.call1((exc,))?.extract()?;
    Ok((ErrorKind::parse(&kind).py_err(py)?, status))
}

/// `error=` may be an exception (classified, with the proxy's status if it carries one) or one
/// of the class names.
fn error_kind(py: Python<'_>, e: &Bound<'_, PyAny>) -> PyResult<(ErrorKind, Option<i64>)> {
    if let Ok(s) = e.cast::<PyString>() {
        return Ok((ErrorKind::parse(&text(s, "error")?).py_err(py)?, None));
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
            let (kind, status) = match exc {
                Some(e) if !e.is_none() => classify(py, e).unwrap_or((ErrorKind::Other, None)),
                _ => (ErrorKind::Other, None),
            };
            Report::new(status, None, false, Some(kind), None).ok()
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
        let timeout = slf.get().timeout.get();
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
        // Reading cannot fail: see `enter`.
        let attempt = self.asking(py, |key, site, avoid| self.pool.try_once(py, key, site, avoid)).unwrap_or(Err(Refusal::NoExits));
        match attempt {
            Ok(grant) => {
                let waited = self.state.lock().waited;
                let taken = self.granted(py, grant, waited);
                self.pool.dispatch.deliver(py, &self.pool.core);
                Ok(taken)
            }
            Err(Refusal::Full) => {
                self.state.lock().waited.full();
                Ok(false)
            }
            Err(r) => {
                self.pool.dispatch.deliver(py, &self.pool.core);
                Err(refusal_to_py(py, r, &self.pool.what, Some(0.0)))
            }
        }
    }

    #[getter]
    fn _shared(&self) -> bool {
        self.pool.core.is_shared()
    }

    /// Gives the lease up: the async acquire calls this when its task is cancelled. A slot
    /// already granted goes back unused, and so does one granted later by an attempt still
    /// running on a worker thread.
    fn _abandon(&self, py: Python<'_>) {
        self.finish(py, Ending::Unused);
    }

    fn _full_message(&self, timeout: Option<f64>) -> String {
        full_message(&self.pool.what, timeout)
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
        st.id.get().and(st.chosen).map(|(choice, _)| choice.name())
    }

    /// The exit's health for this lease's site when it was chosen ("healthy", "degraded" or
    /// "probing"), to log beside the request's own outcome.
    #[getter]
    fn exit_state(&self) -> Option<&'static str> {
        let st = self.state.lock();
        st.id.get().and(st.chosen).map(|(_, health)| health.name())
    }

    /// Whether the lease is live: acquired, not released, and not expired by the pool's clock
    /// (past `lease_ttl` its slot may be someone else's).
    #[getter]
    fn active(&self) -> bool {
        let st = self.state.lock();
        st.id.get().is_some_and(|id| !st.done && self.pool.core.is_live(id))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let st = self.state.lock();
        let key = match &self.key {
            Some(k) => k.bind(py).repr().map(|r| r.to_string()).unwrap_or_default(),
            None => "None".into(),
        };
        let state = match st.id.get() {
            _ if st.done => "released",
            Some(id) if self.pool.core.is_live(id) => "active",
            Some(_) => "expired",
            None => "not acquired",
        };
        match &st.exit {
            Some(e) => format!("<Lease key={key} exit='{}' via {} ({state})>", e.id, e.proxy.masked()),
            None => format!("<Lease key={key} ({state})>"),
        }
    }
}
