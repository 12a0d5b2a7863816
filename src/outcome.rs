//! What a lease's request came to, in the classes health reasons about.

use crate::error::{Error, Result};

/// Outcome classes. A 403 says something about the exit, a 503 about the site, a refused
/// tunnel about the exit everywhere: health weighs them differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Outcome {
    Success = 0,
    Captcha = 1,
    /// 403, 407, 451: the exit is refused by the site.
    Block = 2,
    /// 429: the exit is going too fast for the site.
    RateLimited = 3,
    /// 5xx: evidence about the site, not the exit.
    TargetError = 4,
    Timeout = 5,
    /// Connection or proxy failure: evidence about the tunnel.
    Connect = 6,
    /// An exception that says nothing about the exit or the site.
    Other = 7,
}

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
            _ => Err(Error::BadInput(format!("error {} is not one of 'timeout', 'connect', 'proxy', 'other'", crate::proxy::shown(s)))),
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

    pub fn new(status: Option<i64>, latency: Option<f64>, captcha: bool, error: Option<ErrorKind>, retry_after: Option<f64>) -> Result<Report> {
        let status = match status {
            None => None,
            Some(s) if (100..=599).contains(&s) => Some(s as u16),
            Some(s) => return Err(Error::BadInput(format!("status {s} is outside 100..599"))),
        };
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
            (None, false, Some(403 | 407 | 451)) => Outcome::Block,
            (None, false, Some(429)) => Outcome::RateLimited,
            (None, false, Some(500..=599)) => Outcome::TargetError,
            (None, false, _) => Outcome::Success,
        };
        Ok(Report { outcome, status, latency, retry_after })
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
    fn invalid_reports_are_refused() {
        assert!(Report::new(Some(99), None, false, None, None).is_err());
        assert!(Report::new(Some(600), None, false, None, None).is_err());
        assert!(Report::new(None, Some(f64::NAN), false, None, None).is_err());
        assert!(Report::new(None, Some(-0.1), false, None, None).is_err());
        assert!(Report::new(None, None, false, None, Some(f64::INFINITY)).is_err());
        assert!(ErrorKind::parse("boom").is_err());
    }
}
