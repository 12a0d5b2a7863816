//! `Exit`: an immutable, hashable value; its repr masks the password the way httpx does.

use super::errors::{invalid_input, IntoPyResult};
use crate::exit::Exit;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};
use std::sync::Arc;

#[pyclass(name = "Exit", module = "exitpool", frozen)]
pub struct PyExit {
    pub inner: Arc<Exit>,
}

/// A capacity must be a whole number: `True`, `1.0` and `nan` are refused by name.
pub fn extract_capacity(py: Python<'_>, value: &Bound<'_, PyAny>, what: &str) -> PyResult<i64> {
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        let shown = if value.is_instance_of::<PyFloat>() || value.is_instance_of::<PyBool>() {
            value.repr()?.to_string()
        } else {
            format!("a {}", value.get_type().name()?)
        };
        return Err(invalid_input(py, format!("{what} must be a whole number, got {shown}")));
    }
    value
        .extract::<i64>()
        .map_err(|_| invalid_input(py, format!("{what} {} is outside 0..={}", value, crate::exit::MAX_CAPACITY)))
}

fn extract_tags(py: Python<'_>, tags: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<(String, String)>> {
    let Some(tags) = tags else { return Ok(Vec::new()) };
    let mut out = Vec::with_capacity(tags.len());
    for (k, v) in tags.iter() {
        let (Ok(k), Ok(v)) = (k.cast::<PyString>(), v.cast::<PyString>()) else {
            return Err(invalid_input(py, format!("tags must map str to str, got {}: {}", k.repr()?, v.repr()?)));
        };
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

impl PyExit {
    pub fn wrap(exit: Exit) -> PyExit {
        PyExit { inner: Arc::new(exit) }
    }
}

#[pymethods]
impl PyExit {
    #[new]
    #[pyo3(signature = (exit_id, proxy, *, ip=None, capacity=None, tags=None))]
    fn new(
        py: Python<'_>,
        exit_id: &str,
        proxy: &str,
        ip: Option<&str>,
        capacity: Option<&Bound<'_, PyAny>>,
        tags: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyExit> {
        let capacity = match capacity {
            Some(c) => extract_capacity(py, c, "capacity")?,
            None => 1,
        };
        let tags = extract_tags(py, tags)?;
        Exit::new(exit_id, proxy, ip, capacity, tags).py_err(py).map(PyExit::wrap)
    }

    /// The stable identity the ring hashes.
    #[getter]
    fn exit_id(&self) -> &str {
        &self.inner.id
    }
    /// The URL to connect through, credentials included (aiohttp, httpx).
    #[getter]
    fn proxy(&self) -> &str {
        self.inner.proxy.as_str()
    }
    /// `{"http": url, "https": url}` for requests.
    #[getter]
    fn proxies<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("http", self.inner.proxy.as_str())?;
        d.set_item("https", self.inner.proxy.as_str())?;
        Ok(d)
    }
    /// The proxy URL with its password replaced by `[secure]`.
    #[getter]
    fn masked_proxy(&self) -> &str {
        self.inner.proxy.masked()
    }
    #[getter]
    fn ip(&self) -> Option<String> {
        self.inner.ip.map(|ip| ip.to_string())
    }
    #[getter]
    fn capacity(&self) -> u32 {
        self.inner.capacity
    }
    #[getter]
    fn tags<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.inner.tags {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
    #[getter]
    fn scheme(&self) -> &'static str {
        self.inner.proxy.scheme().as_str()
    }
    #[getter]
    fn host(&self) -> &str {
        self.inner.proxy.host()
    }
    #[getter]
    fn port(&self) -> u16 {
        self.inner.proxy.port()
    }
    #[getter]
    fn username(&self) -> Option<&str> {
        self.inner.proxy.username()
    }
    #[getter]
    fn password(&self) -> Option<&str> {
        self.inner.proxy.password()
    }

    fn __repr__(&self) -> String {
        let e = &*self.inner;
        let mut s = format!("Exit({:?}, {:?}", e.id, e.proxy.masked());
        if let Some(ip) = e.ip {
            s.push_str(&format!(", ip={:?}", ip.to_string()));
        }
        if e.capacity != 1 {
            s.push_str(&format!(", capacity={}", e.capacity));
        }
        if !e.tags.is_empty() {
            let tags: Vec<String> = e.tags.iter().map(|(k, v)| format!("{k:?}: {v:?}")).collect();
            s.push_str(&format!(", tags={{{}}}", tags.join(", ")));
        }
        s.push(')');
        s.replace('"', "'")
    }

    fn __str__(&self) -> String {
        format!("{} via {}", self.inner.id, self.inner.proxy.masked())
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyExit>().map(|o| *o.get().inner == *self.inner).unwrap_or(false)
    }

    fn __hash__(&self) -> u64 {
        crate::hash::position(self.inner.id.as_bytes()) ^ crate::hash::position(self.inner.proxy.as_str().as_bytes())
    }

    /// Pickling (multiprocessing workers) rebuilds through the validating constructor.
    fn __getnewargs_ex__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyDict>)> {
        let e = &*self.inner;
        let kwargs = PyDict::new(py);
        kwargs.set_item("ip", e.ip.map(|i| i.to_string()))?;
        kwargs.set_item("capacity", e.capacity)?;
        kwargs.set_item("tags", self.tags(py)?)?;
        let args = (e.id.as_str(), e.proxy.as_str()).into_pyobject(py)?.into_any();
        Ok((args, kwargs))
    }
}

/// Parses proxy-list lines into exits; `exitpool.load_exits` reads the file around it.
#[pyfunction]
#[pyo3(name = "_parse_exits")]
pub fn parse_exits<'py>(py: Python<'py>, lines: Vec<String>) -> PyResult<Bound<'py, PyList>> {
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let exits = crate::proxy_list::parse(&refs).py_err(py)?;
    PyList::new(py, exits.into_iter().map(PyExit::wrap))
}

/// The core's masking of a string an error message shows, for the config loader's messages.
#[pyfunction]
#[pyo3(name = "_mask_raw")]
pub fn mask_raw(raw: &str) -> String {
    crate::proxy::mask_raw(raw)
}
