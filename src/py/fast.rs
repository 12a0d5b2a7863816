//! Methods CPython calls without PyO3's argument parsing, for the calls a scraper makes for
//! every request.
//!
//! PyO3 parses every call's arguments against the full signature (positional, then each
//! keyword-only parameter) and counts the interpreter attachment in a thread-local: about 140
//! instructions of a `pool.release(lease)` that costs some 1,500. `Pool.acquire` and
//! `Pool.release` are replaced on the type by `METH_FASTCALL` methods that handle the common
//! call (`acquire()`, `acquire(key)`, `release(lease)`) themselves and hand any other (keywords,
//! an argument of another type) to the PyO3 method they replace, kept aside, so that every
//! such call behaves and fails exactly as before. `Ring.assign` (see `ring.rs`) is `METH_O`.

use super::lease::PyLease;
use super::pool::PyPool;
use pyo3::ffi;
use pyo3::panic::PanicException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString, PyTuple};
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A method definition CPython can keep a pointer to for the life of the process.
pub(super) struct MethodDef(pub(super) ffi::PyMethodDef);

// SAFETY: the definition is never written after construction; CPython only reads it, and
// its pointers are to 'static C strings and functions.
unsafe impl Sync for MethodDef {}
unsafe impl Send for MethodDef {}

/// What a hand-made method returns to CPython: the result as a new reference, or NULL with the
/// error (or a panic, as a `PanicException`, as in PyO3's methods) set. Inlined, with the error
/// out of line: the call was 1% of a lease pair.
#[inline(always)]
pub(super) fn returned(outcome: std::thread::Result<PyResult<Py<PyAny>>>, what: &str) -> *mut ffi::PyObject {
    match outcome {
        Ok(Ok(obj)) => obj.into_ptr(),
        failed => raised(failed, what),
    }
}

#[cold]
#[inline(never)]
fn raised(outcome: std::thread::Result<PyResult<Py<PyAny>>>, what: &str) -> *mut ffi::PyObject {
    let err = match outcome {
        Ok(Ok(obj)) => return obj.into_ptr(),
        Ok(Err(err)) => err,
        Err(payload) => {
            let msg = payload.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| payload.downcast_ref::<String>().cloned());
            PanicException::new_err(msg.unwrap_or_else(|| format!("panic in {what}")))
        }
    };
    // Through PyO3's attach, so that the objects `restore` lets go of are released at once
    // rather than deferred (PyO3 does not know that CPython's call left the thread attached).
    Python::attach(|py| err.restore(py));
    std::ptr::null_mut()
}

/// The PyO3 methods replaced, for the calls the fast paths leave to them.
static ACQUIRE_FULL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static RELEASE_FULL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static DEFS: std::sync::OnceLock<[MethodDef; 2]> = std::sync::OnceLock::new();

/// Replaces `Pool.acquire` and `Pool.release` by their fast paths, each with the signature and
/// doc of the PyO3 method it wraps (what `help()`, `inspect.signature` and stubtest read).
pub fn install(py: Python<'_>) -> PyResult<()> {
    let ty = py.get_type::<PyPool>();
    let (acquire, release) = (ty.getattr("acquire")?, ty.getattr("release")?);
    let doc = |name: &str, full: &Bound<'_, PyAny>| -> PyResult<*const std::os::raw::c_char> {
        let text = format!("{name}{}\n--\n\n{}", full.getattr("__text_signature__")?, full.getattr("__doc__")?.str()?);
        // Leaked once per process: CPython keeps the pointer for the type's life.
        Ok(CString::new(text).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?.into_raw())
    };
    let def = |name: &'static std::ffi::CStr, meth: ffi::PyCFunctionFastWithKeywords, doc| {
        MethodDef(ffi::PyMethodDef {
            ml_name: name.as_ptr(),
            ml_meth: ffi::PyMethodDefPointer { PyCFunctionFastWithKeywords: meth },
            ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
            ml_doc: doc,
        })
    };
    let defs = DEFS.get_or_init(|| {
        [
            def(c"acquire", acquire_fast, doc("acquire", &acquire).unwrap_or(std::ptr::null())),
            def(c"release", release_fast, doc("release", &release).unwrap_or(std::ptr::null())),
        ]
    });
    ACQUIRE_FULL.get_or_init(py, || acquire.clone().unbind());
    RELEASE_FULL.get_or_init(py, || release.clone().unbind());
    for d in defs {
        // SAFETY: `d` is a valid `METH_FASTCALL | METH_KEYWORDS` definition with 'static
        // lifetime; CPython reads it and never writes through the pointer. The result is a
        // new reference or NULL with an exception set.
        let descr =
            unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(ty.as_type_ptr(), std::ptr::from_ref(&d.0).cast_mut()))? };
        // SAFETY: `ml_name` is one of the C string literals above.
        let name = unsafe { std::ffi::CStr::from_ptr(d.0.ml_name) }.to_str().unwrap_or_default();
        ty.setattr(name, descr)?;
    }
    Ok(())
}

/// The call as CPython made it: `self`, the positional arguments, then the values of the
/// keywords `kwnames` names (NULL when there are none), all borrowed for the call.
struct Call<'a, 'py> {
    pool: Borrowed<'a, 'py, PyPool>,
    args: &'a [*mut ffi::PyObject],
    kwnames: *mut ffi::PyObject,
}

impl<'a, 'py> Call<'a, 'py> {
    /// # Safety
    /// As CPython calls a `METH_FASTCALL | METH_KEYWORDS` method of `Pool`: `slf` a live Pool
    /// (the descriptor checks the type), `args` holding `nargs` positional values followed by
    /// one value per name in `kwnames`.
    unsafe fn of(
        py: Python<'py>,
        slf: *mut ffi::PyObject,
        args: *const *mut ffi::PyObject,
        nargs: ffi::Py_ssize_t,
        kwnames: *mut ffi::PyObject,
    ) -> Call<'a, 'py> {
        let nkw = if kwnames.is_null() { 0 } else { unsafe { ffi::PyTuple_Size(kwnames) } };
        let len = (nargs + nkw.max(0)) as usize;
        let args = if len == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(args, len) } };
        Call { pool: unsafe { Borrowed::from_ptr(py, slf).cast_unchecked::<PyPool>() }, args, kwnames }
    }

    /// The one positional argument, when it is the whole call.
    fn only_arg(&self) -> Option<Borrowed<'a, 'py, PyAny>> {
        match self.args {
            // SAFETY: a live argument CPython holds for the duration of the call.
            [arg] if self.kwnames.is_null() => Some(unsafe { Borrowed::from_ptr(self.pool.py(), *arg) }),
            _ => None,
        }
    }

    /// Hands the call to the PyO3 method `full`, which parses it against the full signature.
    fn to_full(&self, full: &PyOnceLock<Py<PyAny>>) -> PyResult<Py<PyAny>> {
        let py = self.pool.py();
        let full = full.get(py).ok_or_else(|| PanicException::new_err("Pool fast path called before install"))?.bind(py);
        // SAFETY (both blocks): live arguments CPython holds for the duration of the call.
        let value = |p: *mut ffi::PyObject| unsafe { Borrowed::from_ptr(py, p) };
        let nkw = if self.kwnames.is_null() { 0 } else { unsafe { ffi::PyTuple_Size(self.kwnames) as usize } };
        let npos = self.args.len() - nkw;
        let mut positional = vec![self.pool.as_any().to_owned()];
        positional.extend(self.args[..npos].iter().map(|&p| value(p).to_owned()));
        let positional = PyTuple::new(py, positional)?;
        let keywords = if nkw == 0 {
            None
        } else {
            let names = unsafe { Borrowed::from_ptr(py, self.kwnames) };
            let d = PyDict::new(py);
            for (i, &v) in self.args[npos..].iter().enumerate() {
                d.set_item(names.get_item(i)?, value(v))?;
            }
            Some(d)
        };
        Ok(full.call(positional, keywords.as_ref())?.unbind())
    }
}

/// The body of a hand-made `Pool` method: `body` gets the call; a panic becomes an exception.
///
/// # Safety
/// As CPython calls a `METH_FASTCALL | METH_KEYWORDS` method of `Pool` (see [`Call::of`]).
#[inline(always)]
unsafe fn pool_method(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
    what: &str,
    body: impl for<'a, 'py> FnOnce(Python<'py>, Call<'a, 'py>) -> PyResult<Py<PyAny>>,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls methods only from a thread attached to the interpreter.
    let py = unsafe { Python::assume_attached() };
    // SAFETY: as this function's caller promises.
    let outcome = catch_unwind(AssertUnwindSafe(|| body(py, unsafe { Call::of(py, slf, args, nargs, kwnames) })));
    returned(outcome, what)
}

/// `Pool.acquire`: `acquire()` and `acquire(key)` with a str key here, any other call through
/// the PyO3 method.
unsafe extern "C" fn acquire_fast(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls this as a METH_FASTCALL | METH_KEYWORDS method of Pool.
    unsafe {
        pool_method(slf, args, nargs, kwnames, "Pool.acquire", |py, call| {
            let key = match (call.args.len(), call.only_arg()) {
                (0, _) if call.kwnames.is_null() => None,
                (_, Some(arg)) => match arg.cast::<PyString>() {
                    Ok(key) => Some(key.to_owned()),
                    Err(_) => return call.to_full(&ACQUIRE_FULL),
                },
                _ => return call.to_full(&ACQUIRE_FULL),
            };
            let lease = call.pool.get().acquire(py, key, None, None, None)?;
            Ok(Bound::new(py, lease)?.into_any().unbind())
        })
    }
}

/// `Pool.release`: `release(lease)` here, any other call (a report's keywords, an argument that
/// is no Lease) through the PyO3 method.
unsafe extern "C" fn release_fast(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls this as a METH_FASTCALL | METH_KEYWORDS method of Pool.
    unsafe {
        pool_method(slf, args, nargs, kwnames, "Pool.release", |py, call| {
            let arg = call.only_arg();
            match arg.as_ref().map(|arg| arg.cast::<PyLease>()) {
                Some(Ok(lease)) => {
                    let released = call.pool.get().release(py, &lease, None, None, None, None, None)?;
                    Ok(pyo3::types::PyBool::new(py, released).to_owned().into_any().unbind())
                }
                _ => call.to_full(&RELEASE_FULL),
            }
        })
    }
}
