//! The one place core errors become Python exceptions. The classes live in
//! `exitpool/_errors.py` so that they can also subclass the built-ins users already catch.

use crate::error::Error;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

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

pub fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
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
