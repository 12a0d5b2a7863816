//! The Python bindings: they convert arguments and results, delegate to the core, and map its
//! errors to exceptions; the rules are the core's. What stays here is what only a binding can
//! know: which Python values an argument accepts (anything else is `InvalidInput`, named), when
//! to release the GIL (around anything that waits or talks to a store), handing the core's
//! events to Python callbacks, and a `Lease` object's own state (entered, reported, ended).
//!
//! `pool` is `Pool`, `lease` is `Lease` and its report's arguments, `snapshot` and `events` turn
//! the core's records into Python data, `errors` is the one place errors become exceptions.

mod clock;
mod config;
mod errors;
mod events;
mod exit;
mod fast;
mod gateway;
mod lease;
mod pool;
mod ring;
mod rules;
mod snapshot;
mod text;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT_REPLICAS", crate::ring::DEFAULT_REPLICAS)?;
    // The statuses that count as blocks: integrations classify with the core's own list.
    m.add("BLOCK_STATUSES", pyo3::types::PyFrozenSet::new(m.py(), crate::outcome::BLOCK_STATUSES)?)?;
    rules::register(m)?;
    m.add_class::<exit::PyExit>()?;
    m.add_class::<gateway::PyGateway>()?;
    m.add_class::<ring::PyRing>()?;
    ring::install_fast_paths(m.py())?;
    m.add_class::<pool::PyPool>()?;
    fast::install(m.py())?;
    m.add_class::<lease::PyLease>()?;
    m.add_class::<clock::PyManualClock>()?;
    m.add_class::<config::PyConfigFile>()?;
    m.add_function(wrap_pyfunction!(exit::parse_exits, m)?)?;
    m.add_function(wrap_pyfunction!(exit::mask_raw, m)?)?;
    m.add_function(wrap_pyfunction!(ring::position, m)?)?;
    m.add_function(wrap_pyfunction!(flush_stores, m)?)?;
    m.add_function(wrap_pyfunction!(before_fork, m)?)?;
    m.add_function(wrap_pyfunction!(after_fork, m)?)?;
    m.add_function(wrap_pyfunction!(ring::check_ring_size, m)?)?;
    m.add("MAX_RING_POINTS", crate::ring::MAX_POINTS)?;
    m.add("MAX_REPLICAS", crate::ring::MAX_REPLICAS)?;
    Ok(())
}

/// Sends the releases every store of this process still holds, for `exitpool._fork`: a
/// multiprocessing child ends by `os._exit`, which drops nothing.
#[pyfunction]
#[pyo3(name = "_flush_stores")]
fn flush_stores(py: Python<'_>) {
    py.detach(crate::store::flush_all)
}

/// For `os.register_at_fork`: see `pool::before_fork`. It keeps the GIL: a thread that
/// takes it between the locks and the fork could block on one of those locks (a local pool's
/// lease runs with the GIL held) while the forking thread waits for the GIL back.
#[pyfunction]
#[pyo3(name = "_before_fork")]
fn before_fork() {
    crate::before_fork()
}

/// For `os.register_at_fork`: see `pool::after_fork`.
#[pyfunction]
#[pyo3(name = "_after_fork")]
fn after_fork() {
    crate::after_fork()
}
