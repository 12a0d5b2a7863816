//! `Ring`: the core ring plus the Python `Exit` objects its owner handles stand for.

use super::errors::{invalid_input, no_exit_available, IntoPyResult};
use super::exit::PyExit;
use super::text::with_key;
use crate::ring::Ring;
use parking_lot::RwLock;
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
    let n = super::exit::extract_capacity(py, replicas, "replicas")?;
    if !(1..=100_000).contains(&n) {
        return Err(invalid_input(py, format!("replicas {n} is outside 1..=100000")));
    }
    Ok(n as u32)
}

#[pymethods]
impl PyRing {
    #[new]
    #[pyo3(signature = (exits=None, *, replicas=None, salt="vnode"))]
    fn new(py: Python<'_>, exits: Option<&Bound<'_, PyAny>>, replicas: Option<&Bound<'_, PyAny>>, salt: &str) -> PyResult<PyRing> {
        let replicas = match replicas {
            Some(r) => extract_replicas(py, r)?,
            None => crate::ring::DEFAULT_REPLICAS,
        };
        let mut objects: Vec<Py<PyExit>> = Vec::new();
        if let Some(exits) = exits {
            for item in exits.try_iter()? {
                let item = item?;
                let exit = item.cast::<PyExit>().map_err(|_| {
                    invalid_input(py, format!("a Ring holds Exit objects, got {}", item.get_type().name().map(|n| n.to_string()).unwrap_or_default()))
                })?;
                objects.push(exit.clone().unbind());
            }
        }
        let inners: Vec<Arc<crate::Exit>> = objects.iter().map(|o| o.get().inner.clone()).collect();
        let salt = salt.to_owned();
        // Hashing a large ring takes a while: other Python threads may run meanwhile.
        let ring = py
            .detach(move || Ring::build(replicas, &salt, inners.iter().enumerate().map(|(i, e)| (e.id.as_str(), e.capacity, i as u32))))
            .py_err(py)?;
        Ok(PyRing { state: RwLock::new(State { ring, exits: objects.into_iter().map(Some).collect(), free: Vec::new() }) })
    }

    /// The exit that owns `key`.
    fn assign(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyExit>> {
        let state = self.state.read();
        let handle = with_key(key, "key", |k| state.ring.assign(k))?.ok_or_else(|| empty(py))?;
        Ok(state.exit(handle).clone_ref(py))
    }

    /// The owners of many keys in one call, in the keys' order.
    fn assign_many<'py>(&self, py: Python<'py>, keys: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        // No Python code may run while the lock is held (a generator could touch this ring),
        // so a lazy iterable is drawn into a list first.
        let keys = as_list(keys)?;
        let state = self.state.read();
        if state.ring.is_empty() {
            return Err(empty(py));
        }
        let out = PyList::empty(py);
        for key in keys.iter() {
            let handle = with_key(&key, "key", |k| state.ring.assign(k))?.ok_or_else(|| empty(py))?;
            out.append(state.exit(handle).bind(py))?;
        }
        Ok(out)
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
    fn remove(&self, py: Python<'_>, exit_id: &str) -> PyResult<Py<PyExit>> {
        let mut state = self.state.write();
        let handle = state.ring.remove(exit_id).py_err(py)?;
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
            Ok(s) => Ok(state.ring.contains(&s.to_cow()?)),
            Err(_) => Ok(false),
        }
    }

    fn __repr__(&self) -> String {
        let state = self.state.read();
        format!("Ring({} exits, {} points, replicas={})", state.ring.len(), state.ring.point_count(), state.ring.replicas())
    }
}

/// The keys as a list, drawing a lazy iterable out before any lock is taken.
fn as_list<'py>(keys: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    match keys.cast::<PyList>() {
        Ok(list) => Ok(list.clone()),
        Err(_) => PyList::new(keys.py(), keys.try_iter()?.collect::<PyResult<Vec<_>>>()?),
    }
}

/// The ring position of a string: the first 8 bytes of its sha256, big-endian.
#[pyfunction]
#[pyo3(name = "_position")]
pub fn position(s: &Bound<'_, PyAny>) -> PyResult<u64> {
    with_key(s, "s", |k| crate::hash::position(k.as_bytes()))
}
