//! `Gateway`: a provider endpoint that expands into sticky-session slots. Converts its
//! arguments and delegates to the core's `Gateway`; its repr masks the password and shows no
//! template (a password template may hold the password).

use super::errors::IntoPyResult;
use super::exit::{capacity_of, extract_int, extract_tags, tags_dict, Float, PyExit};
use super::text::{opt_text, text};
use crate::gateway::{Gateway, GatewaySpec, MAX_SLOTS};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use std::sync::Arc;

#[pyclass(name = "Gateway", module = "exitpool", frozen)]
pub struct PyGateway {
    pub inner: Arc<Gateway>,
    /// What the user wrote, for pickling through the validating constructor.
    spec: GatewaySpec,
}

/// Unix time now, for the methods whose `at` is left out.
fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl PyGateway {
    /// A gateway the core checked (a config file's `[[gateway]]`), with what was written.
    pub fn wrap(spec: GatewaySpec, inner: Gateway) -> PyGateway {
        PyGateway { inner: Arc::new(inner), spec }
    }

    fn slot(&self, py: Python<'_>, slot: &Bound<'_, PyAny>) -> PyResult<u32> {
        let last = i128::from(self.inner.slots) - 1;
        Ok(extract_int(py, slot, "slot", 0..=last, &format!(" (gateway {:?} has {} slots)", self.inner.id, self.inner.slots))? as u32)
    }

    fn at(py: Python<'_>, at: Option<Float>) -> PyResult<f64> {
        match at {
            None => Ok(unix_now()),
            Some(Float(t)) if t.is_finite() && t >= 0.0 => Ok(t),
            Some(Float(t)) => Err(super::errors::invalid_input(py, format!("at {t} must be a finite Unix time >= 0"))),
        }
    }
}

#[pymethods]
impl PyGateway {
    #[new]
    #[pyo3(signature = (gateway_id, proxy, *, slots, username=None, password=None, lifetime=None, capacity=None, tags=None,
                        preset=None, margin=None, rebind=false, session_alphabet=None, session_length=None),
           text_signature = "(gateway_id, proxy, *, slots, username=None, password=None, lifetime=None, capacity=1, tags=None, preset=None, margin=None, rebind=False, session_alphabet=None, session_length=None)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        gateway_id: &Bound<'_, PyString>,
        proxy: &Bound<'_, PyString>,
        slots: &Bound<'_, PyAny>,
        username: Option<&Bound<'_, PyString>>,
        password: Option<&Bound<'_, PyString>>,
        lifetime: Option<Float>,
        capacity: Option<&Bound<'_, PyAny>>,
        tags: Option<&Bound<'_, PyDict>>,
        preset: Option<&Bound<'_, PyString>>,
        margin: Option<Float>,
        rebind: bool,
        session_alphabet: Option<&Bound<'_, PyString>>,
        session_length: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyGateway> {
        // Out-of-range counts get the core's message, which names the gateway.
        let wide = i128::from(i64::MIN)..=i128::from(i64::MAX);
        let spec = GatewaySpec {
            id: text(gateway_id, "gateway_id")?.into_owned(),
            proxy: text(proxy, "proxy")?.into_owned(),
            slots: extract_int(py, slots, "slots", wide.clone(), &format!(" (1..={MAX_SLOTS})"))? as i64,
            username: opt_text(username, "username")?.map(|s| s.into_owned()),
            password: opt_text(password, "password")?.map(|s| s.into_owned()),
            lifetime: lifetime.map(|f| f.0),
            margin: margin.map(|f| f.0),
            capacity: capacity.map(|c| capacity_of(py, c)).transpose()?.unwrap_or(1).into(),
            tags: extract_tags(py, tags)?,
            preset: opt_text(preset, "preset")?.map(|s| s.into_owned()),
            session_alphabet: opt_text(session_alphabet, "session_alphabet")?.map(|s| s.into_owned()),
            session_length: session_length.map(|n| extract_int(py, n, "session_length", wide.clone(), "")).transpose()?.map(|n| n as i64),
            rebind,
        };
        let inner = Gateway::new(spec.clone()).py_err(py)?;
        Ok(PyGateway { inner: Arc::new(inner), spec })
    }

    #[getter]
    fn gateway_id(&self) -> &str {
        &self.inner.id
    }
    /// The proxy URL with its password replaced by `[secure]`.
    #[getter]
    fn masked_proxy(&self) -> &str {
        self.inner.masked_proxy()
    }
    #[getter]
    fn slots(&self) -> u32 {
        self.inner.slots
    }
    /// Seconds a token lives at the provider; `None`: tokens never expire.
    #[getter]
    fn lifetime(&self) -> Option<f64> {
        self.inner.lifetime
    }
    /// Seconds before the lifetime ends that a slot moves to its next token.
    #[getter]
    fn margin(&self) -> f64 {
        self.inner.margin
    }
    #[getter]
    fn capacity(&self) -> u32 {
        self.inner.capacity
    }
    #[getter]
    fn tags<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        tags_dict(py, &self.inner.tags)
    }
    #[getter]
    fn preset(&self) -> Option<&'static str> {
        self.inner.preset.map(|p| p.name)
    }
    #[getter]
    fn rebind(&self) -> bool {
        self.inner.rebind
    }
    #[getter]
    fn session_alphabet(&self) -> &'static str {
        self.inner.alphabet.name()
    }
    #[getter]
    fn session_length(&self) -> u32 {
        self.inner.length
    }

    /// The id of slot `slot`: `"{gateway_id}-{slot}"`.
    fn slot_id(&self, py: Python<'_>, slot: &Bound<'_, PyAny>) -> PyResult<String> {
        Ok(self.inner.slot_id(self.slot(py, slot)?))
    }

    /// Slot `slot`'s token at Unix time `at` (default: now): what every worker uses then.
    #[pyo3(signature = (slot, at=None))]
    fn token(&self, py: Python<'_>, slot: &Bound<'_, PyAny>, at: Option<Float>) -> PyResult<String> {
        let (slot, at) = (self.slot(py, slot)?, Self::at(py, at)?);
        Ok(self.inner.token(slot, self.inner.generation(slot, at)))
    }

    /// Slot `slot`'s token generation at Unix time `at` (default: now).
    #[pyo3(signature = (slot, at=None))]
    fn generation(&self, py: Python<'_>, slot: &Bound<'_, PyAny>, at: Option<Float>) -> PyResult<u64> {
        let (slot, at) = (self.slot(py, slot)?, Self::at(py, at)?);
        Ok(self.inner.generation(slot, at))
    }

    /// The Unix time slot `slot` next moves to a new token after `at` (default: now);
    /// `inf` if tokens never expire.
    #[pyo3(signature = (slot, at=None))]
    fn rotates_at(&self, py: Python<'_>, slot: &Bound<'_, PyAny>, at: Option<Float>) -> PyResult<f64> {
        let (slot, at) = (self.slot(py, slot)?, Self::at(py, at)?);
        Ok(self.inner.rotates_at(slot, self.inner.generation(slot, at)))
    }

    /// The slots as exits at Unix time `at` (default: now), each with that time's token.
    /// Given to a pool on their own they are plain exits whose token never rotates: give the
    /// pool the gateway instead.
    #[pyo3(signature = (at=None))]
    fn exits(&self, py: Python<'_>, at: Option<Float>) -> PyResult<Vec<PyExit>> {
        let at = Self::at(py, at)?;
        Ok(self.inner.exits_at(at, 0).into_iter().map(|e| PyExit::wrap(crate::exit::Exit { gateway: None, ..e })).collect())
    }

    /// The documented formats this version knows: name, templates, id rule, lifetime range
    /// (seconds) and default, and the page each was checked against.
    #[staticmethod]
    fn presets(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
        crate::gateway::presets::ALL
            .iter()
            .map(|p| {
                let d = PyDict::new(py);
                d.set_item("name", p.name)?;
                d.set_item("username", p.username)?;
                d.set_item("password", p.password)?;
                d.set_item("session_alphabet", p.rule.alphabet.name())?;
                d.set_item("session_length", (p.rule.min_len, p.rule.max_len))?;
                d.set_item("default_session_length", p.length)?;
                d.set_item("lifetime", p.lifetime.map(|l| (l.min, l.max)))?;
                d.set_item("default_lifetime", p.lifetime.map(|l| l.default))?;
                d.set_item("source", p.source)?;
                Ok(d)
            })
            .collect()
    }

    fn __repr__(&self) -> String {
        let g = &*self.inner;
        let mut s = format!("Gateway({:?}, {:?}, slots={}", g.id, g.masked_proxy(), g.slots);
        if let Some(p) = g.preset {
            s.push_str(&format!(", preset={:?}", p.name));
        }
        match g.lifetime {
            Some(l) => s.push_str(&format!(", lifetime={l:?}, margin={:?}", g.margin)),
            None => s.push_str(", lifetime=None"),
        }
        if g.capacity != 1 {
            s.push_str(&format!(", capacity={}", g.capacity));
        }
        if !g.tags.is_empty() {
            let tags: Vec<String> = g.tags.iter().map(|(k, v)| format!("{k:?}: {v:?}")).collect();
            s.push_str(&format!(", tags={{{}}}", tags.join(", ")));
        }
        if g.rebind {
            s.push_str(", rebind=True");
        }
        s.push(')');
        s.replace('"', "'")
    }

    /// Pickling (multiprocessing workers) rebuilds through the validating constructor.
    fn __getnewargs_ex__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyDict>)> {
        let s = &self.spec;
        let kwargs = PyDict::new(py);
        kwargs.set_item("slots", s.slots)?;
        kwargs.set_item("username", s.username.as_deref())?;
        kwargs.set_item("password", s.password.as_deref())?;
        kwargs.set_item("lifetime", s.lifetime)?;
        kwargs.set_item("capacity", s.capacity)?;
        kwargs.set_item("tags", self.tags(py)?)?;
        kwargs.set_item("preset", s.preset.as_deref())?;
        kwargs.set_item("margin", s.margin)?;
        kwargs.set_item("rebind", s.rebind)?;
        kwargs.set_item("session_alphabet", s.session_alphabet.as_deref())?;
        kwargs.set_item("session_length", s.session_length)?;
        let args = (s.id.as_str(), s.proxy.as_str()).into_pyobject(py)?.into_any();
        Ok((args, kwargs))
    }
}
