//! What a lease's request came to, in the classes health reasons about.

use crate::error::{Error, Result};

/// Outcome classes. A 403 says something about the exit, a 503 about the site, a refused
/// tunnel about the exit everywhere: health weighs them differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Outcome {
    Success = 0,
    Captcha = 1,
    /// 403, 407, 451, 999: the exit is refused by the site ([`BLOCK_STATUSES`]).
    Block = 2,
    /// 429: the exit is going too fast for the site.
    RateLimited = 3,
    /// 5xx: evidence about the site, not the exit.
    TargetError = 4,
    Timeout = 5,
    /// Connection or proxy failure: evidence about the tunnel.
    Connect = 6,
    /// An exception, or a status outside HTTP's 100..=599 (other than 999), that says
    /// nothing about the exit or the site.
    Other = 7,
}

/// The statuses that mean "the site refuses this exit". 999 is no HTTP status, but a large
/// social site answers scrapers with it: it is a refusal as plain as a 403. The one list;
/// the Python side reads it as `exitpool._core.BLOCK_STATUSES`.
pub const BLOCK_STATUSES: [u16; 4] = [403, 407, 451, 999];

/// The largest status a report takes: any status a client can hand over fits in 16 bits
/// (HTTP's status line has three digits).
pub const MAX_STATUS: i64 = u16::MAX as i64;

pub const OUTCOMES: [Outcome; 8] = [
    Outcome::Success,
    Outcome::Captcha,
    Outcome::Block,
    Outcome::RateLimited,
    Outcome::TargetError,
    Outcome::Timeout,
    Outcome::Connect,
    Outcome::Other,
];

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Captcha => "captcha",
            Outcome::Block => "block",
            Outcome::RateLimited => "rate_limited",
            Outcome::TargetError => "target_error",
            Outcome::Timeout => "timeout",
            Outcome::Connect => "connect",
            Outcome::Other => "other",
        }
    }

    pub fn is_success(self) -> bool {
        self == Outcome::Success
    }
}

/// The transport-level error a report names (from a caught exception or given by hand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Timeout,
    Connect,
    Other,
}

impl ErrorKind {
    pub fn parse(s: &str) -> Result<ErrorKind> {
        match s {
            "timeout" => Ok(ErrorKind::Timeout),
            "connect" | "proxy" => Ok(ErrorKind::Connect),
            "other" => Ok(ErrorKind::Other),
            _ => Err(Error::BadInput(format!("error {} is not one of 'timeout', 'connect', 'proxy', 'other'", crate::mask::shown(s)))),
        }
    }
}

/// One validated report. Built only through `Report::new`, so a report the pool records is
/// always in range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Report {
    pub outcome: Outcome,
    pub status: Option<u16>,
    pub latency: Option<f64>,
    /// Seconds the site asked us to wait (a 429's Retry-After).
    pub retry_after: Option<f64>,
}

impl Report {
    pub const SUCCESS: Report = Report { outcome: Outcome::Success, status: None, latency: None, retry_after: None };

    /// A status is what a site answered, never the caller's mistake: any status a client can
    /// give (0..=65535) is recorded (see [`status_outcome`]); only a negative or larger number
    /// is bad input.
    pub fn new(
        status: Option<i64>,
        latency: Option<f64>,
        captcha: bool,
        error: Option<ErrorKind>,
        retry_after: Option<f64>,
    ) -> Result<Report> {
        let status = status.map(check_status).transpose()?;
        for (name, v) in [("latency", latency), ("retry_after", retry_after)] {
            if let Some(v) = v {
                if !v.is_finite() || v < 0.0 {
                    return Err(Error::BadInput(format!("{name} {v} must be a finite number of seconds >= 0")));
                }
            }
        }
        let outcome = match (error, captcha, status) {
            (Some(ErrorKind::Timeout), _, _) => Outcome::Timeout,
            (Some(ErrorKind::Connect), _, _) => Outcome::Connect,
            (Some(ErrorKind::Other), _, _) => Outcome::Other,
            (None, true, _) => Outcome::Captcha,
            (None, false, Some(s)) => status_outcome(s),
            (None, false, None) => Outcome::Success,
        };
        Ok(Report { outcome, status, latency, retry_after })
    }
}

/// A status as a report takes it; bad input only when no client could have given it.
pub fn check_status(status: i64) -> Result<u16> {
    u16::try_from(status).map_err(|_| Error::BadInput(status_refusal(&status.to_string())))
}

/// Why a number is no status (for a number too large to reach [`check_status`] too).
pub fn status_refusal(status: &str) -> String {
    format!("status {status} is not a response status (a whole number 0..={MAX_STATUS})")
}

/// The class of a response's status: [`BLOCK_STATUSES`] are blocks, 429 is rate limiting,
/// 5xx speaks of the site, the rest of 100..=599 is success (a 404 is the page's, not the
/// exit's). A status HTTP does not define (0, 1..=99, 600..) says nothing about the exit or the
/// site: `Other`.
pub fn status_outcome(status: u16) -> Outcome {
    match status {
        s if BLOCK_STATUSES.contains(&s) => Outcome::Block,
        429 => Outcome::RateLimited,
        500..=599 => Outcome::TargetError,
        100..=499 => Outcome::Success,
        _ => Outcome::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_from_status_error_and_captcha() {
        let class = |s: Option<i64>, c: bool, e: Option<ErrorKind>| Report::new(s, None, c, e, None).unwrap().outcome;
        assert_eq!(class(Some(200), false, None), Outcome::Success);
        assert_eq!(class(Some(404), false, None), Outcome::Success);
        assert_eq!(class(Some(200), true, None), Outcome::Captcha);
        for s in [403, 407, 451] {
            assert_eq!(class(Some(s), false, None), Outcome::Block);
        }
        assert_eq!(class(Some(429), false, None), Outcome::RateLimited);
        assert_eq!(class(Some(503), false, None), Outcome::TargetError);
        assert_eq!(class(Some(200), true, Some(ErrorKind::Timeout)), Outcome::Timeout);
        assert_eq!(class(None, false, Some(ErrorKind::Connect)), Outcome::Connect);
        assert_eq!(class(None, false, None), Outcome::Success);
    }

    #[test]
    fn any_status_a_client_can_give_is_an_outcome() {
        let class = |s: i64| Report::new(Some(s), None, false, None, None).unwrap().outcome;
        assert_eq!(class(999), Outcome::Block);
        for s in [0, 1, 99, 600, 998, 1000, 65535] {
            assert_eq!(class(s), Outcome::Other, "{s}");
        }
        assert_eq!(class(100), Outcome::Success);
        assert_eq!(class(599), Outcome::TargetError);
        for s in [-1, 65536, i64::MAX, i64::MIN] {
            let e = Report::new(Some(s), None, false, None, None).unwrap_err().to_string();
            assert!(e.contains(&format!("status {s} ")), "{e}");
        }
    }

    #[test]
    fn invalid_reports_are_refused() {
        assert!(Report::new(None, Some(f64::NAN), false, None, None).is_err());
        assert!(Report::new(None, Some(-0.1), false, None, None).is_err());
        assert!(Report::new(None, None, false, None, Some(f64::INFINITY)).is_err());
        assert!(ErrorKind::parse("boom").is_err());
    }
}
