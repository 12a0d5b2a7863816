//! The core's rules that Python code also applies (masking, the health states, the outcome
//! classes), handed over as they are so that Python never spells them a second time.

use crate::health::State;
use crate::outcome::{Outcome, OUTCOMES};
use pyo3::prelude::*;
use pyo3::types::{PyFrozenSet, PyString, PyTuple};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("_MASK", crate::mask::MASK)?;
    m.add("_STATES", PyTuple::new(py, State::ALL.map(State::name))?)?;
    m.add("_EJECTED", PyFrozenSet::new(py, State::ALL.into_iter().filter(|s| s.is_ejected()).map(State::name))?)?;
    // In full service: neither out nor back only on trial (a probe's control exits).
    m.add("_IN_SERVICE", PyFrozenSet::new(py, State::ALL.into_iter().filter(|s| !s.holds_a_cap_slot()).map(State::name))?)?;
    m.add("_OUTCOMES", PyTuple::new(py, OUTCOMES.map(Outcome::name))?)?;
    m.add_function(wrap_pyfunction!(scrub, m)?)?;
    Ok(())
}

/// The core's scrubbing of known secrets out of a message (a client's exception text).
/// Text that is not valid text (a lone surrogate) is scrubbed with U+FFFD in its place, as
/// `_mask_raw` shows it: a message about bad text must still come out, masked.
#[pyfunction]
#[pyo3(name = "_scrub")]
fn scrub(text: &Bound<'_, PyString>, secrets: Vec<Bound<'_, PyString>>) -> String {
    let secrets: Vec<String> = secrets.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    crate::mask::scrub(&text.to_string_lossy(), &secrets)
}
