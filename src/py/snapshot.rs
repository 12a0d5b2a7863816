//! The core's documents (the snapshot, events, recalibrations) as Python data: one serde
//! conversion each, so that their shape and every derived figure are defined in the core.

use super::events::Dispatch;
use crate::pool::{Pool, Recalibration};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Everything the pool knows, as plain data (JSON-serialisable); the schema is the
/// `Snapshot` TypedDict in the stubs.
pub(super) fn snapshot<'py>(py: Python<'py>, core: &Pool, dispatch: &Dispatch) -> PyResult<Bound<'py, PyDict>> {
    // With a shared store this asks the store: without the GIL.
    let doc = py.detach(|| core.snapshot_document());
    dispatch.deliver(py, core);
    Ok(pythonize::pythonize(py, &doc)?.cast_into::<PyDict>()?)
}

/// `recalibrate()`'s changes, one dict each.
pub(super) fn changes_list(py: Python<'_>, changes: Vec<Recalibration>) -> PyResult<Bound<'_, PyList>> {
    Ok(pythonize::pythonize(py, &changes)?.cast_into::<PyList>()?)
}
