//! Events: hands the core's new events to the `exitpool` logger and the `on_event` callbacks,
//! and converts them for `pool.events()`.

use crate::events::Delivered;
use crate::pool::Pool;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyList;

/// Hands new events to the `exitpool` logger and the `on_event` callbacks, once each.
#[derive(Default)]
pub(super) struct Dispatch {
    listeners: Mutex<Vec<Py<PyAny>>>,
    delivered: Delivered,
    /// What `pool.close()` stops besides the core (file watchers), for every view alike.
    closers: Mutex<Vec<Py<PyAny>>>,
}

impl Dispatch {
    /// Costs one atomic load when nothing happened, which is nearly always: inlined into the
    /// lease path, with the delivery itself out of line (inlined, it made this a call with a
    /// large prologue on every acquire and release).
    #[inline(always)]
    pub(super) fn deliver(&self, py: Python<'_>, core: &Pool) {
        if let Some(claimed) = self.delivered.claim(core.event_seq()) {
            // Delivery must never fail the call that triggered it.
            let _ = self.deliver_range(py, core, claimed.start, claimed.end);
        }
    }

    /// `pool.on_event(callback)`: the callback hears every event from the next delivery on.
    pub(super) fn listen(&self, py: Python<'_>, callback: &Py<PyAny>) {
        self.listeners.lock().push(callback.clone_ref(py));
    }

    pub(super) fn on_close(&self, py: Python<'_>, callback: Py<PyAny>) {
        let _ = py;
        self.closers.lock().push(callback);
    }

    /// The closers registered so far, taken: `close` runs each once.
    pub(super) fn closers(&self, _py: Python<'_>) -> Vec<Py<PyAny>> {
        std::mem::take(&mut *self.closers.lock())
    }

    /// Delivers events `from..to`, the range this caller claimed.
    #[cold]
    #[inline(never)]
    fn deliver_range(&self, py: Python<'_>, core: &Pool, from: u64, to: u64) -> PyResult<()> {
        static DELIVER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let events = events_list(py, core, from, to)?;
        let listeners: Vec<Py<PyAny>> = self.listeners.lock().iter().map(|l| l.clone_ref(py)).collect();
        DELIVER.import(py, "exitpool._events", "_deliver")?.call1((listeners, events))?;
        Ok(())
    }
}

/// The events kept with `since <= seq < until`, oldest first, one dict each.
pub(super) fn events_list<'py>(py: Python<'py>, core: &Pool, since: u64, until: u64) -> PyResult<Bound<'py, PyList>> {
    let mut events = core.events(since);
    events.truncate(events.partition_point(|e| e.seq < until));
    Ok(pythonize::pythonize(py, &events)?.cast_into::<PyList>()?)
}
