//! The core's rules that Python code also applies (masking, the health states, the outcome
//! classes), handed over as they are so that Python never spells them a second time.

use crate::health::State;
use crate::outcome::{Outcome, OUTCOMES};
use pyo3::prelude::*;
use pyo3::types::{PyFrozenSet, PyTuple};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("_MASK", crate::proxy::MASK)?;
    m.add("_STATES", PyTuple::new(py, State::ALL.map(State::name))?)?;
    m.add("_EJECTED", PyFrozenSet::new(py, State::ALL.into_iter().filter(|s| s.is_ejected()).map(State::name))?)?;
    m.add("_OUTCOMES", PyTuple::new(py, OUTCOMES.map(Outcome::name))?)?;
    m.add_function(wrap_pyfunction!(scrub, m)?)?;
    Ok(())
}

/// The core's scrubbing of known secrets out of a message (a client's exception text).
#[pyfunction]
#[pyo3(name = "_scrub")]
fn scrub(text: &str, secrets: Vec<String>) -> String {
    crate::proxy::scrub(text, &secrets)
}
