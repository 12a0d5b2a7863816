//! Time for every TTL, cooldown, ramp and backoff in the core. Tests replace the clock with a
//! `ManualClock` and `advance` it, so timing behaviour is tested without sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The longest a duration setting (a TTL, cooldown, ramp, hold or backoff) may be: a year.
/// Longer is a slip (a value meant in other units, an exponent too many) that would only show
/// up much later, as a "retry after" of 300 digits; a year still lets a session outlast any
/// account's idle spell.
pub const MAX_SETTING_SECONDS: f64 = 365.0 * 86_400.0;

/// Refuses a duration setting over [`MAX_SETTING_SECONDS`]; the callers check the low end,
/// each with its own rule (some allow 0).
pub fn check_ceiling(key: &[&'static str], v: f64) -> crate::error::Result<()> {
    if v > MAX_SETTING_SECONDS {
        return Err(crate::error::Error::setting(key, format!("{v:e} is over the ceiling of {MAX_SETTING_SECONDS} seconds (a year)")));
    }
    Ok(())
}

/// A wait or an idle time given per call (`timeout=`, `idle=`): any finite number of seconds
/// from 0 up (no ceiling: a wait is bounded by its caller, not kept as a setting).
pub fn check_wait(key: &'static str, v: f64) -> crate::error::Result<f64> {
    if !v.is_finite() || v < 0.0 {
        return Err(crate::error::Error::setting(&[key], format!("{v} must be a finite number of seconds >= 0")));
    }
    Ok(v)
}

/// Seconds on a monotonic scale; only differences mean anything.
pub trait Clock: Send + Sync {
    fn now(&self) -> f64;

    /// The Unix time at which this clock read 0, so that `now() + unix_offset()` is Unix
    /// time: gateways derive a slot's token from it, and every worker must agree on it.
    /// 0 by default: the clock's readings are Unix seconds (so a `ManualClock` test decides
    /// exactly which generation every slot is in).
    fn unix_offset(&self) -> f64 {
        0.0
    }
}

/// The real monotonic clock, counted from when the pool was made.
pub struct SystemClock {
    start: Instant,
    /// The wall clock's Unix time at `start`, read once: the monotonic clock then carries it,
    /// so a wall-clock step later does not move any slot's generation back.
    unix_at_start: f64,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        let unix_at_start = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        SystemClock { start: Instant::now(), unix_at_start }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> f64 {
        let d = self.start.elapsed();
        // Read twice a lease: a multiplication where `Duration::as_secs_f64` divides (the
        // division was a fifth of a read's own cost). A pool's age fits an i64 of seconds.
        d.as_secs() as i64 as f64 + d.subsec_nanos() as f64 * 1e-9
    }

    fn unix_offset(&self) -> f64 {
        self.unix_at_start
    }
}

/// A clock that moves only when told to; shareable between a pool and the test driving it.
#[derive(Clone, Default)]
pub struct ManualClock {
    bits: Arc<AtomicU64>,
}

impl ManualClock {
    pub fn new(start: f64) -> ManualClock {
        ManualClock { bits: Arc::new(AtomicU64::new(start.to_bits())) }
    }

    /// Moves time forward; a negative or non-finite step is refused, since time never runs back.
    pub fn advance(&self, seconds: f64) -> Result<f64, String> {
        if !seconds.is_finite() || seconds < 0.0 {
            return Err(format!("advance takes a finite number of seconds >= 0, got {seconds}"));
        }
        let mut current = self.bits.load(Ordering::Acquire);
        loop {
            let next = (f64::from_bits(current) + seconds).to_bits();
            match self.bits.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(f64::from_bits(next)),
                Err(seen) => current = seen,
            }
        }
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> f64 {
        f64::from_bits(self.bits.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_any_finite_number_of_seconds_from_zero() {
        assert_eq!(check_wait("timeout", 0.0).unwrap(), 0.0);
        assert_eq!(check_wait("timeout", 1e12).unwrap(), 1e12);
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let e = check_wait("idle", bad).unwrap_err();
            assert!(e.to_string().starts_with("idle "), "{e}");
            assert!(matches!(e, crate::error::Error::Setting(ref s) if s.key == ["idle"]));
        }
    }
}
