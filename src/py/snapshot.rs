//! The core's documents (the snapshot, events, recalibrations) as Python data: one serde
//! conversion each, so that their shape and every derived figure are defined in the core.

use super::errors::{invalid_input, IntoPyResult};
use super::events::Dispatch;
use super::exit::extract_int;
use super::text::{any_text, text};
use crate::pool::{Pool, Recalibration, Selection};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString};

/// Exits converted between two chances for other threads to take the GIL. Building the Python
/// objects of one exit (its record and matrix row) takes tens of microseconds; 64 of them keep
/// a thread that waits for the GIL from waiting much beyond the interpreter's own switch
/// interval (5 ms), where a 10,000-exit document in one go held every other thread up for
/// 0.3 s (bench/snapshot.py).
const EXITS_PER_PAUSE: usize = 64;

/// Everything the pool knows, as plain data (JSON-serialisable); the schema is the
/// `Snapshot` TypedDict in the stubs.
pub(super) fn snapshot<'py>(py: Python<'py>, core: &Pool, dispatch: &Dispatch, sel: &Selection) -> PyResult<Bound<'py, PyDict>> {
    // With a shared store this asks the store; without one it copies under the pool's lock:
    // either way without the GIL.
    let doc = py.detach(|| core.snapshot_document_of(sel));
    dispatch.deliver(py, core);
    // Between batches of exits the GIL is let go (the objects built so far are reachable from
    // this frame alone), so the threads leasing meanwhile are not held up by a long document.
    let pause = || py.detach(|| ());
    let dict = pythonize::pythonize(py, &doc.paced(EXITS_PER_PAUSE, &pause))?.cast_into::<PyDict>()?;
    // Freeing 10,000 records takes milliseconds too.
    py.detach(move || drop(doc));
    Ok(dict)
}

/// `snapshot()`'s arguments as the core's [`Selection`]; anything else is an `InvalidInput`
/// naming the argument and what it got.
pub(super) fn selection(
    py: Python<'_>,
    exits: &Bound<'_, PyAny>,
    state: Option<&Bound<'_, PyAny>>,
    tags: Option<&Bound<'_, PyAny>>,
    exit_ids: Option<&Bound<'_, PyAny>>,
    limit: Option<&Bound<'_, PyAny>>,
    by_tag: Option<&Bound<'_, PyAny>>,
) -> PyResult<Selection> {
    let Ok(exits) = exits.cast::<PyBool>() else {
        return Err(invalid_input(py, format!("snapshot exits must be True or False, got {}", kind(exits))));
    };
    let mut sel = Selection::default();
    if let Some(state) = state {
        let names = if state.is_instance_of::<PyString>() { vec![state.clone()] } else { items(py, state, "state")? };
        for name in names {
            let name = any_text(&name, "a snapshot state").map_err(|_| not_a_str(py, "state", &name))?;
            sel.states.push(Selection::state_named(&name).py_err(py)?);
        }
    }
    if let Some(tags) = tags {
        let Ok(tags) = tags.cast::<PyDict>() else {
            return Err(invalid_input(py, format!("snapshot tags must be a dict of str to str, got {}", kind(tags))));
        };
        for (k, v) in tags.iter() {
            let (Ok(k), Ok(v)) = (k.cast::<PyString>(), v.cast::<PyString>()) else {
                return Err(invalid_input(py, format!("snapshot tags must map str to str, got {}: {}", k.repr()?, v.repr()?)));
            };
            sel.tags.push((text(k, "a snapshot tag name")?.into_owned(), text(v, "a snapshot tag value")?.into_owned()));
        }
    }
    if let Some(ids) = exit_ids {
        let mut out = Vec::new();
        for id in items(py, ids, "exit_ids")? {
            out.push(any_text(&id, "an exit id in exit_ids").map_err(|_| not_a_str(py, "exit_ids", &id))?.into_owned());
        }
        sel.exit_ids = Some(out);
    }
    if let Some(limit) = limit {
        sel.limit = Some(extract_int(py, limit, "snapshot limit", 0..=u32::MAX as i128, "")? as usize);
    }
    if let Some(tag) = by_tag {
        let tag = any_text(tag, "snapshot by_tag").map_err(|_| not_a_str(py, "by_tag", tag))?;
        if tag.is_empty() {
            return Err(invalid_input(py, "snapshot by_tag must be a tag name, got ''"));
        }
        sel.by_tag = Some(tag.into_owned());
    }
    if !exits.is_true() {
        if let Some(arg) = [("state", state), ("tags", tags), ("exit_ids", exit_ids), ("limit", limit)].iter().find(|a| a.1.is_some()) {
            return Err(invalid_input(py, format!("snapshot(exits=False) lists no exit, so {}= has none to choose", arg.0)));
        }
        sel.limit = Some(0);
    }
    Ok(sel)
}

/// A True-or-False argument of `snapshot()`.
pub(super) fn flag(py: Python<'_>, value: &Bound<'_, PyAny>, what: &str) -> PyResult<bool> {
    match value.cast::<PyBool>() {
        Ok(b) => Ok(b.is_true()),
        Err(_) => Err(invalid_input(py, format!("snapshot {what} must be True or False, got {}", kind(value)))),
    }
}

/// The items of a collection argument: not one string (which would be its characters).
fn items<'py>(py: Python<'py>, value: &Bound<'py, PyAny>, what: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if value.is_instance_of::<PyString>() && what == "exit_ids" {
        return Err(invalid_input(py, "snapshot exit_ids must be a collection of exit ids, not one string"));
    }
    let iter = value.try_iter().map_err(|_| invalid_input(py, format!("snapshot {what} must be a collection, got {}", kind(value))))?;
    iter.collect()
}

fn not_a_str(py: Python<'_>, what: &str, got: &Bound<'_, PyAny>) -> PyErr {
    invalid_input(py, format!("snapshot {what} must hold str, got {}", kind(got)))
}

/// What a bad argument was, for a message: its type (never its text, which may be anything).
fn kind(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map(|n| format!("a {n}")).unwrap_or_else(|_| "an object".into())
}

/// `recalibrate()`'s changes, one dict each.
pub(super) fn changes_list(py: Python<'_>, changes: Vec<Recalibration>) -> PyResult<Bound<'_, PyList>> {
    Ok(pythonize::pythonize(py, &changes)?.cast_into::<PyList>()?)
}
