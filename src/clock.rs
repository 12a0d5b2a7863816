//! Time for every TTL, cooldown, ramp and backoff in the core. Tests replace the clock with a
//! `ManualClock` and `advance` it, so timing behaviour is tested without sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Seconds on a monotonic scale; only differences mean anything.
pub trait Clock: Send + Sync {
    fn now(&self) -> f64;
}

/// The real monotonic clock, counted from when the pool was made.
pub struct SystemClock {
    start: Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock { start: Instant::now() }
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
        self.start.elapsed().as_secs_f64()
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
