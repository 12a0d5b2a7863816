//! `Exit`: an immutable, hashable value; its repr masks the password the way httpx does.

use super::errors::{invalid_input, IntoPyResult};
use super::text::{any_text, opt_text, text};
use crate::exit::Exit;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};
use std::sync::Arc;

#[pyclass(name = "Exit", module = "exitpool", frozen)]
pub struct PyExit {
    pub inner: Arc<Exit>,
}

/// A whole number: `True`, `1.0` and `nan` are refused by name. `None` for an int too large
/// for an `i128`, which is outside every range the API has.
fn whole(py: Python<'_>, value: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<i128>> {
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        let shown = if value.is_instance_of::<PyFloat>() || value.is_instance_of::<PyBool>() {
            value.repr()?.to_string()
        } else {
            format!("a {}", value.get_type().name()?)
        };
        return Err(invalid_input(py, format!("{what} must be a whole number, got {shown}")));
    }
    Ok(value.extract::<i128>().ok())
}

/// An int as a message shows it: long ones shortened (Python refuses to print the longest).
pub fn shown_int(value: &Bound<'_, PyAny>) -> String {
    match value.str() {
        Ok(s) => {
            let s = s.to_string();
            if s.len() <= 40 {
                s
            } else {
                format!("{}... ({} digits)", &s[..20], s.trim_start_matches('-').len())
            }
        }
        Err(_) => "(a number too long to print)".into(),
    }
}

/// A float argument (seconds, a factor): an int too large for a float is bad input naming the
/// value, not the `OverflowError` a plain `f64` argument raises (PyO3 notes which argument).
pub struct Float(pub f64);

impl<'a, 'py> FromPyObject<'a, 'py> for Float {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        match obj.extract::<f64>() {
            Ok(v) => Ok(Float(v)),
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(obj.py()) => {
                Err(invalid_input(obj.py(), format!("{} is too large for a number (a float holds at most about 1.8e308)", shown_int(&obj))))
            }
            Err(e) => Err(e),
        }
    }
}

/// Every integer argument of the API: a whole number in `range`, else an `InvalidInput`
/// naming the argument, the value and the range (`note` says what else it may be).
pub fn extract_int(
    py: Python<'_>,
    value: &Bound<'_, PyAny>,
    what: &str,
    range: std::ops::RangeInclusive<i128>,
    note: &str,
) -> PyResult<i128> {
    match whole(py, value, what)? {
        Some(n) if range.contains(&n) => Ok(n),
        _ => Err(invalid_input(py, format!("{what} {} is outside {}..={}{note}", shown_int(value), range.start(), range.end()))),
    }
}

/// A capacity, judged by the core (which owns its range); a number beyond `i64` gets the
/// core's message for the nearest `i64`, with the number itself put back in.
pub fn capacity_of(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<u32> {
    let n = whole(py, value, "capacity")?.unwrap_or(if value.lt(0)? { i128::MIN } else { i128::MAX });
    let near = n.clamp(i64::MIN.into(), i64::MAX.into()) as i64;
    crate::exit::validate_capacity(near).map_err(|e| {
        let msg = e.to_string();
        let msg = if i128::from(near) == n { msg } else { msg.replacen(&near.to_string(), &shown_int(value), 1) };
        invalid_input(py, msg)
    })
}

/// An integer setting judged by the core's `check`, which owns its range and its message; a
/// number beyond `i128` gets the message for the nearest `i128`, with the number put back in.
/// Not a whole number: `what must be a whole number`, at the key `what`.
pub fn judged_int<T>(py: Python<'_>, value: &Bound<'_, PyAny>, what: &str, check: impl Fn(i128) -> crate::Result<T>) -> PyResult<T> {
    let exact = whole(py, value, what).map_err(|e| super::errors::at_key(py, e, &[what], what))?;
    let n = match exact {
        Some(n) => n,
        None if value.lt(0)? => i128::MIN,
        None => i128::MAX,
    };
    check(n).map_err(|mut e| {
        if let (None, crate::error::Error::Setting(s)) = (exact, &mut e) {
            s.message = s.message.replacen(&n.to_string(), &shown_int(value), 1);
        }
        super::errors::to_py(py, e)
    })
}

pub(super) fn extract_tags(py: Python<'_>, tags: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<(String, String)>> {
    let Some(tags) = tags else { return Ok(Vec::new()) };
    let mut out = Vec::with_capacity(tags.len());
    for (k, v) in tags.iter() {
        let (Ok(k), Ok(v)) = (k.cast::<PyString>(), v.cast::<PyString>()) else {
            return Err(invalid_input(py, format!("tags must map str to str, got {}: {}", k.repr()?, v.repr()?)));
        };
        out.push((text(k, "a tag name")?.into_owned(), text(v, "a tag value")?.into_owned()));
    }
    Ok(out)
}

/// Tags as a new dict (a copy: exits and gateways are immutable).
pub(super) fn tags_dict<'py>(py: Python<'py>, tags: &[(String, String)]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in tags {
        d.set_item(k, v)?;
    }
    Ok(d)
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
        exit_id: &Bound<'_, PyString>,
        proxy: &Bound<'_, PyString>,
        ip: Option<&Bound<'_, PyString>>,
        capacity: Option<&Bound<'_, PyAny>>,
        tags: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyExit> {
        let (exit_id, proxy, ip) = (text(exit_id, "exit_id")?, text(proxy, "proxy")?, opt_text(ip, "ip")?);
        let capacity = match capacity {
            Some(c) => capacity_of(py, c)?.into(),
            None => 1,
        };
        let tags = extract_tags(py, tags)?;
        Exit::new(&exit_id, &proxy, ip.as_deref(), capacity, tags).py_err(py).map(PyExit::wrap)
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
    /// The URL without credentials, for clients that send them in a header instead.
    #[getter(_proxy_without_credentials)]
    fn proxy_without_credentials(&self) -> String {
        self.inner.proxy.without_credentials()
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
        tags_dict(py, &self.inner.tags)
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
pub fn parse_exits<'py>(py: Python<'py>, lines: Vec<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyList>> {
    let lines: Vec<_> = lines.iter().enumerate().map(|(n, line)| any_text(line, &format!("line {}", n + 1))).collect::<PyResult<_>>()?;
    let refs: Vec<&str> = lines.iter().map(|l| &**l).collect();
    let exits = crate::proxy_list::parse(&refs).py_err(py)?;
    PyList::new(py, exits.into_iter().map(PyExit::wrap))
}

/// The core's masking of a string an error message shows, for the config loader's messages.
#[pyfunction]
#[pyo3(name = "_mask_raw")]
pub fn mask_raw(raw: &Bound<'_, PyString>) -> String {
    // Messages about text that is not valid text show it too: with U+FFFD for a surrogate.
    crate::mask::mask_raw(&raw.to_string_lossy())
}
