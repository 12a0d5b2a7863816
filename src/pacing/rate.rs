//! A request rate as the user writes it: `"6/s"`, `"30/m"`, `"500/h"`.

use crate::error::{Error, Result};
use std::fmt;

/// `count` requests per `period` seconds. The period is also the burst window: a pair that
/// was idle may send up to `count` requests at once, as `governor`'s quotas do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub count: f64,
    pub period: f64,
}

impl Rate {
    /// Parses `"N/s"`, `"N/m"` or `"N/h"` (N a positive number, spaces allowed around the
    /// parts; `sec`, `min`, `hour` and their plurals are accepted too). `site` names the
    /// entry in the message of a refusal.
    pub fn parse(site: &str, text: &str) -> Result<Rate> {
        let bad = |why: &str| Error::setting(&["pacing"], format!("{}: {} {why}", crate::mask::shown(site), crate::mask::shown(text)));
        let Some((n, unit)) = text.split_once('/') else { return Err(bad("is not a rate like \"6/s\", \"30/m\" or \"500/h\"")) };
        let period = match unit.trim() {
            "s" | "sec" | "second" | "seconds" => 1.0,
            "m" | "min" | "minute" | "minutes" => 60.0,
            "h" | "hour" | "hours" => 3600.0,
            _ => return Err(bad("has no unit of s, m or h after the '/'")),
        };
        let count: f64 = n.trim().parse().map_err(|_| bad("does not start with a number of requests"))?;
        Rate::new(count, period).map_err(|_| bad("must have a number of requests from 0.001 to 1e9"))
    }

    /// A rate of `count` per `period` seconds, both finite and positive.
    pub fn new(count: f64, period: f64) -> Result<Rate> {
        if count.is_finite() && (0.001..=1e9).contains(&count) && period.is_finite() && period > 0.0 {
            Ok(Rate { count, period })
        } else {
            Err(Error::setting(&["pacing"], format!("{count}/{period} s is no rate: from 0.001 to 1e9 requests per a finite period > 0")))
        }
    }

    /// Requests per second.
    #[inline]
    pub fn per_second(self) -> f64 {
        self.count / self.period
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.period {
            1.0 => "s",
            60.0 => "m",
            3600.0 => "h",
            p => return write!(f, "{}/{p}s", self.count),
        };
        write!(f, "{}/{unit}", self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_forms() {
        assert_eq!(Rate::parse("a", "6/s").unwrap(), Rate { count: 6.0, period: 1.0 });
        assert_eq!(Rate::parse("a", " 30 / m ").unwrap(), Rate { count: 30.0, period: 60.0 });
        assert_eq!(Rate::parse("a", "0.5/sec").unwrap().per_second(), 0.5);
        assert_eq!(Rate::parse("a", "500/hour").unwrap().to_string(), "500/h");
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
        ] {
            let e = Rate::parse("shop.example", text).unwrap_err().to_string();
            assert!(e.starts_with("pacing \"shop.example\": "), "{e}");
            assert!(e.contains(why) && e.contains(text.trim()), "{text}: {e}");
        }
    }
}
