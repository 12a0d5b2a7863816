//! Reading Python strings on the hot path.
//!
//! Under the abi3-py39 stable ABI PyO3 reads a `str` by encoding it into a new bytes object.
//! `PyUnicode_AsUTF8AndSize` returns the string's cached UTF-8 without allocating; it is part of
//! the stable ABI from 3.10 and exported by every CPython since 3.3, so it is called directly
//! when the running interpreter is 3.10 or later and the portable path is kept for 3.9.

use pyo3::prelude::*;
use pyo3::types::PyString;
use std::borrow::Cow;
use std::sync::OnceLock;

extern "C" {
    fn PyUnicode_AsUTF8AndSize(unicode: *mut pyo3::ffi::PyObject, size: *mut pyo3::ffi::Py_ssize_t) -> *const std::os::raw::c_char;
}

fn fast_path(py: Python<'_>) -> bool {
    static FAST: OnceLock<bool> = OnceLock::new();
    *FAST.get_or_init(|| py.version_info() >= (3, 10))
}

/// Calls `f` with the UTF-8 of a Python `str`, without copying where the interpreter allows.
#[inline]
pub fn with_str<R>(s: &Bound<'_, PyString>, f: impl FnOnce(&str) -> R) -> PyResult<R> {
    if fast_path(s.py()) {
        let mut size: pyo3::ffi::Py_ssize_t = 0;
        // SAFETY: `s` is a live str; the returned buffer is owned by it and valid while it is.
        let ptr = unsafe { PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut size) };
        if ptr.is_null() {
            return Err(PyErr::fetch(s.py()));
        }
        // SAFETY: CPython guarantees valid UTF-8 of `size` bytes here.
        let text = unsafe { std::str::from_utf8_unchecked(std::slice::from_raw_parts(ptr as *const u8, size as usize)) };
        return Ok(f(text));
    }
    let cow: Cow<'_, str> = s.to_cow()?;
    Ok(f(&cow))
}

/// The same for any object that should be a `str`, with a `TypeError` naming what it got.
#[inline]
pub fn with_key<R>(key: &Bound<'_, PyAny>, what: &str, f: impl FnOnce(&str) -> R) -> PyResult<R> {
    match key.cast::<PyString>() {
        Ok(s) => with_str(s, f),
        Err(_) => Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{what} must be a str, got {}",
            key.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
        ))),
    }
}
