//! The configuration objects of `Pool(...)`: the `health=` and `warmup=` arguments as the
//! core's `HealthConfig` and `WarmupConfig`.

use super::errors::{at_key, invalid_at, invalid_input, IntoPyResult};
use super::exit::{extract_int, shown_int, PyExit};
use super::gateway::PyGateway;
use super::lease::shown_repr;
use super::text::any_text;
use crate::config_file::{dotted, ConfigFile, Located, Seg, Warmup};
use crate::health::HealthConfig;
use crate::pacing::PacingConfig;
use crate::warmup::WarmupConfig;
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyBool, PyDict, PyFloat, PyInt, PyString, PyTuple};
use pythonize::PythonizeError;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::Deserialize;

pub fn extract_warmup(py: Python<'_>, w: &Bound<'_, PyAny>) -> PyResult<Option<WarmupConfig>> {
    if w.is_none() {
        return Ok(None);
    }
    if let Ok(b) = w.cast::<PyBool>() {
        return Ok(b.is_true().then(WarmupConfig::default));
    }
    if w.is_instance_of::<PyInt>() || w.is_instance_of::<PyFloat>() {
        let d = WarmupConfig::default();
        // An int too large for a float is refused as a number, never an OverflowError.
        let ramp = f64::deserialize(Number { section: "warmup", key: "ramp", value: w }).map_err(PyErr::from)?;
        return WarmupConfig::new(ramp, d.initial_interval, d.horizon).py_err(py).map(Some);
    }
    if let Ok(d) = w.cast::<PyDict>() {
        let cfg = WarmupConfig::deserialize(Section { name: "warmup", dict: d }).map_err(PyErr::from)?;
        return WarmupConfig::new(cfg.ramp, cfg.initial_interval, cfg.horizon).py_err(py).map(Some);
    }
    Err(invalid_input(py, format!("warmup must be None, True, a ramp in seconds or a dict, got {}", shown_repr(w))))
}

/// `health={"consecutive": 5, ...}`: overrides of the breaker and safeguard defaults.
pub fn extract_health(py: Python<'_>, d: Option<&Bound<'_, PyDict>>) -> PyResult<HealthConfig> {
    let Some(d) = d else { return Ok(HealthConfig::default()) };
    let cfg = HealthConfig::deserialize(Section { name: "health", dict: d }).map_err(PyErr::from)?;
    cfg.validate().py_err(py)?;
    Ok(cfg)
}

/// `pacing={"shop.example": "6/s", "*": "2/s"}`: a request rate per site (`"*"`: every other
/// site). Anything but a dict of str to rate strings is an `InvalidInput` naming what it got.
pub fn extract_pacing(py: Python<'_>, p: Option<&Bound<'_, PyAny>>) -> PyResult<PacingConfig> {
    let Some(p) = p.filter(|p| !p.is_none()) else { return Ok(PacingConfig::default()) };
    let Ok(d) = p.cast::<PyDict>() else {
        return Err(invalid_input(py, format!("pacing must be a dict of site to rate like {{\"*\": \"6/s\"}}, got {}", shown_repr(p))));
    };
    let mut entries = Vec::with_capacity(d.len());
    for (k, v) in d.iter() {
        let (Ok(site), Ok(rate)) = (any_text(&k, "a pacing site"), any_text(&v, "a pacing rate")) else {
            return Err(invalid_input(
                py,
                format!("pacing must map site names to rate strings like \"6/s\", got {}: {}", shown_repr(&k), shown_repr(&v)),
            ));
        };
        entries.push((site.into_owned(), rate.into_owned()));
    }
    PacingConfig::parse(entries.iter().map(|(s, r)| (s.as_str(), r.as_str()))).py_err(py)
}

/// A `health=` or `warmup=` dict as serde input to the core's configuration object, which
/// names its fields and denies unknown ones. The values are numbers, read here so that the
/// messages are the API's (a bool is no number, a count's range is named, the key is in `.loc`);
/// anything else a field might ask for is pythonize's.
struct Section<'a, 'py> {
    name: &'static str,
    dict: &'a Bound<'py, PyDict>,
}

impl<'de> de::Deserializer<'de> for Section<'_, '_> {
    type Error = PythonizeError;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, PythonizeError> {
        self.deserialize_struct("", &[], v)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, PythonizeError> {
        v.visit_map(Entries { name: self.name, fields, iter: self.dict.iter(), value: None })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit unit_struct
        newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

struct Entries<'py> {
    name: &'static str,
    fields: &'static [&'static str],
    iter: pyo3::types::iter::BoundDictIterator<'py>,
    value: Option<(String, Bound<'py, PyAny>)>,
}

impl<'de, 'py> MapAccess<'de> for Entries<'py> {
    type Error = PythonizeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, PythonizeError> {
        let Some((k, v)) = self.iter.next() else { return Ok(None) };
        let py = k.py();
        let k = any_text(&k, &format!("a {} setting name", self.name))?.into_owned();
        // Unknown fields are denied: that is the only way a key of text fails.
        let field = seed.deserialize(de::IntoDeserializer::<PythonizeError>::into_deserializer(k.as_str())).map_err(|_| {
            let problem = format!("no such setting ({})", self.fields.join(", "));
            let message = format!("{} has no setting {} ({})", self.name, crate::mask::shown(&k), self.fields.join(", "));
            invalid_at(py, message, PyTuple::new(py, [self.name, k.as_str()]).ok(), None, None, &problem)
        })?;
        self.value = Some((k, v));
        Ok(Some(field))
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, PythonizeError> {
        let Some((k, v)) = self.value.take() else { return Err(de::Error::custom("a value without its key")) };
        seed.deserialize(Number { section: self.name, key: &k, value: &v })
    }
}

/// One value of a [`Section`], named `section key` in its messages.
struct Number<'a, 'py> {
    section: &'static str,
    key: &'a str,
    value: &'a Bound<'py, PyAny>,
}

impl Number<'_, '_> {
    fn what(&self) -> String {
        format!("{} {}", self.section, self.key)
    }

    fn located(&self, e: PyErr) -> PythonizeError {
        at_key(self.value.py(), e, &[self.section, self.key], &self.what()).into()
    }
}

impl<'de> de::Deserializer<'de> for Number<'_, '_> {
    type Error = PythonizeError;

    fn deserialize_f64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, PythonizeError> {
        let x = (!self.value.is_instance_of::<PyBool>()).then(|| self.value.extract::<f64>().ok()).flatten();
        let Some(x) = x else {
            let got = match self.value.cast::<PyInt>() {
                Ok(_) => shown_int(self.value),
                Err(_) => shown_repr(self.value),
            };
            return Err(self.located(invalid_input(self.value.py(), format!("{} must be a number, got {got}", self.what()))));
        };
        v.visit_f64(x)
    }

    fn deserialize_u32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, PythonizeError> {
        let n = extract_int(self.value.py(), self.value, &self.what(), 0..=u32::MAX.into(), "").map_err(|e| self.located(e))?;
        v.visit_u32(n as u32)
    }

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, PythonizeError> {
        (&mut pythonize::Depythonizer::from_object(self.value)).deserialize_any(v)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u64 u128 f32 char str string bytes byte_buf option unit unit_struct
        newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

/// `Pool.from_config`'s file, parsed and type-checked by the core's `config_file`; Python
/// keeps only what must be Python (reading `exits_file` with `load_exits`, calling `cls`).
#[pyclass(name = "_ConfigFile", module = "exitpool._core", frozen)]
pub struct PyConfigFile {
    file: ConfigFile,
    name: String,
}

/// `FILE:LINE: KEY: problem` as an InvalidInput with `.loc`, `.file` and `.line`.
fn located(py: Python<'_>, name: &str, l: &Located) -> PyErr {
    let where_ = match l.line {
        Some(line) => format!("{name}:{line}"),
        None => name.to_owned(),
    };
    let message =
        if l.loc.is_empty() { format!("{where_}: {}", l.problem) } else { format!("{where_}: {}: {}", dotted(&l.loc), l.problem) };
    // No key path (invalid TOML, a file without exits) is `loc = None`, as for any error not about a key.
    let loc = if l.loc.is_empty() { None } else { loc_tuple(py, &l.loc) };
    invalid_at(py, message, loc, Some(name), l.line, &l.problem)
}

fn loc_tuple<'py>(py: Python<'py>, loc: &[Seg]) -> Option<Bound<'py, PyTuple>> {
    let items: Vec<Bound<'py, PyAny>> = loc
        .iter()
        .map(|s| match s {
            Seg::Key(k) => PyString::new(py, k).into_any(),
            Seg::Index(i) => i.into_pyobject(py).map(|i| i.into_any()).unwrap_or_else(|e| match e {}),
        })
        .collect();
    PyTuple::new(py, items).ok()
}

#[pymethods]
impl PyConfigFile {
    #[new]
    fn new(py: Python<'_>, name: String, raw: &[u8]) -> PyResult<PyConfigFile> {
        let text = std::str::from_utf8(raw).map_err(|e| {
            let line = raw[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
            let l = Located {
                loc: Vec::new(),
                line: Some(line),
                problem: format!("not UTF-8 text (invalid byte at byte {})", e.valid_up_to()),
            };
            located(py, &name, &l)
        })?;
        let file = ConfigFile::parse(text).map_err(|l| located(py, &name, &l))?;
        Ok(PyConfigFile { file, name })
    }

    /// The proxy list the file names, as written (relative to the file).
    #[getter]
    fn exits_file(&self) -> Option<String> {
        self.file.settings.exits_file.clone()
    }

    /// The exits of `exits_file` (read by the caller), the `[[exit]]` tables', then the
    /// `[[gateway]]` tables' gateways: what `Pool(...)` takes.
    fn exits<'py>(&self, py: Python<'py>, listed: Vec<PyRef<'_, PyExit>>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let listed = listed.iter().map(|e| (*e.inner).clone()).collect();
        let all = self.file.all_exits(listed).map_err(|l| located(py, &self.name, &l))?;
        let mut out = Vec::with_capacity(all.len() + self.file.gateways.len());
        for e in all {
            out.push(Bound::new(py, PyExit::wrap(e))?.into_any());
        }
        for (spec, g) in &self.file.gateways {
            out.push(Bound::new(py, PyGateway::wrap(spec.clone(), g.clone()))?.into_any());
        }
        Ok(out)
    }

    /// The keywords of `Pool(...)` the file wrote, as Python values.
    fn options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.file.settings;
        let d = PyDict::new(py);
        macro_rules! put {
            ($($field:ident),*) => { $( if let Some(v) = &s.$field { d.set_item(stringify!($field), v)?; } )* };
        }
        put!(
            strategy,
            replicas,
            session_ttl,
            lease_ttl,
            max_leases,
            balance_factor,
            max_sessions,
            max_pairings,
            seed,
            cooldown,
            calibrate,
            store,
            namespace,
            state,
            state_interval
        );
        if let Some(w) = &s.warmup {
            match w {
                Warmup::Switch(b) => d.set_item("warmup", b)?,
                Warmup::Ramp(r) => d.set_item("warmup", r)?,
                Warmup::Table(t) => {
                    let t = [("ramp", t.ramp), ("initial_interval", t.initial_interval), ("horizon", t.horizon)].into_py_dict(py)?;
                    d.set_item("warmup", t)?
                }
            }
        }
        if let Some(h) = &s.health {
            d.set_item("health", pythonize::pythonize(py, h).map_err(PyErr::from)?)?;
        }
        if let Some(p) = &s.pacing {
            d.set_item("pacing", p.clone().into_py_dict(py)?)?;
        }
        Ok(d)
    }

    /// An InvalidInput at `loc` of this file (`exits_file` when the list cannot be read).
    fn error(&self, py: Python<'_>, loc: Vec<String>, problem: String) -> Py<PyAny> {
        let l = self.file.at(loc.into_iter().map(Seg::Key).collect(), problem);
        located(py, &self.name, &l).into_value(py).into_any()
    }

    /// A refusal of `Pool(...)` re-raised where it belongs: a keyword given in code is named as
    /// that keyword; a key of the file with its line; anything else names the file.
    fn blame(&self, py: Python<'_>, e: &Bound<'_, PyAny>, overrides: Vec<String>) -> PyResult<Py<PyAny>> {
        let loc: Option<Vec<String>> = e.getattr("loc")?.extract()?;
        let problem: Option<String> = e.getattr("_problem").ok().and_then(|p| p.extract().ok());
        let also: Option<Vec<String>> = e.getattr("_also").ok().and_then(|p| p.extract().ok());
        let (Some(loc), Some(problem)) = (loc, problem) else {
            let l = Located { loc: Vec::new(), line: None, problem: e.str()?.to_string() };
            return Ok(located(py, &self.name, &l).into_value(py).into_any());
        };
        let segs: Vec<Seg> = loc.iter().cloned().map(Seg::Key).collect();
        if loc.first().is_some_and(|k| overrides.contains(k)) {
            let message = format!("keyword argument {} (given in code, not read from {}): {problem}", dotted(&segs), self.name);
            return Ok(invalid_at(py, message, loc_tuple(py, &segs), None, None, &problem).into_value(py).into_any());
        }
        let other: Vec<Seg> = also.unwrap_or_default().into_iter().map(Seg::Key).collect();
        let l = if !self.file.wrote(&segs) && !other.is_empty() && self.file.wrote(&other) {
            self.file.at(other, e.str()?.to_string())
        } else {
            self.file.at(segs, problem)
        };
        Ok(located(py, &self.name, &l).into_value(py).into_any())
    }
}
