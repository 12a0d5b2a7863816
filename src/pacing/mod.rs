//! Pacing per (exit, site): each pair has a request budget (a GCRA, see `gcra`) at a rate
//! configured per site and learned from the site's answers, so that a lease goes to an exit
//! with budget for its site, or waits, instead of sending into a 429.
//!
//! A pool without pacing has no `Pacer` at all: its leases read one `None` per hook.
//! A site is paced when the configuration names it or has a `"*"` entry; a site it does not
//! cover is never paced, whatever it answers (its 429s cool the exit as before: health's
//! `rate_limit_cooldown`). Learning starts from the configured rate and only goes down from
//! it, so a generous `"*"` ceiling is how a user asks for rates learned from 429s alone.

mod gcra;
mod rate;

pub use gcra::{wait_at, Gcra};
pub use rate::Rate;

use crate::error::Result;
use crate::outcome::{Outcome, Report};

/// The configured rates: per site name, and `"*"` for every other site.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PacingConfig {
    /// (site, rate) in the order given; `"*"` is the default.
    pub sites: Vec<(String, Rate)>,
}

impl PacingConfig {
    /// From (site, rate text) entries; the first bad one is refused, naming it.
    pub fn parse<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<PacingConfig> {
        let mut sites = Vec::new();
        for (site, text) in entries {
            if site.is_empty() {
                return Err(crate::error::Error::setting(&["pacing"], "has an empty site name (use \"*\" for every site)"));
            }
            sites.push((site.to_owned(), Rate::parse(site, text)?));
        }
        Ok(PacingConfig { sites })
    }

    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }

    /// The rate for `site`: its own entry, else `"*"`'s, else none (not paced).
    pub fn for_site(&self, site: &str) -> Option<Rate> {
        let find = |name: &str| self.sites.iter().find(|(s, _)| s == name).map(|&(_, r)| r);
        find(site).or_else(|| find("*"))
    }
}

/// One paced site: its configured rate and each exit's budget (by exit handle).
#[derive(Debug, Clone)]
pub struct Row {
    pub limit: Rate,
    cells: Vec<Gcra>,
}

impl Row {
    /// Seconds until exit `h` may send to this site (0: now).
    #[inline]
    pub fn wait(&self, h: u32, now: f64) -> f64 {
        self.cells.get(h as usize).map_or(0.0, |c| c.wait(self.limit, now))
    }

    #[inline]
    pub fn admits(&self, h: u32, now: f64) -> bool {
        self.wait(h, now) == 0.0
    }

    fn cell(&mut self, h: u32) -> &mut Gcra {
        let i = h as usize;
        if self.cells.len() <= i {
            self.cells.resize(i + 1, Gcra::new(self.limit));
        }
        &mut self.cells[i]
    }

    /// Exit `h`'s emission interval and burst tolerance at the rate it learned: what a take
    /// through a shared store spends.
    pub fn spacing(&self, h: u32) -> (f64, f64) {
        self.cells.get(h as usize).copied().unwrap_or_else(|| Gcra::new(self.limit)).interval(self.limit)
    }

    /// The pairs of this site that were used or learned something, by exit handle.
    pub fn cells(&self) -> impl Iterator<Item = (u32, &Gcra)> {
        let fresh = Gcra::new(self.limit);
        self.cells.iter().enumerate().filter(move |(_, c)| **c != fresh).map(|(h, c)| (h as u32, c))
    }

    /// Exit `h`'s budget, if it was ever touched.
    #[cfg(test)]
    pub fn get(&self, h: u32) -> Option<&Gcra> {
        self.cells.get(h as usize)
    }
}

/// A cut the site asked for, to announce.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cut {
    pub rate: f64,
    pub limit: Rate,
}

/// Every paced site's row, by the pool's site id.
#[derive(Debug, Clone, Default)]
pub struct Pacer {
    cfg: PacingConfig,
    rows: Vec<Option<Row>>,
}

impl Pacer {
    pub fn new(cfg: PacingConfig) -> Pacer {
        Pacer { cfg, rows: Vec::new() }
    }

    /// Site `id` (named `name`) is new to the pool: it gets a row if the configuration paces it.
    pub fn site_added(&mut self, id: u32, name: &str) {
        if let Some(limit) = self.cfg.for_site(name) {
            if self.rows.len() <= id as usize {
                self.rows.resize(id as usize + 1, None);
            }
            self.rows[id as usize] = Some(Row { limit, cells: Vec::new() });
        }
    }

    /// The site's row, if it is paced: the one read a pick makes.
    #[inline]
    pub fn row(&self, site: u32) -> Option<&Row> {
        self.rows.get(site as usize).and_then(Option::as_ref)
    }

    #[inline]
    fn row_mut(&mut self, site: u32) -> Option<&mut Row> {
        self.rows.get_mut(site as usize).and_then(Option::as_mut)
    }

    /// Seconds until exit `h` may send to `site` (0: now, or not paced).
    #[inline]
    pub fn wait(&self, site: u32, h: u32, now: f64) -> f64 {
        self.row(site).map_or(0.0, |r| r.wait(h, now))
    }

    /// A lease of exit `h` for `site` spends one request of its budget.
    #[inline]
    pub fn take(&mut self, site: u32, h: u32, now: f64) {
        if let Some(r) = self.row_mut(site) {
            let limit = r.limit;
            r.cell(h).take(limit, now);
        }
    }

    /// Learns from a report on exit `h` for `site`: a success raises the pair's rate, a 429
    /// (with its `Retry-After`) cuts it. Returns the cut, if there was one.
    #[inline]
    pub fn report(&mut self, site: u32, h: u32, report: &Report, now: f64) -> Option<Cut> {
        let r = self.row_mut(site)?;
        let limit = r.limit;
        match report.outcome {
            Outcome::Success => {
                r.cell(h).succeeded(limit);
                None
            }
            Outcome::RateLimited => r.cell(h).rate_limited(limit, report.retry_after, now).map(|rate| Cut { rate, limit }),
            _ => None,
        }
    }

    /// Another worker's cut of exit `h`'s pace for `site` to `rate`, with `hold` seconds of
    /// `Retry-After` left. Returns the cut when it lowered this worker's rate.
    pub fn impose(&mut self, site: u32, h: u32, rate: f64, hold: f64, now: f64) -> Option<Cut> {
        let r = self.row_mut(site)?;
        let limit = r.limit;
        r.cell(h).imposed(limit, rate, hold, now).map(|rate| Cut { rate, limit })
    }

    /// A budget saved by a pool that ran before: its learned rate (kept within this pool's
    /// floor and ceiling for the site) and its arrival time, on this pool's clock.
    pub fn resume(&mut self, site: u32, h: u32, rate: f64, tat: f64) {
        let Some(r) = self.row_mut(site) else { return };
        let limit = r.limit;
        if rate.is_finite() && !tat.is_nan() {
            let cell = r.cell(h);
            cell.rate = rate.clamp(Gcra::floor(limit), limit.per_second());
            cell.tat = tat;
        }
    }

    /// Paced site ids, with their rows.
    pub fn rows(&self) -> impl Iterator<Item = (u32, &Row)> {
        self.rows.iter().enumerate().filter_map(|(s, r)| r.as_ref().map(|r| (s as u32, r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    fn pacer() -> Pacer {
        let mut p = Pacer::new(PacingConfig::parse([("shop.example", "6/s"), ("*", "2/s")]).unwrap());
        p.site_added(1, "shop.example");
        p.site_added(2, "other.example");
        p
    }

    #[test]
    fn sites_take_their_own_rate_or_the_default() {
        let cfg = PacingConfig::parse([("shop.example", "6/s")]).unwrap();
        assert_eq!(cfg.for_site("x"), None, "no \"*\": other sites are not paced");
        let p = pacer();
        assert_eq!(p.row(1).unwrap().limit.per_second(), 6.0);
        assert_eq!(p.row(2).unwrap().limit.per_second(), 2.0);
        assert!(p.row(0).is_none() && p.row(3).is_none());
        assert!(Pacer::default().row(1).is_none());
        let e = PacingConfig::parse([("a", "6/s"), ("b", "six")]).unwrap_err().to_string();
        assert!(e.contains("\"b\"") && e.contains("\"six\""), "{e}");
    }

    #[test]
    fn each_pair_has_its_own_budget_and_learns_from_reports() {
        let clock = ManualClock::new(10.0);
        let mut p = pacer();
        let now = clock.now();
        for _ in 0..2 {
            assert_eq!(p.wait(2, 7, now), 0.0);
            p.take(2, 7, now);
        }
        assert!(p.wait(2, 7, now) > 0.0);
        assert_eq!(p.wait(2, 8, now), 0.0, "another exit, its own budget");
        assert_eq!(p.wait(1, 7, now), 0.0, "another site, its own budget");
        assert_eq!(p.wait(0, 7, now), 0.0, "no site: never paced");
        let r429 = Report::new(Some(429), None, false, None, None).unwrap();
        assert_eq!(p.report(1, 7, &r429, now).map(|c| c.rate), Some(3.0));
        assert_eq!(p.report(1, 7, &Report::SUCCESS, now), None);
        assert!(p.row(1).unwrap().get(7).unwrap().rate > 3.0);
        assert_eq!(p.row(1).unwrap().cells().count(), 1);
    }
}
