//! Figures the pool keeps on every release without allocating: outcome counts and a latency
//! histogram per exit and per (exit, site), and the pool-wide figures built from them.
//!
//! Latency quantiles come from a log-linear histogram: four buckets per power of two from
//! 2^-10 s (about 1 ms) to 2^6 s (64 s). A quantile is reported as its bucket's geometric
//! middle, so it is within 2^(1/8) - 1 = 9.051% of the true value for latencies inside that
//! range (and clamped to it outside). When a histogram holds more than `DECAY_AT` samples its
//! counts are halved, so it describes roughly the last few thousand requests, not all time.

use crate::outcome::Outcome;

const SUB: usize = 4;
const OCTAVES: usize = 16;
pub const BUCKETS: usize = SUB * OCTAVES;
/// log2 of the lowest bucket's lower edge.
const LOW_EXP: i64 = -10;
const DECAY_AT: u32 = 4096;
/// The stated error bound of a quantile inside the histogram's range (checked by the tests).
#[cfg(test)]
const QUANTILE_ERROR: f64 = 0.090508; // 2^(1/8) - 1, rounded up

#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    counts: [u32; BUCKETS],
    total: u32,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: [0; BUCKETS], total: 0 }
    }
}

impl Histogram {
    #[inline]
    fn bucket(seconds: f64) -> usize {
        if seconds.is_nan() || seconds <= 0.0 {
            return 0;
        }
        // The f64's own exponent and top two mantissa bits: no logarithm needed.
        let bits = seconds.to_bits();
        let exp = ((bits >> 52) & 0x7ff) as i64 - 1023;
        let sub = ((bits >> 50) & 0b11) as i64;
        ((exp - LOW_EXP) * SUB as i64 + sub).clamp(0, BUCKETS as i64 - 1) as usize
    }

    /// The geometric middle of a bucket, in seconds.
    fn middle(b: usize) -> f64 {
        let lower = 2f64.powf(LOW_EXP as f64 + b as f64 / SUB as f64);
        lower * 2f64.powf(0.5 / SUB as f64)
    }

    #[inline]
    pub fn record(&mut self, seconds: f64) {
        self.counts[Self::bucket(seconds)] += 1;
        self.total += 1;
        if self.total > DECAY_AT {
            self.total = 0;
            for c in &mut self.counts {
                *c /= 2;
                self.total += *c;
            }
        }
    }

    pub fn count(&self) -> u32 {
        self.total
    }

    /// The `q` quantile (0..=1), or `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u32).max(1);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(Self::middle(b));
            }
        }
        Some(Self::middle(BUCKETS - 1))
    }
}

/// Counts and latencies for one exit, or one exit on one site.
#[derive(Debug, Clone, Default, PartialEq)]
// In this order: a lease counts `leases` (kept in its exit slot's first cache line) and a
// report writes the rest but `latency`, which only a reported latency touches.
#[repr(C)]
pub struct Tally {
    pub leases: u64,
    /// The last 64 reports as bits (newest in bit 0): successes, and captchas.
    ok_bits: u64,
    captcha_bits: u64,
    recent: u8,
    pub outcomes: [u64; 8],
    pub latency: Histogram,
}

/// Reports the recent rates look back over.
pub const RECENT: u8 = 64;

impl Tally {
    #[inline]
    pub fn record(&mut self, outcome: Outcome, latency: Option<f64>) {
        self.outcomes[outcome as usize] += 1;
        if let Some(l) = latency {
            self.latency.record(l);
        }
        self.ok_bits = (self.ok_bits << 1) | (outcome == Outcome::Success) as u64;
        self.captcha_bits = (self.captcha_bits << 1) | (outcome == Outcome::Captcha) as u64;
        self.recent = (self.recent + 1).min(RECENT);
    }

    pub fn reports(&self) -> u64 {
        self.outcomes.iter().sum()
    }

    /// Success and captcha rates over the last `RECENT` reports (`None` before the first).
    /// A 5xx or a 429 is not a success here: the matrix must show a failing site.
    pub fn recent_rates(&self) -> Option<(f64, f64)> {
        (self.recent > 0).then(|| {
            let mask = if self.recent >= 64 { u64::MAX } else { (1u64 << self.recent) - 1 };
            let n = self.recent as f64;
            ((self.ok_bits & mask).count_ones() as f64 / n, (self.captcha_bits & mask).count_ones() as f64 / n)
        })
    }
}

/// Waits for an exit: leases that went at once, and a histogram of those that waited.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Waits {
    pub immediate: u64,
    pub waited: Histogram,
    pub waited_total: u64,
}

impl Waits {
    /// The `q` quantile of every lease's wait, those that went at once counting as 0.
    pub fn quantile(&self, q: f64) -> f64 {
        let waited = self.waited.count() as f64;
        // The histogram decays; scale the immediate count to the same horizon.
        let immediate =
            if self.waited_total == 0 { self.immediate as f64 } else { self.immediate as f64 * waited / self.waited_total as f64 };
        let total = immediate + waited;
        if total == 0.0 || q * total <= immediate {
            return 0.0;
        }
        let within = (q * total - immediate) / waited;
        self.waited.quantile(within).unwrap_or(0.0)
    }
}

/// Gini coefficient of a distribution: 0 when every exit carries the same, towards 1 when
/// one carries everything.
pub fn gini(values: &mut [u64]) -> f64 {
    let n = values.len();
    let sum: u64 = values.iter().sum();
    if n < 2 || sum == 0 {
        return 0.0;
    }
    values.sort_unstable();
    let weighted: f64 = values.iter().enumerate().map(|(i, &v)| (i as f64 + 1.0) * v as f64).sum();
    (2.0 * weighted) / (n as f64 * sum as f64) - (n as f64 + 1.0) / n as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_the_stated_bound() {
        let mut h = Histogram::default();
        // 1,000 latencies spread from 10 ms to 10 s.
        let values: Vec<f64> = (1..=1000).map(|i| 0.01 * 1000f64.powf(i as f64 / 1000.0)).collect();
        for &v in &values {
            h.record(v);
        }
        for q in [0.5, 0.95, 0.99] {
            let exact = values[(q * values.len() as f64).ceil() as usize - 1];
            let got = h.quantile(q).unwrap();
            assert!((got / exact - 1.0).abs() <= QUANTILE_ERROR + 1e-12, "q{q}: {got} vs {exact}");
        }
        assert_eq!(Histogram::default().quantile(0.5), None);
    }

    #[test]
    fn out_of_range_values_are_clamped_not_lost() {
        let mut h = Histogram::default();
        for v in [0.0, -1.0, f64::NAN, 1e-9, 1e9, f64::INFINITY] {
            h.record(v);
        }
        assert_eq!(h.count(), 6);
        assert!(h.quantile(1.0).unwrap() > 50.0);
        assert!(h.quantile(0.1).unwrap() < 0.002);
    }

    #[test]
    fn decay_keeps_proportions() {
        let mut h = Histogram::default();
        for i in 0..20_000 {
            h.record(if i % 4 == 0 { 1.0 } else { 0.01 });
        }
        assert!(h.count() <= DECAY_AT);
        let p50 = h.quantile(0.5).unwrap();
        assert!((p50 / 0.01 - 1.0).abs() < 0.1, "{p50}");
        let p90 = h.quantile(0.9).unwrap();
        assert!((p90 - 1.0).abs() < 0.1, "{p90}");
    }

    #[test]
    fn recent_rates_look_at_the_last_reports_only() {
        let mut t = Tally::default();
        assert_eq!(t.recent_rates(), None);
        for _ in 0..100 {
            t.record(Outcome::Block, None);
        }
        for i in 0..64 {
            t.record(if i % 4 == 0 { Outcome::Captcha } else { Outcome::Success }, Some(0.1));
        }
        assert_eq!(t.recent_rates(), Some((0.75, 0.25)));
        assert_eq!(t.reports(), 164);
    }

    #[test]
    fn gini_of_even_and_skewed_loads() {
        assert_eq!(gini(&mut [5, 5, 5, 5]), 0.0);
        let g = gini(&mut [0, 0, 0, 100]);
        assert!((g - 0.75).abs() < 1e-12, "{g}");
        assert_eq!(gini(&mut []), 0.0);
    }

    #[test]
    fn waits_count_immediate_leases_as_zero() {
        let mut w = Waits { immediate: 98, ..Waits::default() };
        for _ in 0..2 {
            w.waited.record(0.5);
            w.waited_total += 1;
        }
        assert_eq!(w.quantile(0.5), 0.0);
        assert!((w.quantile(0.99) - 0.5).abs() / 0.5 <= QUANTILE_ERROR);
    }
}
