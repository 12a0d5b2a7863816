//! `Ring`: the core ring plus the Python `Exit` objects its owner handles stand for.
//!
//! `assign` is installed by hand as a `METH_O` method ([`install_fast_paths`]): PyO3's
//! argument parsing cost more than hashing the key (see `fast.rs`).

use super::errors::{invalid_input, no_exit_available, IntoPyResult};
use super::exit::PyExit;
use super::fast::{returned, MethodDef};
use super::text::{opt_text, text, with_key, with_list_utf8, BATCH};
use crate::ring::Ring;
use parking_lot::RwLock;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use std::sync::Arc;

struct State {
    ring: Ring,
    /// Owner handle -> the exit object handed back to Python; holes are reused.
    exits: Vec<Option<Py<PyExit>>>,
    free: Vec<u32>,
}

impl State {
    fn exit(&self, handle: u32) -> &Py<PyExit> {
        // Every handle in the ring was stored here when its exit was added.
        self.exits[handle as usize].as_ref().expect("ring handle without an exit")
    }
}

#[pyclass(name = "Ring", module = "exitpool", frozen)]
pub struct PyRing {
    state: RwLock<State>,
}

fn empty(py: Python<'_>) -> PyErr {
    no_exit_available(py, "the ring has no exits")
}

pub fn extract_replicas(py: Python<'_>, replicas: &Bound<'_, PyAny>) -> PyResult<u32> {
    super::exit::judged_int(py, replicas, "replicas", crate::ring::check_replicas)
}

#[pymethods]
impl PyRing {
    #[new]
    // `salt`'s default is applied below, where it is read as text; Python's signature keeps it.
    #[pyo3(signature = (exits=None, *, replicas=None, salt=None), text_signature = "(exits=None, *, replicas=None, salt=\"vnode\")")]
    fn new(
        py: Python<'_>,
        exits: Option<&Bound<'_, PyAny>>,
        replicas: Option<&Bound<'_, PyAny>>,
        salt: Option<&Bound<'_, PyString>>,
    ) -> PyResult<PyRing> {
        let replicas = match replicas {
            Some(r) => extract_replicas(py, r)?,
            None => crate::ring::DEFAULT_REPLICAS,
        };
        let mut objects: Vec<Py<PyExit>> = Vec::new();
        if let Some(exits) = exits {
            for item in exits.try_iter()? {
                let item = item?;
                let exit = item.cast::<PyExit>().map_err(|_| {
                    invalid_input(
                        py,
                        format!("a Ring holds Exit objects, got {}", item.get_type().name().map(|n| n.to_string()).unwrap_or_default()),
                    )
                })?;
                objects.push(exit.clone().unbind());
            }
        }
        let inners: Vec<Arc<crate::Exit>> = objects.iter().map(|o| o.get().inner.clone()).collect();
        let salt = opt_text(salt, "salt")?.map_or_else(|| crate::ring::DEFAULT_SALT.to_owned(), |s| s.into_owned());
        // Hashing a large ring takes a while: other Python threads may run meanwhile.
        let ring = py
            .detach(move || Ring::build(replicas, &salt, inners.iter().enumerate().map(|(i, e)| (e.id.as_str(), e.capacity, i as u32))))
            .py_err(py)?;
        Ok(PyRing { state: RwLock::new(State { ring, exits: objects.into_iter().map(Some).collect(), free: Vec::new() }) })
    }

    /// The owners of many keys in one call, in the keys' order.
    fn assign_many<'py>(&self, py: Python<'py>, keys: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        // No Python code may run while the lock is held (a generator could touch this ring),
        // so a lazy iterable is drawn into a list first.
        let keys = as_list(keys)?;
        if self.state.read().ring.is_empty() {
            return Err(empty(py));
        }
        let n = keys.len();
        // SAFETY: PyList_New returns a new reference (or NULL with an exception set); its n
        // slots are NULL until filled below, and a list dropped half-filled frees cleanly.
        let out = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyList_New(n as ffi::Py_ssize_t))? };
        let (mut positions, mut handles) = ([0u64; BATCH], [0u32; BATCH]);
        for start in (0..n).step_by(BATCH) {
            let range = start..n.min(start + BATCH);
            let (positions, handles) = (&mut positions[..range.len()], &mut handles[..range.len()]);
            with_list_utf8(&keys, range, "key", |texts| crate::hash::positions_into(texts, positions))?;
            let state = self.state.read();
            if !state.ring.assign_positions(positions, handles) {
                return Err(empty(py));
            }
            for (i, &h) in (start..).zip(handles.iter()) {
                let exit = state.exit(h).clone_ref(py).into_ptr();
                // SAFETY: `out` is a list of length n > i; PyList_SetItem steals the new
                // reference to `exit` and releases the slot's previous value, NULL here.
                unsafe { ffi::PyList_SetItem(out.as_ptr(), i as ffi::Py_ssize_t, exit) };
            }
        }
        // SAFETY: `out` is a list, as created above.
        Ok(unsafe { out.cast_into_unchecked() })
    }

    /// Adds one exit; only keys in its new arcs move onto it.
    fn add(&self, py: Python<'_>, exit: &Bound<'_, PyExit>) -> PyResult<()> {
        let mut state = self.state.write();
        let handle = state.free.pop().unwrap_or(state.exits.len() as u32);
        let inner = exit.get().inner.clone();
        if let Err(e) = state.ring.add(&inner.id, inner.capacity, handle) {
            if handle as usize != state.exits.len() {
                state.free.push(handle);
            }
            return Err(super::errors::to_py(py, e));
        }
        let slot = Some(exit.clone().unbind());
        if handle as usize == state.exits.len() {
            state.exits.push(slot);
        } else {
            state.exits[handle as usize] = slot;
        }
        Ok(())
    }

    /// Removes an exit by id and returns it; only its keys move.
    fn remove(&self, py: Python<'_>, exit_id: &Bound<'_, PyString>) -> PyResult<Py<PyExit>> {
        let exit_id = text(exit_id, "exit_id")?;
        let mut state = self.state.write();
        let handle = state.ring.remove(&exit_id).py_err(py)?;
        state.free.push(handle);
        state.exits[handle as usize].take().ok_or_else(|| empty(py))
    }

    /// The keys (of those given) whose exit differs between this ring and `other`.
    fn moved<'py>(&self, py: Python<'py>, other: &Bound<'py, PyRing>, keys: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let keys = as_list(keys)?;
        let before = self.state.read();
        let other = other.get();
        let same = std::ptr::eq(self, other);
        let after_guard = if same { None } else { Some(other.state.read()) };
        let after = after_guard.as_deref().unwrap_or(&*before);
        let out = PyList::empty(py);
        for key in keys.iter() {
            let (a, b) = with_key(&key, "key", |k| (before.ring.assign(k), after.ring.assign(k)))?;
            let id_of = |s: &State, h: Option<u32>| h.map(|h| s.exit(h).get().inner.id.clone());
            if id_of(&before, a) != id_of(after, b) {
                out.append(key)?;
            }
        }
        Ok(out)
    }

    /// Every exit, ordered by id.
    #[getter]
    fn exits(&self, py: Python<'_>) -> Vec<Py<PyExit>> {
        let state = self.state.read();
        let mut all: Vec<&Py<PyExit>> = state.exits.iter().flatten().collect();
        all.sort_by(|a, b| a.get().inner.id.cmp(&b.get().inner.id));
        all.into_iter().map(|e| e.clone_ref(py)).collect()
    }

    #[getter]
    fn replicas(&self) -> u32 {
        self.state.read().ring.replicas()
    }

    #[getter]
    fn salt(&self) -> String {
        self.state.read().ring.salt().to_owned()
    }

    /// Number of points on the ring (sum of max(1, capacity) * replicas).
    #[getter]
    fn points(&self) -> usize {
        self.state.read().ring.point_count()
    }

    fn __len__(&self) -> usize {
        self.state.read().ring.len()
    }

    /// `"sess-a1b2" in ring` or `exit in ring`.
    fn __contains__(&self, item: &Bound<'_, PyAny>) -> PyResult<bool> {
        let state = self.state.read();
        if let Ok(exit) = item.cast::<PyExit>() {
            let id = &exit.get().inner.id;
            return Ok(state.ring.node(id).is_some_and(|(h, _)| *state.exit(h).get().inner == *exit.get().inner));
        }
        match item.cast::<PyString>() {
            // A string that is not valid text is no exit's id.
            Ok(s) => Ok(s.to_cow().is_ok_and(|id| state.ring.contains(&id))),
            Err(_) => Ok(false),
        }
    }

    fn __repr__(&self) -> String {
        let state = self.state.read();
        format!("Ring({} exits, {} points, replicas={})", state.ring.len(), state.ring.point_count(), state.ring.replicas())
    }
}

impl PyRing {
    /// The exit that owns `key`; the body of the `METH_O` method installed as `Ring.assign`.
    fn assign(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyExit>> {
        let state = self.state.read();
        let handle = with_key(key, "key", |k| state.ring.assign(k))?.ok_or_else(|| empty(py))?;
        Ok(state.exit(handle).clone_ref(py))
    }
}

static ASSIGN: MethodDef = MethodDef(ffi::PyMethodDef {
    ml_name: c"assign".as_ptr(),
    ml_meth: ffi::PyMethodDefPointer { PyCFunction: assign_o },
    ml_flags: ffi::METH_O,
    // The first line is the signature `inspect.signature` reads, as for built-in methods.
    ml_doc: c"assign($self, key, /)\n--\n\nThe exit that owns `key`.".as_ptr(),
});

/// Replaces methods on `Ring` with hand-made ones that CPython calls without an argument
/// tuple: `METH_O` is in the stable ABI of every version, and CPython calls it directly.
pub fn install_fast_paths(py: Python<'_>) -> PyResult<()> {
    let ty = py.get_type::<PyRing>();
    // SAFETY: `ASSIGN` is a valid `METH_O` definition with 'static lifetime; CPython reads it
    // and never writes through the pointer. The result is a new reference or NULL with an
    // exception set.
    let descr =
        unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(ty.as_type_ptr(), std::ptr::from_ref(&ASSIGN.0).cast_mut()))? };
    ty.setattr("assign", descr)
}

/// `Ring.assign` as CPython calls a `METH_O` method: `self` and the one argument, borrowed.
unsafe extern "C" fn assign_o(slf: *mut ffi::PyObject, key: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: CPython calls methods only from a thread attached to the interpreter.
    let py = unsafe { Python::assume_attached() };
    // A panic must not unwind into CPython: it becomes a PanicException, as in PyO3's methods.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the method descriptor was made for the Ring type, and CPython checks that
        // `self` is an instance of it before calling (`descr_check`), so `slf` is a live
        // PyRing; `key` is a live argument that CPython holds for the duration of the call.
        let (ring, key) = unsafe { (Borrowed::from_ptr(py, slf).cast_unchecked::<PyRing>(), Borrowed::from_ptr(py, key)) };
        ring.get().assign(py, &key).map(Py::into_any)
    }));
    returned(outcome, "Ring.assign")
}

/// The keys as a list, drawing a lazy iterable out before any lock is taken.
fn as_list<'py>(keys: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    match keys.cast::<PyList>() {
        Ok(list) => Ok(list.clone()),
        Err(_) => PyList::new(keys.py(), keys.try_iter()?.collect::<PyResult<Vec<_>>>()?),
    }
}

/// Refuses, as `Pool(exits, replicas=...)` would and without building anything, a ring of
/// these exits larger than the limit: the config loader names the key to blame by this.
#[pyfunction]
#[pyo3(name = "_check_ring_size")]
pub fn check_ring_size(py: Python<'_>, exits: &Bound<'_, PyAny>, replicas: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let replicas = match replicas {
        Some(r) if !r.is_none() => extract_replicas(py, r)?,
        _ => crate::ring::DEFAULT_REPLICAS,
    };
    let mut capacities = Vec::new();
    for item in exits.try_iter()? {
        let item = item?;
        let exit = item.cast::<PyExit>().map_err(|_| invalid_input(py, "a Ring holds Exit objects"))?;
        capacities.push(exit.get().inner.capacity);
    }
    crate::ring::check_capacities(replicas, &capacities).py_err(py)
}

/// The ring position of a string: the first 8 bytes of its sha256, big-endian.
#[pyfunction]
#[pyo3(name = "_position")]
pub fn position(s: &Bound<'_, PyAny>) -> PyResult<u64> {
    with_key(s, "s", |k| crate::hash::position(k.as_bytes()))
}
