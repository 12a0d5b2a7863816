//! The configuration objects of `Pool(...)`: the `health=` and `warmup=` arguments as the
//! core's `HealthConfig` and `WarmupConfig`.

use super::errors::{invalid_at, invalid_input, IntoPyResult};
use super::exit::{extract_int, PyExit};
use super::text::any_text;
use crate::config_file::{dotted, ConfigFile, Located, Seg, Warmup};
use crate::health::HealthConfig;
use crate::warmup::WarmupConfig;
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyBool, PyDict, PyFloat, PyInt, PyString, PyTuple};

pub fn seconds(py: Python<'_>, name: &str, v: f64) -> PyResult<f64> {
    if !v.is_finite() || v < 0.0 {
        return Err(invalid_input(py, format!("{name} {v} must be a finite number of seconds >= 0")));
    }
    Ok(v)
}

pub fn extract_warmup(py: Python<'_>, w: &Bound<'_, PyAny>) -> PyResult<Option<WarmupConfig>> {
    if w.is_none() {
        return Ok(None);
    }
    if let Ok(b) = w.cast::<PyBool>() {
        return Ok(b.is_true().then(WarmupConfig::default));
    }
    if w.is_instance_of::<PyInt>() || w.is_instance_of::<PyFloat>() {
        let d = WarmupConfig::default();
        return WarmupConfig::new(w.extract()?, d.initial_interval, d.horizon).py_err(py).map(Some);
    }
    if let Ok(d) = w.cast::<PyDict>() {
        let mut cfg = WarmupConfig::default();
        for (k, v) in d.iter() {
            let k = any_text(&k, "a warmup setting name")?.into_owned();
            let v: f64 = v.extract().map_err(|_| invalid_input(py, format!("warmup {k} must be a number of seconds")))?;
            match k.as_str() {
                "ramp" => cfg.ramp = v,
                "initial_interval" => cfg.initial_interval = v,
                "horizon" => cfg.horizon = v,
                _ => {
                    return Err(invalid_input(
                        py,
                        format!("warmup has no setting {} (ramp, initial_interval, horizon)", crate::proxy::shown(&k)),
                    ))
                }
            }
        }
        return WarmupConfig::new(cfg.ramp, cfg.initial_interval, cfg.horizon).py_err(py).map(Some);
    }
    Err(invalid_input(py, format!("warmup must be None, True, a ramp in seconds or a dict, got {}", w.repr()?)))
}

/// `health={"consecutive": 5, ...}`: overrides of the breaker and safeguard defaults.
pub fn extract_health(py: Python<'_>, d: Option<&Bound<'_, PyDict>>) -> PyResult<HealthConfig> {
    let mut cfg = HealthConfig::default();
    let Some(d) = d else { return Ok(cfg) };
    for (k, v) in d.iter() {
        let k = any_text(&k, "a health setting name")?.into_owned();
        let number = || -> PyResult<f64> {
            if v.is_instance_of::<PyBool>() {
                return Err(invalid_input(py, format!("health {k} must be a number, got {}", v.repr()?)));
            }
            v.extract::<f64>().map_err(|_| {
                invalid_input(py, format!("health {k} must be a number, got {}", v.repr().map(|r| r.to_string()).unwrap_or_default()))
            })
        };
        let count = || -> PyResult<u32> {
            extract_int(py, &v, &format!("health {k}"), 0..=u32::MAX.into(), "")
                .map(|n| n as u32)
                .map_err(|e| super::errors::at_key(py, e, &["health", &k], &format!("health {k}")))
        };
        match k.as_str() {
            "consecutive" => cfg.consecutive = number()?,
            "degrade_at" => cfg.degrade_at = number()?,
            "block_weight" => cfg.block_weight = number()?,
            "connect_weight" => cfg.connect_weight = number()?,
            "window" => cfg.window = count()?,
            "min_calls" => cfg.min_calls = count()?,
            "failure_rate" => cfg.failure_rate = number()?,
            "captcha_rate" => cfg.captcha_rate = number()?,
            "captcha_consecutive" => cfg.captcha_consecutive = count()?,
            "recover_successes" => cfg.recover_successes = count()?,
            "half_open_trials" => cfg.half_open_trials = count()?,
            "base_ejection" => cfg.base_ejection = number()?,
            "max_ejection" => cfg.max_ejection = number()?,
            "jitter" => cfg.jitter = number()?,
            "min_hold" => cfg.min_hold = number()?,
            "forgive_after" => cfg.forgive_after = number()?,
            "dead_after" => cfg.dead_after = count()?,
            "max_ejected" => cfg.max_ejected = number()?,
            "min_in_service" => cfg.min_in_service = count()?,
            "incident_fraction" => cfg.incident_fraction = number()?,
            "incident_min_exits" => cfg.incident_min_exits = count()?,
            "incident_interval" => cfg.incident_interval = number()?,
            "rate_limit_cooldown" => cfg.rate_limit_cooldown = number()?,
            _ => return Err(invalid_input(py, format!("health has no setting {}", crate::proxy::shown(&k)))),
        }
    }
    cfg.validate().py_err(py)?;
    Ok(cfg)
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
    invalid_at(py, message, loc_tuple(py, &l.loc), Some(name), l.line, &l.problem)
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

    /// The exits of `exits_file` (read by the caller) followed by the `[[exit]]` tables'.
    fn exits(&self, py: Python<'_>, listed: Vec<PyRef<'_, PyExit>>) -> PyResult<Vec<PyExit>> {
        let listed = listed.iter().map(|e| (*e.inner).clone()).collect();
        let all = self.file.all_exits(listed).map_err(|l| located(py, &self.name, &l))?;
        Ok(all.into_iter().map(PyExit::wrap).collect())
    }

    /// The keywords of `Pool(...)` the file wrote, as Python values.
    fn options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.file.settings;
        let d = PyDict::new(py);
        macro_rules! put {
            ($($field:ident),*) => { $( if let Some(v) = &s.$field { d.set_item(stringify!($field), v)?; } )* };
        }
        put!(strategy, replicas, session_ttl, lease_ttl, max_leases, balance_factor, seed, cooldown, calibrate, store, namespace);
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
