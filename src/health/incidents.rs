//! Incidents: when most exits fail one site at once, the site is at fault (a site incident):
//! nobody is punished for it and its leases are spaced out instead; when most tunnels fail at
//! once, the fault is ours (network, probes) and no tunnel is judged (the global incident).
//!
//! A site incident's spacing ramps: each success for the site doubles the leases it lets
//! through per `incident_interval` (1, 2, 4, 8, ...), each failure drops it back to one, and
//! once it lets through as many per interval as the pool has exits in service it spaces
//! nothing. Recovery then takes about as long as noticing: one interval for the first
//! success, under one more for the doublings (TCP's slow start, per success rather than per
//! round trip, since a lease's answer is its acknowledgement).

use super::board::{HealthBoard, SITE_VERDICT};
use super::{Signal, State};
use crate::events::EventKind;

#[derive(Debug, Clone, Copy)]
pub(super) struct Incident {
    opened: f64,
    next_lease: f64,
    /// When the last lease for the site went out.
    last_pass: f64,
    /// Leases let through per `incident_interval`: 1 at first, doubled by each success.
    rate: u32,
    /// `incident_interval / rate`, kept so that a lease adds, never divides; 0 at full traffic.
    spacing: f64,
    /// Shared by another worker of the fleet: it holds until then (or until that worker
    /// closes it), whatever this worker's own evidence says.
    remote_until: f64,
    /// Opened here, in a fleet: when to tell the fleet again that it is still open.
    republish_at: f64,
}

impl Incident {
    /// Opened now: the next lease may go at once, then one per `interval`.
    fn new(now: f64, interval: f64) -> Incident {
        Incident {
            opened: now,
            next_lease: now,
            last_pass: f64::NEG_INFINITY,
            rate: 1,
            spacing: interval,
            remote_until: f64::NEG_INFINITY,
            republish_at: f64::INFINITY,
        }
    }
}

/// How long a site incident shared by another worker holds without news from it; the worker
/// that opened it says so again every half of this while it stays open.
const INCIDENT_HOLD: f64 = 60.0;

impl HealthBoard {
    /// During a site incident, that site's leases go `incident_interval` apart: `Err(wait)`
    /// while the next one may not go yet.
    /// Unscoped leases (site 0) are never slowed: without a site there is no one to slow.
    #[inline]
    pub fn gate_check(&self, site: u32, now: f64) -> Result<(), f64> {
        if site == 0 {
            return Ok(());
        }
        match self.sites.get(site as usize).and_then(|sh| sh.incident) {
            Some(inc) if now < inc.next_lease => Err(inc.next_lease - now),
            _ => Ok(()),
        }
    }

    /// A lease for the site went out: the next one waits its interval.
    #[inline]
    pub fn gate_pass(&mut self, site: u32, now: f64) {
        if let Some(inc) = self.sites.get_mut(site as usize).and_then(|sh| sh.incident.as_mut()) {
            inc.last_pass = now;
            inc.next_lease = now + inc.spacing;
        }
    }

    /// A report's signal for `site` during its incident: a success doubles the leases let
    /// through per interval (no spacing at all once they reach `in_service`) and lets the next
    /// one go at once (as an acknowledgement opens TCP's window: waiting out the spacing after
    /// each doubling would add up to the interval again); evidence that the site still fails
    /// drops them back to one. A ban for the exit's own pace (`pace_ban`) is no such evidence:
    /// it leaves the ramp where it is.
    #[inline]
    pub(super) fn ramp(&mut self, site: u32, signal: Signal, pace_ban: bool, in_service: u32, now: f64) {
        let interval = self.cfg.incident_interval;
        let Some(inc) = self.sites.get_mut(site as usize).and_then(|sh| sh.incident.as_mut()) else { return };
        let success = match signal {
            Signal::Success => true,
            Signal::Failure(_) if pace_ban => return,
            Signal::Failure(_) | Signal::Captcha | Signal::SiteError => false,
        };
        inc.rate = if success { inc.rate.saturating_mul(2) } else { 1 };
        inc.spacing = if inc.rate >= in_service.max(1) { 0.0 } else { interval / inc.rate as f64 };
        inc.next_lease = if success { now.min(inc.last_pass + inc.spacing) } else { inc.last_pass + inc.spacing };
    }

    pub(super) fn incident_threshold(&self, in_service: u32) -> u32 {
        ceil_u32(self.cfg.incident_fraction * in_service as f64).max(self.cfg.incident_min_exits)
    }

    pub(super) fn judge_incident(&mut self, site: u32, threshold: u32, now: f64) {
        let sh = &mut self.sites[site as usize];
        match sh.incident {
            None if sh.failing >= threshold => {
                sh.incident = Some(Incident {
                    remote_until: f64::NEG_INFINITY,
                    republish_at: now + INCIDENT_HOLD / 2.0,
                    ..Incident::new(now, self.cfg.incident_interval)
                });
                sh.incidents += 1;
                let failing = sh.failing;
                self.queue_verdict(SITE_VERDICT, Some(site), State::Quarantined, INCIDENT_HOLD);
                self.events.push(
                    now,
                    EventKind::SiteIncidentOpened,
                    None,
                    Some(site),
                    format!("{failing} exits are failing this site at once (threshold {threshold}): the site is at fault; no exit is judged for it and its leases are spaced {} s apart", self.cfg.incident_interval),
                );
            }
            // Hysteresis: it closes only when fewer than half as many still fail (here, and,
            // for an incident another worker opened, there: its word or its silence).
            Some(inc) if sh.failing * 2 < threshold && now >= inc.remote_until => {
                sh.incident = None;
                let failing = sh.failing;
                self.queue_verdict(SITE_VERDICT, Some(site), State::Healthy, 0.0);
                self.events.push(
                    now,
                    EventKind::SiteIncidentClosed,
                    None,
                    Some(site),
                    format!("{failing} exits still failing this site; incident over after {:.1} s", now - inc.opened),
                );
            }
            Some(inc) if inc.remote_until < now && now >= inc.republish_at => {
                if let Some(i) = sh.incident.as_mut() {
                    i.republish_at = now + INCIDENT_HOLD / 2.0;
                }
                self.queue_verdict(SITE_VERDICT, Some(site), State::Quarantined, INCIDENT_HOLD);
            }
            _ => {}
        }
    }

    /// A site incident another worker opened (`open`) or closed, applied here.
    pub fn impose_incident(&mut self, site: u32, open: bool, hold: f64, now: f64) {
        self.ensure_site(site);
        let sh = &mut self.sites[site as usize];
        match (&mut sh.incident, open) {
            (Some(inc), true) => inc.remote_until = now + hold,
            (None, true) => {
                sh.incident = Some(Incident {
                    remote_until: now + hold,
                    republish_at: f64::INFINITY,
                    ..Incident::new(now, self.cfg.incident_interval)
                });
                sh.incidents += 1;
                self.events.push(
                    now,
                    EventKind::SiteIncidentOpened,
                    None,
                    Some(site),
                    "opened by another worker of the fleet: no exit is judged for this site and its leases are spaced out".to_owned(),
                );
            }
            (Some(inc), false) => {
                // Its opener saw it end; this worker's own evidence may still keep it open.
                inc.remote_until = f64::NEG_INFINITY;
                let threshold = self.incident_threshold(self.tunnel.len() as u32);
                self.judge_incident(site, threshold, now);
            }
            (None, false) => {}
        }
    }

    pub(super) fn judge_global(&mut self, threshold: u32, now: f64) {
        match self.global_incident {
            None if self.tunnel_failing >= threshold => {
                self.global_incident = Some(now);
                let n = self.tunnel_failing;
                self.events.push(
                    now,
                    EventKind::GlobalIncidentOpened,
                    None,
                    None,
                    format!(
                        "{n} tunnels are failing at once (threshold {threshold}): the fault is ours (network, probes); no tunnel is judged"
                    ),
                );
            }
            Some(opened) if self.tunnel_failing * 2 < threshold => {
                self.global_incident = None;
                let n = self.tunnel_failing;
                self.events.push(
                    now,
                    EventKind::GlobalIncidentClosed,
                    None,
                    None,
                    format!("{n} tunnels still failing; over after {:.1} s", now - opened),
                );
            }
            _ => {}
        }
    }

    pub fn incident_open(&self, site: u32) -> bool {
        self.sites.get(site as usize).is_some_and(|s| s.incident.is_some())
    }

    pub fn global_incident_open(&self) -> bool {
        self.global_incident.is_some()
    }

    pub fn open_incidents(&self) -> Vec<u32> {
        (0..self.sites.len() as u32).filter(|&s| self.incident_open(s)).collect()
    }
}

/// `x.ceil() as u32`, exactly (NaN, negatives, infinities and overflow saturate alike),
/// without the libm call `ceil` is on a baseline x86-64 target: every report asks for the
/// incident threshold.
#[inline]
pub(super) fn ceil_u32(x: f64) -> u32 {
    let t = x as u32;
    if (t as f64) < x {
        t.saturating_add(1)
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::ceil_u32;

    /// The thresholds the pool computes (a share times a count of exits) and every edge
    /// case: the same as `ceil() as u32`.
    #[test]
    fn ceil_u32_is_ceil_then_cast() {
        let edges = [0.0, -0.0, -0.5, -3.2, 0.1, 0.5, 1.0, 2.5, 5.0, 4294967294.5, 4294967295.0, 4294967295.5, 1e20];
        let specials = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::MIN_POSITIVE, f64::EPSILON, 1.0 - f64::EPSILON];
        let shares = (0..=100).flat_map(|f| (0..=1000u32).map(move |n| f as f64 / 100.0 * n as f64));
        for x in edges.into_iter().chain(specials).chain(shares) {
            assert_eq!(ceil_u32(x), x.ceil() as u32, "{x:e}");
        }
    }
}
