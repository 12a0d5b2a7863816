//! `ManualClock`: the clock tests hand to a pool and advance by hand.

use super::errors::invalid_input;
use super::exit::Float;
use crate::clock::{Clock, ManualClock};
use pyo3::prelude::*;

#[pyclass(name = "ManualClock", module = "exitpool", frozen)]
pub struct PyManualClock {
    pub inner: ManualClock,
}

#[pymethods]
impl PyManualClock {
    #[new]
    #[pyo3(signature = (start=Float(0.0)), text_signature = "(start=0.0)")]
    fn new(py: Python<'_>, start: Float) -> PyResult<Self> {
        let Float(start) = start;
        if !start.is_finite() {
            return Err(invalid_input(py, format!("start {start} must be a finite number of seconds")));
        }
        Ok(PyManualClock { inner: ManualClock::new(start) })
    }

    /// Moves time forward by `seconds`; returns the new time.
    fn advance(&self, py: Python<'_>, seconds: Float) -> PyResult<f64> {
        self.inner.advance(seconds.0).map_err(|m| invalid_input(py, m))
    }

    /// The current time in seconds.
    fn now(&self) -> f64 {
        self.inner.now()
    }

    fn __repr__(&self) -> String {
        format!("ManualClock(now={})", self.inner.now())
    }
}
