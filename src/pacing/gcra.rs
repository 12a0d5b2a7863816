//! One (exit, site) pair's budget: a GCRA (generic cell rate algorithm), as `governor` and
//! redis-cell keep it, with a rate learned from the site's answers (AIMD).
//!
//! GCRA keeps one number, the theoretical arrival time `tat`: when the pair would be idle
//! again had every request been spaced exactly `T = 1 / rate` apart. A request at `now` fits
//! if `max(tat, now) + T - now <= tau`, the burst tolerance, and moves `tat` on by `T`. Here
//! `tau` is the configured rate's tolerance (at least one `T`): the time the configured rate
//! takes to send its burst, so an idle pair may send that much time's worth at the learned
//! rate at once ("6/s": six; "4/s burst 6": six), then one every `T`.

use super::rate::Rate;

/// How far a time may be over the line and still fit: `tat` sums many `T`s, whose rounding
/// must not turn the sixth request of "6/s" away.
const SLACK: f64 = 1e-9;

/// By how much a 429 cuts the learned rate.
pub const DECREASE: f64 = 0.5;

/// The learned rate never goes below the configured one divided by this.
pub const FLOOR_DIVISOR: f64 = 32.0;

/// Seconds until a request fits a GCRA whose theoretical arrival time is `tat`, with
/// emission interval `t` and burst tolerance `tau` (0: it fits now). The one rule, shared by
/// the pool and the in-process store (the Redis script has it in Lua).
///
/// The wait is rounded to whole nanoseconds: `tat` and `now` are far larger than the wait,
/// so the sum's last bits are rounding, and a burst spent within one clock tick would
/// otherwise be told to wait a hair over one interval.
#[inline]
pub fn wait_at(tat: f64, t: f64, tau: f64, now: f64) -> f64 {
    let over = tat.max(now) + t - tau - now;
    if over <= SLACK {
        0.0
    } else {
        (over * 1e9).round() / 1e9
    }
}

/// The budget of one (exit, site) pair and the rate it has learned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gcra {
    /// Theoretical arrival time (pool clock); `-inf` for a pair never used.
    pub tat: f64,
    /// The learned rate in requests per second: the configured one until the site says 429.
    pub rate: f64,
    /// When the rate was last cut: 429s answering requests sent before a cut (in flight
    /// together) cut it once, not once each.
    pub cut_at: f64,
}

impl Gcra {
    pub fn new(limit: Rate) -> Gcra {
        Gcra { tat: f64::NEG_INFINITY, rate: limit.per_second(), cut_at: f64::NEG_INFINITY }
    }

    /// The emission interval `T` and the burst tolerance `tau` at the learned rate.
    #[inline]
    pub fn interval(&self, limit: Rate) -> (f64, f64) {
        let t = 1.0 / self.rate;
        (t, limit.tolerance().max(t))
    }

    /// Seconds until a request fits: 0 when one fits now.
    #[inline]
    pub fn wait(&self, limit: Rate, now: f64) -> f64 {
        let (t, tau) = self.interval(limit);
        wait_at(self.tat, t, tau, now)
    }

    /// Spends one request's budget at `now` (whether or not it fit: the caller checked).
    #[inline]
    pub fn take(&mut self, limit: Rate, now: f64) {
        let (t, _) = self.interval(limit);
        self.tat = self.tat.max(now) + t;
    }

    /// Requests that fit now, at once (whole ones).
    pub fn tokens(&self, limit: Rate, now: f64) -> u32 {
        let (t, tau) = self.interval(limit);
        let room = tau - (self.tat.max(now) - now);
        ((room + SLACK) / t).floor().max(0.0) as u32
    }

    /// The lowest rate learning may reach.
    pub fn floor(limit: Rate) -> f64 {
        limit.per_second() / FLOOR_DIVISOR
    }

    /// A success: additive increase, one more request per period each period of successes
    /// (TCP's one segment per round trip), never above the configured rate.
    #[inline]
    pub fn succeeded(&mut self, limit: Rate) {
        let ceiling = limit.per_second();
        if self.rate < ceiling {
            self.rate = (self.rate + 1.0 / (self.rate * limit.period * limit.period)).min(ceiling);
        }
    }

    /// A 429: multiplicative decrease (halved, never below the floor), at most once per burst
    /// window; with a `Retry-After`, nothing fits before it has passed. Returns the new rate
    /// when it was cut.
    pub fn rate_limited(&mut self, limit: Rate, retry_after: Option<f64>, now: f64) -> Option<f64> {
        let (_, tau) = self.interval(limit);
        let cut = now - self.cut_at >= tau;
        if cut {
            self.rate = (self.rate * DECREASE).max(Gcra::floor(limit));
            self.cut_at = now;
        }
        if let Some(after) = retry_after.filter(|a| a.is_finite() && *a > 0.0) {
            // At `now + after` exactly one request fits: tat = then + tau - T.
            let (t, tau) = self.interval(limit);
            self.tat = self.tat.max(now + after + tau - t);
        }
        cut.then_some(self.rate)
    }

    /// A cut made by another worker sending through the same IP: the rate drops to theirs
    /// (within this pool's floor and ceiling) if it is lower, the window starts again (so the
    /// 429s of that burst reaching this worker do not cut twice), and a `Retry-After` with
    /// `hold` seconds left holds this pair too. Returns the new rate when it fell.
    pub fn imposed(&mut self, limit: Rate, rate: f64, hold: f64, now: f64) -> Option<f64> {
        if !rate.is_finite() {
            return None;
        }
        let fell = rate.max(Gcra::floor(limit)) < self.rate;
        if fell {
            self.rate = rate.clamp(Gcra::floor(limit), limit.per_second());
            self.cut_at = now;
        }
        if hold.is_finite() && hold > 0.0 {
            let (t, tau) = self.interval(limit);
            self.tat = self.tat.max(now + hold + tau - t);
        }
        fell.then_some(self.rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    fn six() -> Rate {
        Rate::parse("a", "6/s").unwrap()
    }

    /// Takes requests at the clock's time while they fit; how many did.
    fn burst(g: &mut Gcra, limit: Rate, clock: &ManualClock) -> u32 {
        let mut n = 0;
        while g.wait(limit, clock.now()) == 0.0 && n < 1000 {
            g.take(limit, clock.now());
            n += 1;
        }
        n
    }

    #[test]
    fn an_idle_pair_bursts_its_period_then_is_spaced() {
        let clock = ManualClock::new(1000.0);
        let (limit, mut g) = (six(), Gcra::new(six()));
        assert_eq!(g.tokens(limit, clock.now()), 6);
        assert_eq!(burst(&mut g, limit, &clock), 6);
        assert_eq!(g.tokens(limit, clock.now()), 0);
        let wait = g.wait(limit, clock.now());
        assert!((wait - 1.0 / 6.0).abs() < 1e-9, "{wait}");
        clock.advance(wait).unwrap();
        assert_eq!(burst(&mut g, limit, &clock), 1);
        // Idle for a whole period: the full burst again, never more.
        clock.advance(10.0).unwrap();
        assert_eq!(burst(&mut g, limit, &clock), 6);
        // Spaced requests at the rate all fit: 60 in ten seconds.
        let mut sent = 0;
        for _ in 0..60 {
            clock.advance(1.0 / 6.0).unwrap();
            sent += burst(&mut g, limit, &clock);
        }
        assert_eq!(sent, 60);
    }

    #[test]
    fn a_burst_deeper_than_the_rate_goes_at_once_then_the_rate_holds() {
        let clock = ManualClock::new(10.0);
        let limit = Rate::parse("a", "4/s burst 6").unwrap();
        let mut g = Gcra::new(limit);
        assert_eq!(g.tokens(limit, clock.now()), 6);
        assert_eq!(burst(&mut g, limit, &clock), 6);
        assert!((g.wait(limit, clock.now()) - 0.25).abs() < 1e-9);
        // The site's bucket (6 deep, 4 a second) would take what this sends: four a second.
        let mut sent = 0;
        for _ in 0..40 {
            clock.advance(0.25).unwrap();
            sent += burst(&mut g, limit, &clock);
        }
        assert_eq!(sent, 40);
        // Learned down to 2/s, the burst window stays 1.5 s: three at once.
        g.rate = 2.0;
        clock.advance(10.0).unwrap();
        assert_eq!(burst(&mut g, limit, &clock), 3);
    }

    #[test]
    fn a_slow_rate_still_admits_one() {
        let clock = ManualClock::new(0.0);
        let limit = Rate::parse("a", "2/m").unwrap();
        let mut g = Gcra::new(limit);
        assert_eq!(burst(&mut g, limit, &clock), 2);
        assert!((g.wait(limit, clock.now()) - 30.0).abs() < 1e-9);
    }

    #[test]
    fn a_spent_burst_waits_at_most_one_interval() {
        // The coarse clock often reads the same tick for a whole burst and the wait after it;
        // the sums in `tat` must not round that wait past one interval ("retry after
        // 15.000000000000009" for "4/m").
        let limit = Rate::parse("a", "4/m").unwrap();
        for i in 0..10_000 {
            let now = 0.001 * f64::from(i) + 1e-7 * f64::from(i % 97);
            let mut g = Gcra::new(limit);
            for _ in 0..4 {
                assert_eq!(g.wait(limit, now), 0.0);
                g.take(limit, now);
            }
            let wait = g.wait(limit, now);
            assert!(wait > 0.0 && wait <= 15.0, "at {now}: {wait:e}");
        }
    }

    #[test]
    fn a_429_halves_once_per_window_and_successes_climb_back() {
        let clock = ManualClock::new(50.0);
        let (limit, mut g) = (six(), Gcra::new(six()));
        assert_eq!(g.rate_limited(limit, None, clock.now()), Some(3.0));
        // Another 429 of the same burst: no second cut.
        clock.advance(0.2).unwrap();
        assert_eq!(g.rate_limited(limit, None, clock.now()), None);
        assert_eq!(g.rate, 3.0);
        clock.advance(1.0).unwrap();
        assert_eq!(g.rate_limited(limit, None, clock.now()), Some(1.5));
        // Never below the floor.
        for _ in 0..20 {
            clock.advance(60.0).unwrap();
            g.rate_limited(limit, None, clock.now());
        }
        assert_eq!(g.rate, 6.0 / FLOOR_DIVISOR);
        // Back at 3/s, a second of successes at that rate adds about one request a second.
        g.rate = 3.0;
        for _ in 0..3 {
            g.succeeded(limit);
        }
        assert!((3.9..4.1).contains(&g.rate), "{}", g.rate);
        for _ in 0..1000 {
            g.succeeded(limit);
        }
        assert_eq!(g.rate, 6.0, "capped at the configured rate");
    }

    #[test]
    fn retry_after_holds_the_pair_until_it_passes() {
        let clock = ManualClock::new(0.0);
        let (limit, mut g) = (six(), Gcra::new(six()));
        g.rate_limited(limit, Some(5.0), clock.now());
        assert!((g.wait(limit, clock.now()) - 5.0).abs() < 1e-9);
        clock.advance(5.0).unwrap();
        assert_eq!(burst(&mut g, limit, &clock), 1, "one request when Retry-After has passed, then the halved rate");
        assert!((g.wait(limit, clock.now()) - 1.0 / 3.0).abs() < 1e-9);
    }
}
