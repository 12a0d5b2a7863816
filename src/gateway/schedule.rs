//! When a slot's token changes. A provider holds one exit for a token for `lifetime` seconds
//! from its first use; a slot moves to its next token `margin` seconds before that, so a
//! token is replaced before the provider drops it: every `period = lifetime - margin`.
//!
//! Generation `g` of a slot runs over the Unix times `[start(g), start(g + 1))` with
//! `start(g) = g * period - phase`, where `phase` (in `[0, period)`) is drawn from the gateway
//! id and the slot. Without the phase every slot of a gateway would rotate at the same
//! instant, and every session of the gateway would end together. Only Unix time goes in, so
//! every worker and every restart agree on each slot's generation.

use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// `lifetime - margin`; `None`: tokens never expire, generation 0 forever.
    period: Option<f64>,
}

/// The margin when none is given: a minute, or a tenth of the lifetime if that is shorter,
/// so a 10-minute token is replaced after 9 minutes and a 30-second one after 27 s.
pub fn default_margin(lifetime: f64) -> f64 {
    (lifetime / 10.0).min(60.0)
}

impl Schedule {
    pub fn new(lifetime: Option<f64>, margin: f64) -> Schedule {
        Schedule { period: lifetime.map(|l| l - margin) }
    }

    #[cfg(test)]
    pub fn period(&self) -> Option<f64> {
        self.period
    }

    /// The slot's offset in `[0, period)`, drawn from the gateway and the slot.
    pub fn phase(&self, gateway: &str, slot: u32) -> f64 {
        let Some(period) = self.period else { return 0.0 };
        let d = Sha256::new()
            .chain_update(b"exitpool-phase\0")
            .chain_update(gateway.as_bytes())
            .chain_update([0])
            .chain_update(slot.to_be_bytes())
            .finalize();
        let x = u64::from_be_bytes(d[..8].try_into().expect("8 bytes"));
        // 53 bits: exactly representable, so the phase stays below the period.
        (x >> 11) as f64 / (1u64 << 53) as f64 * period
    }

    /// The Unix time generation `g` of the slot starts (`-inf` for generation 0 of a token
    /// that never expires).
    pub fn start(&self, phase: f64, g: u64) -> f64 {
        match self.period {
            None if g == 0 => f64::NEG_INFINITY,
            None => f64::INFINITY,
            Some(p) => g as f64 * p - phase,
        }
    }

    /// The Unix time the slot's generation `g` ends: its next token starts.
    pub fn ends(&self, phase: f64, g: u64) -> f64 {
        self.start(phase, g.saturating_add(1))
    }

    /// The slot's generation at Unix time `unix`: the `g` with `start(g) <= unix < ends(g)`.
    /// Computed by division, then settled against `start` so that the two never disagree by
    /// a rounding at a boundary (a slot must rotate exactly once there).
    pub fn generation(&self, phase: f64, unix: f64) -> u64 {
        let Some(p) = self.period else { return 0 };
        let mut g = ((unix + phase) / p).floor().max(0.0) as u64;
        while unix >= self.ends(phase, g) {
            g += 1;
        }
        while g > 0 && unix < self.start(phase, g) {
            g -= 1;
        }
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_rotates_once_per_period_exactly_at_its_boundary() {
        let s = Schedule::new(Some(600.0), default_margin(600.0));
        assert_eq!(s.period(), Some(540.0));
        let phase = s.phase("resi", 3);
        let t0 = 1.7e9;
        let g = s.generation(phase, t0);
        let end = s.ends(phase, g);
        assert!(end > t0 && end - t0 <= 540.0);
        assert_eq!(s.generation(phase, end - 1e-3), g);
        assert_eq!(s.generation(phase, end), g + 1);
        assert_eq!(s.ends(phase, g + 1) - end, 540.0);
        // Boundaries settle exactly across many generations.
        for k in 0..10_000u64 {
            let b = s.start(phase, k);
            assert_eq!(s.generation(phase, b.max(0.0)), if b < 0.0 { 0 } else { k });
        }
    }

    #[test]
    fn slots_rotate_at_different_times() {
        let s = Schedule::new(Some(600.0), 60.0);
        let phases: Vec<f64> = (0..1000).map(|slot| s.phase("resi", slot)).collect();
        assert!(phases.iter().all(|&p| (0.0..540.0).contains(&p)));
        // Spread over the period: every tenth of it holds roughly a tenth of the slots.
        for decile in 0..10 {
            let lo = decile as f64 * 54.0;
            let n = phases.iter().filter(|&&p| p >= lo && p < lo + 54.0).count();
            assert!((60..=140).contains(&n), "decile {decile}: {n}");
        }
        assert_eq!(s.phase("resi", 3), s.phase("resi", 3));
    }

    #[test]
    fn without_a_lifetime_the_generation_never_moves() {
        let s = Schedule::new(None, 0.0);
        assert_eq!(s.generation(0.0, 0.0), 0);
        assert_eq!(s.generation(0.0, 4e9), 0);
        assert_eq!(s.ends(0.0, 0), f64::INFINITY);
    }

    #[test]
    fn the_default_margin_is_a_minute_or_a_tenth() {
        assert_eq!(default_margin(600.0), 60.0);
        assert_eq!(default_margin(86_400.0), 60.0);
        assert_eq!(default_margin(30.0), 3.0);
    }
}
