//! The Python bindings: convert, delegate, map errors. No logic lives here.

mod clock;
mod errors;
mod exit;
mod pool;
mod ring;
mod text;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT_REPLICAS", crate::ring::DEFAULT_REPLICAS)?;
    m.add_class::<exit::PyExit>()?;
    m.add_class::<ring::PyRing>()?;
    ring::install_fast_paths(m.py())?;
    m.add_class::<pool::PyPool>()?;
    m.add_class::<pool::PyLease>()?;
    m.add_class::<clock::PyManualClock>()?;
    m.add_function(wrap_pyfunction!(exit::parse_exits, m)?)?;
    m.add_function(wrap_pyfunction!(exit::mask_raw, m)?)?;
    m.add_function(wrap_pyfunction!(ring::position, m)?)?;
    m.add_function(wrap_pyfunction!(ring::check_ring_size, m)?)?;
    m.add("MAX_RING_POINTS", crate::ring::MAX_POINTS)?;
    m.add("MAX_REPLICAS", crate::ring::MAX_REPLICAS)?;
    Ok(())
}
