//! Time for every TTL, cooldown, ramp and backoff in the core. Tests replace the clock with a
//! `ManualClock` and `advance` it, so timing behaviour is tested without sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
#[cfg(not(target_os = "linux"))]
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
///
/// On Linux it reads `CLOCK_MONOTONIC_COARSE`: every lease reads the clock twice, and the
/// coarse clock costs a third of the fine one (about 12 ns against 38 ns here, a tenth of a
/// quiet acquire + release). Nothing the core times needs better than its tick (1 to 4 ms):
/// TTLs, cooldowns, backoffs and ramps are seconds, `lru` breaks ties in the order of use,
/// and latencies and waits are measured by their callers on the fine clock.
pub struct SystemClock {
    start: u64,
    /// The wall clock's Unix time at `start`, read once: the monotonic clock then carries it,
    /// so a wall-clock step later does not move any slot's generation back.
    unix_at_start: f64,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        let unix_at_start = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        SystemClock { start: ticks(), unix_at_start }
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
        ticks().saturating_sub(self.start) as f64 * 1e-9
    }

    fn unix_offset(&self) -> f64 {
        self.unix_at_start
    }
}

/// Nanoseconds on the system's coarse monotonic clock.
#[cfg(target_os = "linux")]
#[inline]
fn ticks() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC_COARSE exists on every Linux
    // since 2.6.32 and cannot fail with a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Nanoseconds on the monotonic clock, from a fixed origin in this process.
#[cfg(not(target_os = "linux"))]
#[inline]
fn ticks() -> u64 {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
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
    fn the_system_clock_starts_near_zero_and_moves_forward() {
        let c = SystemClock::new();
        let a = c.now();
        assert!((0.0..1.0).contains(&a), "{a}");
        std::thread::sleep(std::time::Duration::from_millis(30));
        let b = c.now();
        // At least the sleep less one coarse tick (at most 4 ms on Linux, 10 ms elsewhere).
        assert!(b - a >= 0.015 && b - a < 60.0, "{a} -> {b}");
    }

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
