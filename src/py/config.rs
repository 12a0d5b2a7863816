//! The configuration objects of `Pool(...)`: the `health=` and `warmup=` arguments as the
//! core's `HealthConfig` and `WarmupConfig`.

use super::errors::{invalid_input, IntoPyResult};
use super::exit::extract_int;
use super::text::any_text;
use crate::health::HealthConfig;
use crate::warmup::WarmupConfig;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt};

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
        let count = || -> PyResult<u32> { extract_int(py, &v, &format!("health {k}"), 0..=u32::MAX.into(), "").map(|n| n as u32) };
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
