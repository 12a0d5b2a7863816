//! A request rate as the user writes it: `"6/s"`, `"30/m"`, `"500/h"`, and with a burst of
//! its own, `"4/s burst 6"`.

use crate::error::{Error, Result};
use std::fmt;

/// `count` requests per `period` seconds, `burst` of them at once after a rest. The burst is
/// `count` unless said otherwise (the period is the burst window, as in `governor`'s quotas);
/// a site whose bucket is deeper than its rate (6 at once, then 4 a second) is paced to that
/// depth with `"4/s burst 6"`, as `governor`'s `allow_burst` and redis-cell's `max_burst` do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub count: f64,
    pub period: f64,
    pub burst: f64,
}

impl Rate {
    /// Parses `"N/s"`, `"N/m"` or `"N/h"` (N a positive number, spaces allowed around the
    /// parts; `sec`, `min`, `hour` and their plurals are accepted too), optionally followed by
    /// `burst B` (B requests at once, at least 1). `site` names the entry in the message of a
    /// refusal.
    pub fn parse(site: &str, text: &str) -> Result<Rate> {
        let bad = |why: &str| Error::setting(&["pacing"], format!("{}: {} {why}", crate::mask::shown(site), crate::mask::shown(text)));
        let (text_rate, burst) = match text.split_once("burst") {
            None => (text, None),
            Some((r, b)) => match b.trim().parse::<f64>() {
                Ok(b) if b.is_finite() && (1.0..=1e9).contains(&b) => (r, Some(b)),
                _ => return Err(bad("has no burst of 1 to 1e9 requests after 'burst'")),
            },
        };
        let Some((n, unit)) = text_rate.split_once('/') else { return Err(bad("is not a rate like \"6/s\", \"30/m\" or \"4/s burst 6\"")) };
        let period = match unit.trim() {
            "s" | "sec" | "second" | "seconds" => 1.0,
            "m" | "min" | "minute" | "minutes" => 60.0,
            "h" | "hour" | "hours" => 3600.0,
            _ => return Err(bad("has no unit of s, m or h after the '/'")),
        };
        let count: f64 = n.trim().parse().map_err(|_| bad("does not start with a number of requests"))?;
        let rate = Rate::new(count, period).map_err(|_| bad("must have a number of requests from 0.001 to 1e9"))?;
        Ok(Rate { burst: burst.unwrap_or(rate.burst), ..rate })
    }

    /// A rate of `count` per `period` seconds, both finite and positive, bursting `count`.
    pub fn new(count: f64, period: f64) -> Result<Rate> {
        if count.is_finite() && (0.001..=1e9).contains(&count) && period.is_finite() && period > 0.0 {
            Ok(Rate { count, period, burst: count })
        } else {
            Err(Error::setting(&["pacing"], format!("{count}/{period} s is no rate: from 0.001 to 1e9 requests per a finite period > 0")))
        }
    }

    /// Requests per second.
    #[inline]
    pub fn per_second(self) -> f64 {
        self.count / self.period
    }

    /// The burst tolerance in seconds: how far ahead of time a pair may run, the time the
    /// configured rate takes to send `burst` requests (the period, for a burst of `count`).
    #[inline]
    pub fn tolerance(self) -> f64 {
        self.burst / self.per_second()
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.period {
            1.0 => write!(f, "{}/s", self.count),
            60.0 => write!(f, "{}/m", self.count),
            3600.0 => write!(f, "{}/h", self.count),
            p => write!(f, "{}/{p}s", self.count),
        }?;
        if self.burst != self.count {
            write!(f, " burst {}", self.burst)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_forms() {
        assert_eq!(Rate::parse("a", "6/s").unwrap(), Rate { count: 6.0, period: 1.0, burst: 6.0 });
        assert_eq!(Rate::parse("a", " 30 / m ").unwrap(), Rate { count: 30.0, period: 60.0, burst: 30.0 });
        assert_eq!(Rate::parse("a", "0.5/sec").unwrap().per_second(), 0.5);
        assert_eq!(Rate::parse("a", "500/hour").unwrap().to_string(), "500/h");
    }

    #[test]
    fn a_burst_of_its_own_sets_the_tolerance() {
        let r = Rate::parse("a", "4/s burst 6").unwrap();
        assert_eq!(r, Rate { count: 4.0, period: 1.0, burst: 6.0 });
        assert_eq!(r.tolerance(), 1.5);
        assert_eq!(r.to_string(), "4/s burst 6");
        assert_eq!(Rate::parse("a", " 30/m  burst 1 ").unwrap().tolerance(), 2.0);
        assert_eq!(Rate::parse("a", "6/s").unwrap().tolerance(), 1.0);
        assert_eq!(Rate::parse("a", "6/s burst 6").unwrap().to_string(), "6/s");
    }

    #[test]
    fn refuses_naming_the_site_and_the_value() {
        for (text, why) in [
            ("6", "is not a rate"),
            ("6/d", "no unit"),
            ("x/s", "does not start with a number"),
            ("0/s", "from 0.001 to 1e9"),
            ("-1/s", "from 0.001 to 1e9"),
            ("nan/s", "from 0.001 to 1e9"),
            ("inf/m", "from 0.001 to 1e9"),
            ("4/s burst", "no burst of 1 to 1e9"),
            ("4/s burst 0.5", "no burst of 1 to 1e9"),
            ("4/s burst x", "no burst of 1 to 1e9"),
            ("4/s burst inf", "no burst of 1 to 1e9"),
            ("burst 6", "is not a rate"),
        ] {
            let e = Rate::parse("shop.example", text).unwrap_err().to_string();
            assert!(e.starts_with("pacing \"shop.example\": "), "{e}");
            assert!(e.contains(why) && e.contains(text.trim()), "{text}: {e}");
        }
    }
}
