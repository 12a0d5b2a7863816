//! Events: hands the core's new events to the `exitpool` logger and the `on_event` callbacks,
//! and converts them for `pool.events()`.

use crate::pool::Pool;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};
use std::sync::atomic::{AtomicU64, Ordering};

/// Hands new events to the `exitpool` logger and the `on_event` callbacks, once each.
#[derive(Default)]
pub(super) struct Dispatch {
    pub(super) listeners: Mutex<Vec<Py<PyAny>>>,
    delivered: AtomicU64,
}

impl Dispatch {
    /// Costs one atomic load when nothing happened, which is nearly always.
    #[inline]
    pub(super) fn deliver(&self, py: Python<'_>, core: &Pool) {
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

pub(super) fn events_list<'py>(py: Python<'py>, core: &Pool, since: u64, until: u64) -> PyResult<Bound<'py, PyList>> {
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
