//! The one place core errors become Python exceptions. The classes live in
//! `exitpool/_errors.py` so that they can also subclass the built-ins users already catch.

use crate::error::Error;
use crate::pool::Refusal;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};

macro_rules! error_class {
    ($fn:ident, $name:literal) => {
        pub fn $fn(py: Python<'_>, msg: impl Into<String>) -> PyErr {
            static CLASS: PyOnceLock<Py<PyType>> = PyOnceLock::new();
            match CLASS.import(py, "exitpool._errors", $name) {
                Ok(class) => PyErr::from_type(class.clone(), (msg.into(),)),
                Err(e) => e,
            }
        }
    };
}

error_class!(invalid_input, "InvalidInput");
error_class!(unknown_exit, "UnknownExit");
error_class!(no_exit_available, "NoExitAvailable");

macro_rules! class_getter {
    ($fn:ident, $name:literal) => {
        pub fn $fn(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
            static CLASS: PyOnceLock<Py<PyType>> = PyOnceLock::new();
            CLASS.import(py, "exitpool._errors", $name)
        }
    };
}

class_getter!(session_exit_lost_class, "SessionExitLost");
class_getter!(warming_up_class, "WarmingUp");
class_getter!(cooling_class, "Cooling");

/// A refusal the caller cannot wait out (or the end of a wait) as its Python exception.
pub fn refusal_to_py(py: Python<'_>, r: Refusal, what: &str, timeout: Option<f64>) -> PyErr {
    let made = match r {
        Refusal::Full => return no_exit_available(py, full_message(what, timeout)),
        Refusal::NoExits => return no_exit_available(py, format!("{what} has no exit in service")),
        Refusal::OutOfService => {
            return no_exit_available(py, format!("every exit of {what} that could serve this lease is quarantined or dead for its site"))
        }
        Refusal::Cooling { wait, why } => {
            cooling_class(py).map(|c| PyErr::from_type(c.clone(), (format!("{what}: {why}; retry after {wait:.3} s"), wait)))
        }
        Refusal::WarmingUp { retry_after, exit_id } => warming_up_class(py).map(|c| {
            PyErr::from_type(
                c.clone(),
                (format!("the pairing with exit {exit_id:?} is warming up; retry after {retry_after:.3} s"), retry_after),
            )
        }),
        Refusal::SessionExitLost { key, exit_id, why } => session_exit_lost_class(py).map(|c| {
            PyErr::from_type(
                c.clone(),
                (
                    if why == crate::pool::TOKEN_ROTATED {
                        format!("session of key {key:?} on exit {exit_id:?} has ended: {why}; the key's next lease binds afresh")
                    } else {
                        format!("session of key {key:?} is bound to exit {exit_id:?}, but {why}; end it with end_session(key)")
                    },
                    key,
                    exit_id,
                ),
            )
        }),
    };
    made.unwrap_or_else(|e| e)
}

pub fn full_message(what: &str, timeout: Option<f64>) -> String {
    match timeout {
        Some(t) if t > 0.0 => format!("every exit of {what} that could serve this lease stayed at max_leases for {t} s"),
        _ => format!("every exit of {what} that could serve this lease is at max_leases"),
    }
}

/// An InvalidInput carrying where it is: `loc` (a key path), `file` and `line`, each None
/// when unknown; `_problem` is the message after the key, for the config loader to re-place.
pub fn invalid_at(
    py: Python<'_>,
    msg: String,
    loc: Option<Bound<'_, PyTuple>>,
    file: Option<&str>,
    line: Option<usize>,
    problem: &str,
) -> PyErr {
    let e = invalid_input(py, msg);
    let value = e.value(py);
    let set = || -> PyResult<()> {
        value.setattr("loc", loc)?;
        value.setattr("file", file)?;
        value.setattr("line", line)?;
        value.setattr("_problem", problem)
    };
    set().err().unwrap_or(e)
}

pub fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::Setting(s) => {
            let e = invalid_at(py, msg, PyTuple::new(py, &s.key).ok(), None, None, &s.message[s.problem_at..]);
            if !s.also.is_empty() {
                let _ = PyTuple::new(py, &s.also).and_then(|also| e.value(py).setattr("_also", also));
            }
            e
        }
        Error::BadInput(_) | Error::BadProxy(_) | Error::DuplicateExit(_) => invalid_input(py, msg),
        Error::UnknownExit(_) => unknown_exit(py, msg),
        Error::Empty(_) => no_exit_available(py, msg),
    }
}

/// `?` for core results inside a binding.
pub trait IntoPyResult<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for crate::Result<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

/// A binding's own refusal of a setting (a conversion: not a whole number, too large for its
/// type) given the key path the core's refusals carry. `label` is the name the message starts
/// with (`"health window"`), so the text after it is the problem.
pub fn at_key(py: Python<'_>, e: PyErr, key: &[&str], label: &str) -> PyErr {
    let value = e.value(py);
    let message = value.str().map(|s| s.to_string()).unwrap_or_default();
    let problem = message.get(label.len() + 1..).unwrap_or(&message).to_owned();
    let set = || -> PyResult<()> {
        value.setattr("loc", PyTuple::new(py, key)?)?;
        value.setattr("_problem", problem)
    };
    set().err().unwrap_or(e)
}
