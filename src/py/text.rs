//! Reading Python strings: every `str` that crosses into the core is read here, so that one
//! that is not valid text (a lone surrogate, which has no UTF-8 form) becomes an
//! `InvalidInput` naming the argument, whichever entry point it came through.
//!
//! On the hot path:
//! Under the abi3-py39 stable ABI PyO3 reads a `str` by encoding it into a new bytes object.
//! `PyUnicode_AsUTF8AndSize` returns the string's cached UTF-8 without allocating; it is part of
//! the stable ABI from 3.10 and exported by every CPython since 3.3, so it is called directly
//! when the running interpreter is 3.10 or later and the portable path is kept for 3.9.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use std::borrow::Cow;
use std::ops::Range;
use std::sync::OnceLock;

extern "C" {
    fn PyUnicode_AsUTF8AndSize(unicode: *mut ffi::PyObject, size: *mut ffi::Py_ssize_t) -> *const std::os::raw::c_char;
}

fn fast_path(py: Python<'_>) -> bool {
    static FAST: OnceLock<bool> = OnceLock::new();
    *FAST.get_or_init(|| py.version_info() >= (3, 10))
}

/// The cached UTF-8 of a `str`, borrowed from it: only where [`fast_path`] holds.
#[inline]
fn borrowed_utf8<'a>(s: &'a Bound<'_, PyString>) -> PyResult<&'a str> {
    let mut size: ffi::Py_ssize_t = 0;
    // SAFETY: `s` is a live str; the returned buffer is owned by it and valid while it is,
    // which the lifetime `'a` (a borrow of `s`, a strong reference) guarantees.
    let ptr = unsafe { PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut size) };
    if ptr.is_null() {
        return Err(PyErr::fetch(s.py()));
    }
    // SAFETY: CPython guarantees valid UTF-8 of `size` bytes here.
    Ok(unsafe { std::str::from_utf8_unchecked(std::slice::from_raw_parts(ptr as *const u8, size as usize)) })
}

/// Calls `f` with the UTF-8 of a Python `str`, without copying where the interpreter allows.
#[inline]
pub fn with_str<R>(s: &Bound<'_, PyString>, f: impl FnOnce(&str) -> R) -> PyResult<R> {
    if fast_path(s.py()) {
        return Ok(f(borrowed_utf8(s)?));
    }
    let cow: Cow<'_, str> = s.to_cow()?;
    Ok(f(&cow))
}

/// The text of the `str` argument `what`, borrowed where the interpreter allows; a string
/// that is not valid text is an `InvalidInput` naming `what`.
#[inline]
pub fn text<'a>(s: &'a Bound<'_, PyString>, what: &str) -> PyResult<Cow<'a, str>> {
    let read = if fast_path(s.py()) { borrowed_utf8(s).map(Cow::Borrowed) } else { s.to_cow() };
    read.map_err(|e| not_text(s.py(), what, e))
}

/// [`text`] for an optional argument.
pub fn opt_text<'a>(s: Option<&'a Bound<'_, PyString>>, what: &str) -> PyResult<Option<Cow<'a, str>>> {
    s.map(|s| text(s, what)).transpose()
}

/// [`text`] for any object that should be a `str`, with a `TypeError` naming what it got.
pub fn any_text<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Cow<'a, str>> {
    text(as_str(obj, what)?, what)
}

/// The same for any object that should be a `str`, with a `TypeError` naming what it got.
#[inline]
pub fn with_key<R>(key: &Bound<'_, PyAny>, what: &str, f: impl FnOnce(&str) -> R) -> PyResult<R> {
    let s = as_str(key, what)?;
    with_str(s, f).map_err(|e| not_text(key.py(), what, e))
}

/// The error for a `str` with no UTF-8 form: names the argument and where the surrogate is,
/// never the text (which may be a proxy URL with its password).
#[cold]
fn not_text(py: Python<'_>, what: &str, err: PyErr) -> PyErr {
    if !err.is_instance_of::<pyo3::exceptions::PyUnicodeEncodeError>(py) {
        return err;
    }
    let at = err.value(py).getattr("start").and_then(|v| v.extract::<usize>()).ok();
    let place = at.map(|i| format!(" at position {i}")).unwrap_or_default();
    super::errors::invalid_input(py, format!("{what} is not valid text: it holds a lone surrogate{place}, which has no UTF-8 form"))
}

/// Calls `f` with the UTF-8 of `list[range]`, items that should be `str`s, read in one go.
///
/// On 3.10 and later the text is borrowed from the strings, which the list keeps alive: `f`
/// must not let Python code run (it could empty the list), and it is not given a `Python`
/// token to do so by accident. On 3.9 the text is copied.
pub fn with_list_utf8<R>(list: &Bound<'_, PyList>, range: Range<usize>, what: &str, f: impl FnOnce(&[&[u8]]) -> R) -> PyResult<R> {
    let py = list.py();
    assert!(range.len() <= BATCH, "at most BATCH items at a time");
    if !fast_path(py) {
        let owned: Vec<String> = range.map(|i| Ok(any_text(&list.get_item(i)?, what)?.into_owned())).collect::<PyResult<_>>()?;
        let texts: Vec<&[u8]> = owned.iter().map(|t| t.as_bytes()).collect();
        return Ok(f(&texts));
    }
    let mut texts: [&[u8]; BATCH] = [&[]; BATCH];
    let (count, len) = (range.len(), list.len());
    for (text, i) in texts.iter_mut().zip(range) {
        // The string a batch ahead is rarely in the cache yet: asked for now, it arrives while
        // this batch is hashed, instead of stalling the next batch one string at a time.
        if i + BATCH < len {
            // SAFETY: `list` is a live list and the index is in bounds, so this is a borrowed
            // reference to an item (only its address is used).
            prefetch(unsafe { ffi::PyList_GetItem(list.as_ptr(), (i + BATCH) as ffi::Py_ssize_t) });
        }
        // SAFETY: `list` is a live list; PyList_GetItem checks the index and returns a
        // borrowed reference, or NULL with an IndexError set.
        let item = unsafe { ffi::PyList_GetItem(list.as_ptr(), i as ffi::Py_ssize_t) };
        if item.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: `item` is non-NULL and the list holds a reference to it.
        let item = unsafe { Borrowed::from_ptr(py, item) };
        let s = as_str(&item, what)?;
        let mut size: ffi::Py_ssize_t = 0;
        // SAFETY: `s` is a live str.
        let ptr = unsafe { PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut size) };
        if ptr.is_null() {
            return Err(not_text(py, what, PyErr::fetch(py)));
        }
        // SAFETY: CPython guarantees `size` bytes at `ptr`, owned by the string, which the list
        // keeps alive as long as no Python code runs: none does until `f` has returned.
        *text = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), size as usize) };
    }
    Ok(f(&texts[..count]))
}

/// The most items [`with_list_utf8`] reads at a time: its buffer is on the stack, and a batch
/// this size stays in L1 between reading, hashing and looking up.
pub const BATCH: usize = 256;

/// Asks the CPU to start loading the object's first cache line, without waiting for it.
#[inline(always)]
fn prefetch(object: *mut ffi::PyObject) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults, whatever the address, and changes
    // nothing the program can observe.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(object.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = object;
}

#[inline(always)]
fn as_str<'a, 'py>(key: &'a Bound<'py, PyAny>, what: &str) -> PyResult<&'a Bound<'py, PyString>> {
    // The exact type first: a pointer comparison, where the subclass check is a call.
    if key.is_exact_instance_of::<PyString>() {
        // SAFETY: just checked that `key` is exactly a str.
        return Ok(unsafe { key.cast_unchecked::<PyString>() });
    }
    key.cast::<PyString>().map_err(|_| not_a_str(key, what))
}

#[cold]
fn not_a_str(key: &Bound<'_, PyAny>, what: &str) -> PyErr {
    pyo3::exceptions::PyTypeError::new_err(format!(
        "{what} must be a str, got {}",
        key.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
    ))
}
