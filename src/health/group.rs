//! Exit groups: the slots of one gateway, judged together by one breaker.
//!
//! A provider gateway is one host:port that mints hundreds of slots (exits). When the gateway
//! itself fails (refuses connections, answers its own "no exit available" to CONNECT, or 407
//! because its credentials are wrong), every slot fails at once: judged one by one, hundreds of
//! leases would fail before each slot's breaker tripped, and each slot would need its own
//! probe to come back. The group's breaker sees the correlation instead:
//!
//! - a 407 from any member is the gateway's configuration: the group goes out at once, a
//!   `gateway_credentials_rejected` event says so, and no member's breaker counts it;
//! - connection failures (`Outcome::Connect`) from `threshold` distinct members within
//!   [`GROUP_WINDOW`], with no tunnel success from any member between, are the gateway's: the
//!   group goes out (`gateway_down`), and the members' breakers are put back as they were
//!   before those failures, so that the slots come back together. A member failing alone
//!   stays that member's;
//! - while out, no member is admitted; after a backoff like a tunnel's (base, doubling,
//!   ceiling, jitter) one trial lease goes through any member: a success closes the group
//!   (`gateway_up`) and readmits every member at once; a failure doubles the backoff. A
//!   successful probe of any member, or `revive_group`, closes it at any time.
//!
//! The shape is the site incident's (`incidents`): a count of distinct failing members
//! against the same fewest-members threshold (`incident_min_exits`), and evidence gathered
//! while the group is at fault is never held against a member. Ungrouped exits pay one branch
//! on their breaker's group (read with the breaker every path reads anyway) and nothing else.

use super::board::{Recent, GROUP_DUE};
use super::{Breaker, HealthBoard, Probe, Reason, State, Transition, Trial};
use crate::events::{Event, EventKind};
use crate::outcome::{Outcome, Report};

/// How close together distinct members' connection failures must come to be the gateway's.
/// A dead gateway fails every lease in flight at once and every lease after, so `threshold`
/// (3 by default) distinct failures land within a second or two at any real traffic, and
/// within 10 s down to a lease every 3 s. Uncorrelated slot failures (a residential device going
/// offline, which providers warn about) are told apart by the successes between them, not by
/// the window: in a quiet pool the window only keeps failures minutes apart from adding up.
pub const GROUP_WINDOW: f64 = 10.0;

/// Why a group is out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupCause {
    /// Connection failures from several members at once, or a failed trial.
    Tunnel,
    /// The gateway answered 407 Proxy Authentication Required.
    Credentials,
}

impl GroupCause {
    pub fn name(self) -> &'static str {
        match self {
            GroupCause::Tunnel => "connect",
            GroupCause::Credentials => "credentials",
        }
    }
}

/// A member whose connection failures may yet turn out to be its gateway's: when it last
/// failed, and, if it was in service at its first, its breaker and recent outcomes as they
/// were before, to put back.
#[derive(Debug, Clone)]
struct Suspect {
    h: u32,
    at: f64,
    before: Option<(Breaker, Recent)>,
}

/// One exit group's breaker.
#[derive(Debug, Clone)]
pub struct Group {
    name: String,
    /// Healthy (closed), Quarantined (out) or Probing (one trial through any member).
    state: State,
    cause: GroupCause,
    since: f64,
    until: f64,
    repeats: u32,
    /// The member with the half-open trial out, if any.
    trial: Option<u32>,
    members: u32,
    /// The distinct members failing within the window since the last tunnel success.
    suspects: Vec<Suspect>,
    /// Lifetime figures for snapshots.
    pub outages: u32,
    pub credential_rejections: u64,
    /// Member failures charged to the gateway instead of the member.
    pub absorbed: u64,
    pub out_seconds: f64,
}

impl Group {
    fn new(name: String, now: f64) -> Group {
        Group {
            name,
            state: State::Healthy,
            cause: GroupCause::Tunnel,
            since: now,
            until: 0.0,
            repeats: 0,
            trial: None,
            members: 0,
            suspects: Vec::new(),
            outages: 0,
            credential_rejections: 0,
            absorbed: 0,
            out_seconds: 0.0,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    /// Healthy (closed: members judged by their own breakers), Quarantined (every member out)
    /// or Probing (one trial lease through any member decides).
    pub fn state(&self) -> State {
        self.state
    }
    /// Why it went out last (meaningful while not healthy).
    pub fn cause(&self) -> GroupCause {
        self.cause
    }
    pub fn since(&self) -> f64 {
        self.since
    }
    /// When a trial may go (meaningful while quarantined).
    pub fn until(&self) -> f64 {
        self.until
    }
    pub fn members(&self) -> u32 {
        self.members
    }
    pub fn trial_out(&self) -> bool {
        self.trial.is_some()
    }
    /// Distinct members failing to connect now, with no success since (0 while out).
    pub fn failing(&self) -> u32 {
        self.suspects.len() as u32
    }
    /// Seconds spent out, counting an outage still running.
    pub fn total_out(&self, now: f64) -> f64 {
        self.out_seconds + if self.state == State::Healthy { 0.0 } else { now - self.since }
    }

    #[inline]
    fn admits(&self) -> bool {
        match self.state {
            State::Probing => self.trial.is_none(),
            State::Quarantined | State::Dead => false,
            State::Healthy | State::Degraded => true,
        }
    }

    fn enter(&mut self, to: State, now: f64) -> (State, f64) {
        let (from, held) = (self.state, now - self.since);
        if from != State::Healthy {
            self.out_seconds += held;
        }
        self.state = to;
        self.since = now;
        self.trial = None;
        self.suspects.clear();
        (from, held)
    }
}

/// What a report says about a member's connection through the gateway.
#[derive(Clone, Copy)]
enum Tunnel {
    Ok,
    Failed,
    Silent,
}

fn tunnel_evidence(report: &Report) -> Tunnel {
    match report.outcome {
        Outcome::Connect => Tunnel::Failed,
        Outcome::Other => Tunnel::Silent,
        // Any answer from the far side went through the gateway.
        _ => Tunnel::Ok,
    }
}

/// A 407 is the proxy's own answer about the credentials: whether the client saw it as the
/// response (plain HTTP) or as a failed CONNECT, it is never about the site.
fn rejects_credentials(report: &Report) -> bool {
    report.status == Some(407) && matches!(report.outcome, Outcome::Block | Outcome::Connect)
}

impl HealthBoard {
    /// A new exit group (a gateway), healthy, without members: its id, from 1 (0 is "no group").
    /// `name` appears in events: a gateway's id, never its URL.
    pub fn add_group(&mut self, name: &str, now: f64) -> u32 {
        self.groups.push(Group::new(name.to_owned(), now));
        self.groups.len() as u32
    }

    /// Puts exit `h` in group `group` (0: in none), out of any group it was in. An unknown
    /// group id is no group.
    pub fn set_group(&mut self, h: u32, group: u32) {
        debug_assert!(group as usize <= self.groups.len(), "no exit group {group}");
        let group = if group as usize <= self.groups.len() { group } else { 0 };
        let old = self.tunnel[h as usize].group();
        if old == group {
            return;
        }
        if old != 0 {
            let g = &mut self.groups[old as usize - 1];
            g.members -= 1;
            g.suspects.retain(|s| s.h != h);
            if g.trial == Some(h) {
                g.trial = None;
            }
        }
        if group != 0 {
            self.groups[group as usize - 1].members += 1;
        }
        // Panic counts an exit's own tunnel out only outside a group.
        if self.tunnel[h as usize].state().is_ejected() {
            self.tunnel_out = (self.tunnel_out + (group == 0) as u32) - (old == 0) as u32;
        }
        self.tunnel[h as usize].set_group(group);
        // Its admission may have changed either way; its record asks the group's breaker or not.
        self.refresh(h);
        self.readmissions += 1;
    }

    /// The group of exit `h` (0: none).
    pub fn group_of(&self, h: u32) -> u32 {
        self.tunnel[h as usize].group()
    }

    /// Group `g`'s breaker and figures.
    pub fn group(&self, g: u32) -> Option<&Group> {
        self.groups.get((g as usize).checked_sub(1)?)
    }

    /// How many groups there are (ids 1..=count).
    pub fn group_count(&self) -> u32 {
        self.groups.len() as u32
    }

    #[inline]
    pub(super) fn group_admits(&self, g: u32) -> bool {
        self.groups[g as usize - 1].admits()
    }

    pub(super) fn group_state(&self, g: u32) -> State {
        self.groups[g as usize - 1].state
    }

    /// Whether panic admits group `g`'s slots while it is out: yes, unless its gateway refuses
    /// its credentials (configuration, not health: no lease can get through it).
    #[inline(never)] // out of line: only a gateway out of service comes here
    pub(super) fn group_panics(&self, g: u32) -> bool {
        self.panic() && self.groups[g as usize - 1].cause != GroupCause::Credentials
    }

    /// Whether group `g` (0: none) is out of service.
    pub(super) fn group_out(&self, g: u32) -> bool {
        g != 0 && self.groups[g as usize - 1].state.is_ejected()
    }

    /// Back in service by hand: the group closes and every member is admitted again (their
    /// own breakers stay as they are).
    pub fn revive_group(&mut self, g: u32, now: f64) {
        if self.group(g).is_some_and(|grp| grp.state != State::Healthy) {
            self.close_group(g, now, "revived");
        }
    }

    /// A lease goes out through member `h`: in a half-open group, it is the trial.
    #[inline(never)] // out of line: ungrouped exits' paths keep their size and inlining
    pub(super) fn group_on_lease(&mut self, h: u32) {
        let grp = &mut self.groups[self.tunnel[h as usize].group() as usize - 1];
        if grp.state == State::Probing && grp.trial.is_none() {
            grp.trial = Some(h);
        }
    }

    /// Member `h`'s lease ended without a word about the gateway: if it was the group's
    /// trial, another member may carry one.
    #[inline(never)] // out of line: ungrouped exits' paths keep their size and inlining
    pub(super) fn group_trial_back(&mut self, h: u32) {
        let g = self.tunnel[h as usize].group();
        if g != 0 && self.groups[g as usize - 1].trial == Some(h) {
            self.groups[g as usize - 1].trial = None;
            self.readmissions += 1;
        }
    }

    /// The group's share of member `h`'s report. `true`: the report was the gateway's and is
    /// spent (the member's breakers get their trial slots back and nothing else); `false`:
    /// the member's breakers take it as usual.
    #[inline(never)] // out of line: ungrouped exits' paths keep their size and inlining
    pub(super) fn group_report(&mut self, h: u32, site: u32, report: &Report, trial: Trial, now: f64, jitter: f64) -> bool {
        let g = self.tunnel[h as usize].group();
        if rejects_credentials(report) {
            self.credentials_rejected(g, h, false, now);
            self.absorb(g, h, site, trial);
            return true;
        }
        let evidence = tunnel_evidence(report);
        let grp = &mut self.groups[g as usize - 1];
        match (grp.state, evidence) {
            (State::Healthy, Tunnel::Ok) => {
                // The gateway works: earlier failures were each their member's own.
                grp.suspects.clear();
                false
            }
            (State::Healthy, Tunnel::Failed) => {
                if self.suspect(g, h, now, jitter) {
                    self.absorb(g, h, site, trial);
                    return true;
                }
                false
            }
            (State::Probing, _) if grp.trial == Some(h) => match evidence {
                Tunnel::Ok => {
                    self.close_group(g, now, "a trial lease got through");
                    false
                }
                Tunnel::Failed => {
                    self.open_group(g, GroupCause::Tunnel, now, jitter, "its trial lease failed to connect".to_owned());
                    self.absorb(g, h, site, trial);
                    true
                }
                Tunnel::Silent => {
                    self.group_trial_back(h);
                    false
                }
            },
            // Out: failures of leases that went out before are the gateway's too.
            (_, Tunnel::Failed) if grp.state != State::Healthy => {
                self.absorb(g, h, site, trial);
                true
            }
            _ => false,
        }
    }

    /// The group's share of an active probe of member `h`: `true` when it is spent.
    #[inline(never)] // out of line: ungrouped exits' paths keep their size and inlining
    pub(super) fn group_probe(&mut self, h: u32, verdict: Probe, now: f64, jitter: f64) -> bool {
        let g = self.tunnel[h as usize].group();
        let state = self.groups[g as usize - 1].state;
        match verdict {
            Probe::Ok => {
                if state != State::Healthy {
                    self.close_group(g, now, "a probe got through");
                } else {
                    self.groups[g as usize - 1].suspects.clear();
                }
                false
            }
            Probe::Failed => match state {
                State::Healthy => {
                    let opened = self.suspect(g, h, now, jitter);
                    if opened {
                        self.groups[g as usize - 1].absorbed += 1;
                    }
                    opened
                }
                // A probe through a half-open gateway is as good as its trial.
                State::Probing => {
                    self.open_group(g, GroupCause::Tunnel, now, jitter, "a probe failed to connect".to_owned());
                    self.groups[g as usize - 1].absorbed += 1;
                    true
                }
                _ => {
                    self.groups[g as usize - 1].absorbed += 1;
                    true
                }
            },
            Probe::CredentialsRejected => {
                self.credentials_rejected(g, h, true, now);
                self.groups[g as usize - 1].absorbed += 1;
                true
            }
            // The slot presents another address: the slot's own fault, not the gateway's.
            Probe::Drifted => false,
        }
    }

    /// A spent report: the member's trial slots go back and nothing else moves.
    fn absorb(&mut self, g: u32, h: u32, site: u32, trial: Trial) {
        self.groups[g as usize - 1].absorbed += 1;
        self.abandon(h, site, trial);
    }

    /// Fewest distinct failing members that are the gateway's failure: the site incident's
    /// fewest (`incident_min_exits`), at most every member, and never one member alone (a
    /// one-slot gateway is judged by its slot's breaker).
    fn group_threshold(&self, g: u32) -> u32 {
        self.cfg.incident_min_exits.min(self.groups[g as usize - 1].members).max(2)
    }

    /// Member `h` of closed group `g` failed to connect. `true` when that opened the group
    /// (the failure is spent); else the member's breaker takes it as usual.
    fn suspect(&mut self, g: u32, h: u32, now: f64, jitter: f64) -> bool {
        let threshold = self.group_threshold(g);
        let before = matches!(self.tunnel[h as usize].state(), State::Healthy | State::Degraded)
            .then(|| (self.tunnel[h as usize].clone(), self.recent[h as usize]));
        let grp = &mut self.groups[g as usize - 1];
        // A sliding window: failures older than it stay their members' own.
        grp.suspects.retain(|s| now - s.at <= GROUP_WINDOW);
        if let Some(s) = grp.suspects.iter_mut().find(|s| s.h == h) {
            // Still failing: charged as usual, and withdrawn with the rest if the group opens.
            s.at = now;
            return false;
        }
        let distinct = grp.suspects.len() as u32 + 1;
        // While most tunnels fail at once the fault is ours (network, probes): no tunnel is
        // judged, and no gateway either.
        if distinct < threshold || self.global_incident.is_some() {
            grp.suspects.push(Suspect { h, at: now, before });
            return false;
        }
        let within = grp.suspects.iter().fold(0.0, |w: f64, s| w.max(now - s.at));
        let mut suspects = std::mem::take(&mut grp.suspects);
        grp.absorbed += suspects.len() as u64;
        for s in suspects.drain(..) {
            self.withdraw(g, s, now);
        }
        self.groups[g as usize - 1].suspects = suspects;
        let why = format!("{distinct} of its slots failed to connect within {within:.1} s with no success between (threshold {threshold})");
        self.open_group(g, GroupCause::Tunnel, now, jitter, why);
        true
    }

    /// Puts a suspect's breaker and recent outcomes back as they were before its failures,
    /// which were its gateway's.
    fn withdraw(&mut self, g: u32, s: Suspect, now: f64) {
        let Some((mut before, recent)) = s.before else { return };
        let hu = s.h as usize;
        if self.tunnel[hu].group() != g {
            return;
        }
        let (from, was) = (self.tunnel[hu].state(), self.tunnel[hu].failing(&self.cfg));
        before.set_group(g);
        let to = before.state();
        let is = before.failing(&self.cfg);
        self.tunnel[hu] = before;
        self.recent[hu] = recent;
        self.tunnel_failing = (self.tunnel_failing + is as u32) - was as u32;
        self.refresh(s.h);
        if from != to {
            self.tunnel_changed(s.h, Transition { from, to, reason: Reason::GatewayFault }, now);
        }
    }

    /// Member `h` got a 407: the gateway refuses its credentials. Said loudly once per outage
    /// (not once per lease that was out), and again for a trial or a probe (`probe`) that
    /// gets one.
    fn credentials_rejected(&mut self, g: u32, h: u32, probe: bool, now: f64) {
        let grp = &mut self.groups[g as usize - 1];
        grp.credential_rejections += 1;
        let decisive = probe || grp.state == State::Probing && grp.trial == Some(h);
        if grp.state == State::Quarantined && grp.cause == GroupCause::Credentials || grp.state == State::Probing && !decisive {
            return;
        }
        // Retrying sooner cannot fix credentials; a provider may restore them (a topped-up
        // balance, an allow-list) without anyone touching the pool, so a trial still comes,
        // after the longest backoff there is. A probe that gets through or `revive_group`
        // ends it at once.
        let hold = self.cfg.max_ejection;
        let (from, _) = grp.enter(State::Quarantined, now);
        grp.cause = GroupCause::Credentials;
        grp.until = now + hold;
        grp.repeats = grp.repeats.saturating_add(1);
        grp.outages += 1;
        let message = format!(
            "gateway {}: the gateway answered 407 Proxy Authentication Required: its credentials are wrong (configuration, not a bad exit); its {} slots are out for {hold:.0} s, until a probe gets through or it is revived",
            grp.name, grp.members
        );
        self.group_changed(g, EventKind::GatewayCredentialsRejected, from, State::Quarantined, now, message);
    }

    /// Takes the group out (from closed, or back from half-open) for the next backoff.
    fn open_group(&mut self, g: u32, cause: GroupCause, now: f64, jitter: f64, why: String) {
        let cfg = &self.cfg;
        let grp = &mut self.groups[g as usize - 1];
        if grp.state == State::Healthy && grp.repeats > 0 {
            // Slow forgiveness, as for a tunnel: one outage per `forgive_after` of service.
            let forgiven = ((now - grp.since) / cfg.forgive_after).max(0.0) as u32;
            grp.repeats = grp.repeats.saturating_sub(forgiven);
        }
        grp.repeats = grp.repeats.saturating_add(1);
        let hold = cfg.jittered(cfg.backoff(grp.repeats), jitter);
        let (from, _) = grp.enter(State::Quarantined, now);
        grp.cause = cause;
        grp.until = now + hold;
        grp.outages += 1;
        let message = format!(
            "gateway {}: {why}: the gateway is at fault; its {} slots are out for {hold:.1} s, then one trial",
            grp.name, grp.members
        );
        self.group_changed(g, EventKind::GatewayDown, from, State::Quarantined, now, message);
    }

    fn close_group(&mut self, g: u32, now: f64, why: &str) {
        let grp = &mut self.groups[g as usize - 1];
        let (from, held) = grp.enter(State::Healthy, now);
        let message = format!("gateway {}: {why}: its {} slots are back after {held:.1} s out", grp.name, grp.members);
        self.group_changed(g, EventKind::GatewayUp, from, State::Healthy, now, message);
    }

    /// A quarantined group's backoff is over: one trial through any member.
    pub(super) fn group_poll(&mut self, g: u32, now: f64) {
        let grp = &mut self.groups[g as usize - 1];
        if grp.state == State::Quarantined && now >= grp.until {
            grp.enter(State::Probing, now);
            self.readmissions += 1;
        }
    }

    /// Every change of a group's state: its members' admission may have changed, all at once.
    fn group_changed(&mut self, g: u32, kind: EventKind, from: State, to: State, now: f64, message: String) {
        self.readmissions += 1;
        if to == State::Quarantined {
            let at = self.groups[g as usize - 1].until;
            self.schedule(at, g, Some(GROUP_DUE));
        }
        self.events.push_event(Event {
            seq: 0,
            time: now,
            kind,
            exit: None,
            site: None,
            from: Some(from.name()),
            to: Some(to.name()),
            message,
        });
        self.judge_panic(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{Admit, HealthConfig};
    use crate::outcome::ErrorKind;

    const N: u32 = 20;
    /// Jitter draw 0.5: the backoff factor is exactly 1.
    const MID: f64 = 0.5;

    /// A board of `N` exits: 0..10 in gateway "resi" (group 1), 10..20 ungrouped.
    fn board() -> (HealthBoard, u32) {
        let mut b = HealthBoard::new(HealthConfig::default(), N as usize, 0.0);
        let g = b.add_group("resi", 0.0);
        for h in 0..10 {
            b.set_group(h, g);
        }
        (b, g)
    }

    fn connect() -> Report {
        Report::new(None, None, false, Some(ErrorKind::Connect), None).unwrap()
    }

    fn status(s: i64) -> Report {
        Report::new(Some(s), Some(0.2), false, None, None).unwrap()
    }

    fn report(b: &mut HealthBoard, h: u32, r: &Report, now: f64) {
        let trial = b.on_lease(h, 1);
        b.report(h, 1, r, trial, N, now, MID);
    }

    fn members_admitted(b: &HealthBoard) -> usize {
        (0..10).filter(|&h| b.tunnel_admits(h)).count()
    }

    fn kinds(b: &HealthBoard) -> Vec<&'static str> {
        b.events.since(0).map(|e| e.kind.name()).collect()
    }

    #[test]
    fn ids_start_at_one_and_members_are_counted() {
        let (mut b, g) = board();
        assert_eq!(g, 1);
        assert_eq!(b.add_group("other", 0.0), 2);
        assert_eq!(b.group(0).map(Group::name), None, "0 is no group");
        assert_eq!(b.group(g).unwrap().members(), 10);
        b.set_group(3, 2);
        assert_eq!((b.group(1).unwrap().members(), b.group(2).unwrap().members()), (9, 1));
        b.forget(4, 1.0);
        assert_eq!((b.group_of(4), b.group(1).unwrap().members()), (0, 8), "an exit that left is no member");
    }

    #[test]
    fn a_407_takes_every_member_out_at_once_and_no_member_breaker_counts_it() {
        let (mut b, g) = board();
        let before: Vec<Breaker> = (0..10).map(|h| b.tunnel_breaker(h).clone()).collect();
        report(&mut b, 3, &status(407), 1.0);
        assert_eq!(members_admitted(&b), 0);
        for h in 0..10 {
            assert_eq!(b.admits(h, 1, 1.0), Admit::No(State::Quarantined), "member {h}");
            assert_eq!(b.state(h, Some(1)), State::Quarantined);
        }
        assert_eq!(b.lost(5, 1), Some("its gateway is out of service"));
        // No member's breaker moved: not the tunnel, not the (exit, site) one a block weighs on.
        for h in 0..10 {
            assert_eq!(b.tunnel_breaker(h), &before[h as usize], "member {h}'s tunnel");
        }
        assert_eq!(b.site_breaker(3, 1).map(Breaker::state).unwrap_or(State::Healthy), State::Healthy);
        assert!(b.site_breaker(3, 1).is_none_or(|s| s.rates(&b.cfg).is_none() && !s.failing(&b.cfg)));
        // Ungrouped exits serve on.
        assert!((10..N).all(|h| b.tunnel_admits(h)));
        let grp = b.group(g).unwrap();
        assert_eq!((grp.state(), grp.cause(), grp.until()), (State::Quarantined, GroupCause::Credentials, 1.0 + b.cfg.max_ejection));
        // One loud event, naming the gateway, however many leases that were out get a 407 too.
        for h in 0..10 {
            b.report(h, 1, &status(407), Trial::default(), N, 2.0, MID);
        }
        let loud: Vec<_> = b.events.since(0).filter(|e| e.kind == EventKind::GatewayCredentialsRejected).collect();
        assert_eq!(loud.len(), 1);
        assert!(loud[0].message.contains("gateway resi") && loud[0].message.contains("407"), "{}", loud[0].message);
        assert_eq!((loud[0].from, loud[0].to), (Some("healthy"), Some("quarantined")));
        assert_eq!(b.group(g).unwrap().credential_rejections, 11);
    }

    #[test]
    fn a_probe_answered_407_takes_the_gateway_out_and_its_slot_keeps_its_breaker() {
        let (mut b, g) = board();
        let before = b.tunnel_breaker(2).clone();
        b.probe(2, Probe::CredentialsRejected, N, 1.0, MID);
        assert_eq!((b.group(g).unwrap().state(), b.group(g).unwrap().cause()), (State::Quarantined, GroupCause::Credentials));
        assert_eq!(b.tunnel_breaker(2), &before);
        assert_eq!(kinds(&b), ["gateway_credentials_rejected"]);
        // During half-open, a probe's 407 sends it back as a trial's would.
        b.poll(1.0 + b.cfg.max_ejection);
        assert_eq!(b.group(g).unwrap().state(), State::Probing);
        b.probe(2, Probe::CredentialsRejected, N, 700.0, MID);
        assert_eq!(b.group(g).unwrap().state(), State::Quarantined);
        // An exit of its own: a failed probe, as before.
        b.probe(12, Probe::CredentialsRejected, N, 701.0, MID);
        assert_eq!(b.tunnel_breaker(12).rates(&b.cfg), None);
        assert!(!b.tunnel_breaker(12).failing(&b.cfg));
        b.probe(12, Probe::CredentialsRejected, N, 702.0, MID);
        assert!(b.tunnel_breaker(12).failing(&b.cfg), "two failures");
    }

    #[test]
    fn a_407_on_an_ungrouped_exit_is_still_a_block_against_it() {
        let (mut b, _) = board();
        report(&mut b, 12, &status(407), 1.0);
        assert!(b.site_breaker(12, 1).unwrap().failing(&b.cfg), "a block of weight 3");
        assert!(b.events.since(0).all(|e| e.kind != EventKind::GatewayCredentialsRejected));
    }

    #[test]
    fn rejected_credentials_come_back_by_a_probe_by_revive_or_by_a_trial_after_the_ceiling() {
        let (mut b, g) = board();
        report(&mut b, 0, &status(407), 0.0);
        b.probe(7, Probe::Ok, N, 5.0, MID);
        assert_eq!(b.group(g).unwrap().state(), State::Healthy, "a probe got through");
        assert_eq!(members_admitted(&b), 10);

        report(&mut b, 0, &status(407), 10.0);
        b.revive_group(g, 11.0);
        assert_eq!(b.group(g).unwrap().state(), State::Healthy, "revived by hand");

        report(&mut b, 0, &status(407), 20.0);
        b.poll(20.0 + b.cfg.max_ejection - 1.0);
        assert_eq!(members_admitted(&b), 0);
        b.poll(20.0 + b.cfg.max_ejection);
        assert_eq!(b.group(g).unwrap().state(), State::Probing);
        // The trial gets a 407 again: out for the ceiling again, and said again.
        report(&mut b, 4, &status(407), 700.0);
        assert_eq!(b.group(g).unwrap().until(), 700.0 + b.cfg.max_ejection);
        assert_eq!(kinds(&b).iter().filter(|k| **k == "gateway_credentials_rejected").count(), 4);
    }

    #[test]
    fn correlated_connect_failures_of_distinct_members_open_the_group_without_charging_them() {
        let (mut b, g) = board();
        let before: Vec<Breaker> = (0..10).map(|h| b.tunnel_breaker(h).clone()).collect();
        // Member 0 fails twice (degraded by its own breaker, past its hold time), member 1 once...
        report(&mut b, 0, &connect(), 21.0);
        report(&mut b, 0, &connect(), 21.5);
        assert_eq!(b.tunnel_breaker(0).state(), State::Degraded);
        report(&mut b, 1, &connect(), 22.0);
        assert_eq!(b.group(g).unwrap().failing(), 2);
        assert!(members_admitted(&b) == 10);
        // ... and a third distinct member within the window: the gateway's.
        report(&mut b, 2, &connect(), 23.0);
        let grp = b.group(g).unwrap();
        assert_eq!((grp.state(), grp.cause(), grp.until()), (State::Quarantined, GroupCause::Tunnel, 23.0 + b.cfg.base_ejection));
        assert_eq!(members_admitted(&b), 0);
        // Withdrawn: every member's breaker is as before, member 0 healthy again.
        for h in 0..10 {
            let t = b.tunnel_breaker(h);
            assert_eq!((t.state(), t.failing(&b.cfg), t.rates(&b.cfg)), (before[h as usize].state(), false, None), "member {h}");
        }
        assert_eq!(b.tunnel_failing, 0);
        assert_eq!(b.ejected(), 0, "no member holds an ejection slot");
        let down = b.events.since(0).find(|e| e.kind == EventKind::GatewayDown).unwrap();
        assert!(down.message.contains("gateway resi") && down.message.contains("3 of its slots"), "{}", down.message);
        // Leases that were out fail too, twice over: the gateway's, not theirs.
        for h in (0..10).chain(0..10) {
            b.report(h, 1, &connect(), Trial::default(), N, 24.0, MID);
            let t = b.tunnel_breaker(h);
            assert_eq!((t.state(), t.failing(&b.cfg)), (before[h as usize].state(), false), "member {h}");
        }
        assert_eq!(b.tunnel_failing, 0);
        assert_eq!(b.group(g).unwrap().absorbed, 3 + 20);
    }

    #[test]
    fn a_lone_member_failing_is_its_own() {
        let (mut b, g) = board();
        for i in 0..5 {
            report(&mut b, 6, &connect(), i as f64);
        }
        assert_eq!(b.tunnel_breaker(6).state(), State::Quarantined, "its own breaker");
        assert_eq!(b.group(g).unwrap().state(), State::Healthy);
        assert_eq!(members_admitted(&b), 9);
    }

    #[test]
    fn a_success_between_failures_or_the_window_passing_keeps_them_apart() {
        let (mut b, g) = board();
        report(&mut b, 0, &connect(), 1.0);
        report(&mut b, 1, &connect(), 2.0);
        report(&mut b, 5, &status(200), 2.5);
        report(&mut b, 2, &connect(), 3.0);
        assert_eq!(b.group(g).unwrap().state(), State::Healthy, "the gateway worked between");
        // Ungrouped exits' failures are no member's.
        for h in 10..14 {
            report(&mut b, h, &connect(), 4.0);
        }
        assert_eq!((b.group(g).unwrap().state(), b.group(g).unwrap().failing()), (State::Healthy, 1));
        report(&mut b, 4, &connect(), 100.0);
        report(&mut b, 5, &connect(), 105.0);
        report(&mut b, 6, &connect(), 100.0 + GROUP_WINDOW + 0.1);
        assert_eq!(b.group(g).unwrap().state(), State::Healthy, "too far apart");
        assert_eq!(b.group(g).unwrap().failing(), 2, "the window slides: 4's failure left it");
        // The window slides: 5 and 6 are within it, and so is 7.
        report(&mut b, 7, &connect(), 112.0);
        assert_eq!(b.group(g).unwrap().state(), State::Quarantined);
    }

    #[test]
    fn a_member_still_failing_stays_in_the_window_and_all_its_failures_are_withdrawn() {
        let (mut b, g) = board();
        report(&mut b, 0, &connect(), 20.0);
        report(&mut b, 0, &connect(), 28.0);
        assert_eq!(b.tunnel_breaker(0).state(), State::Degraded);
        report(&mut b, 1, &connect(), 32.0);
        report(&mut b, 2, &connect(), 33.0);
        assert_eq!(b.group(g).unwrap().state(), State::Quarantined, "0 failed 5 s before, 1 and 2 since");
        assert_eq!((b.tunnel_breaker(0).state(), b.tunnel_breaker(0).failing(&b.cfg)), (State::Healthy, false));
    }

    /// Opens group 1 of `board()` by three members' connect failures at `now`.
    fn take_down(b: &mut HealthBoard, now: f64) {
        for h in 0..3 {
            report(b, h, &connect(), now);
        }
        assert_eq!(b.group(1).unwrap().state(), State::Quarantined);
    }

    #[test]
    fn one_probe_success_readmits_every_member() {
        let (mut b, g) = board();
        take_down(&mut b, 1.0);
        let seen = b.readmissions;
        b.probe(9, Probe::Ok, N, 2.0, MID);
        assert_eq!(members_admitted(&b), 10);
        assert_eq!(b.group(g).unwrap().state(), State::Healthy);
        assert!(b.readmissions > seen);
        let up = b.events.since(0).find(|e| e.kind == EventKind::GatewayUp).unwrap();
        assert_eq!((up.from, up.to), (Some("quarantined"), Some("healthy")));
        // A failed probe while out is the gateway's, not the member's.
        take_down(&mut b, 100.0);
        b.probe(9, Probe::Failed, N, 101.0, MID);
        assert_eq!(b.tunnel_breaker(9).state(), State::Healthy);
        assert!(!b.tunnel_breaker(9).failing(&b.cfg) && b.tunnel_failing == 0);
    }

    #[test]
    fn backoff_doubles_until_one_trial_gets_through() {
        let (mut b, g) = board();
        let base = b.cfg.base_ejection;
        take_down(&mut b, 0.0);
        b.poll(base - 0.1);
        assert_eq!(b.group(g).unwrap().state(), State::Quarantined);
        let seen = b.readmissions;
        b.poll(base);
        assert_eq!(b.group(g).unwrap().state(), State::Probing);
        assert!(b.readmissions > seen, "half-open readmits");
        // One trial through any member; the others wait for its verdict.
        assert_eq!(members_admitted(&b), 10);
        let trial = b.on_lease(5, 1);
        assert_eq!(members_admitted(&b), 0);
        assert!(b.group(g).unwrap().trial_out());
        // It fails: out for twice as long.
        b.report(5, 1, &connect(), trial, N, base + 1.0, MID);
        assert_eq!(b.group(g).unwrap().until(), base + 1.0 + 2.0 * base);
        assert_eq!(b.tunnel_breaker(5).state(), State::Healthy, "the trial's failure is the gateway's");
        let t2 = base + 1.0 + 2.0 * base;
        b.poll(t2);
        // A trial that ends without a word hands its turn to another member.
        let trial = b.on_lease(2, 1);
        let seen = b.readmissions;
        b.abandon(2, 1, trial);
        assert!(b.readmissions > seen);
        assert_eq!(members_admitted(&b), 10);
        let trial = b.on_lease(8, 1);
        b.report(8, 1, &status(200), trial, N, t2 + 1.0, MID);
        assert_eq!(b.group(g).unwrap().state(), State::Healthy);
        assert_eq!(members_admitted(&b), 10);
        assert_eq!(b.group(g).unwrap().outages, 2);
        // A later outage soon after starts from the doubled backoff (not forgiven yet)...
        take_down(&mut b, t2 + 10.0);
        assert_eq!(b.group(g).unwrap().until(), t2 + 10.0 + 4.0 * base);
        // ... and one after long stable service from the base again.
        b.revive_group(g, t2 + 20.0);
        let later = t2 + 20.0 + 10.0 * b.cfg.forgive_after;
        take_down(&mut b, later);
        assert_eq!(b.group(g).unwrap().until(), later + base);
    }

    #[test]
    fn readmissions_move_on_every_group_transition() {
        let (mut b, g) = board();
        let mut seen = b.readmissions;
        let mut moved = |b: &HealthBoard, what: &str| {
            assert!(b.readmissions > seen, "{what}");
            seen = b.readmissions;
        };
        take_down(&mut b, 0.0);
        moved(&b, "down");
        b.poll(b.cfg.base_ejection);
        moved(&b, "half-open");
        let trial = b.on_lease(0, 1);
        b.report(0, 1, &connect(), trial, N, 31.0, MID);
        moved(&b, "trial failed");
        b.poll(1000.0);
        moved(&b, "half-open again");
        let trial = b.on_lease(0, 1);
        b.report(0, 1, &status(200), trial, N, 1001.0, MID);
        moved(&b, "up");
        report(&mut b, 0, &status(407), 1002.0);
        moved(&b, "credentials");
        b.revive_group(g, 1003.0);
        moved(&b, "revived");
    }

    #[test]
    fn no_group_opens_during_a_global_incident() {
        let (mut b, g) = board();
        // Half the pool's tunnels failing (twice each): the fault is ours.
        for h in 10..N {
            report(&mut b, h, &connect(), 1.0);
            report(&mut b, h, &connect(), 1.0);
        }
        assert!(b.global_incident_open());
        for h in 0..5 {
            report(&mut b, h, &connect(), 2.0);
        }
        assert_eq!(b.group(g).unwrap().state(), State::Healthy);
    }

    #[test]
    fn a_one_slot_gateway_is_judged_by_its_slot() {
        let mut b = HealthBoard::new(HealthConfig::default(), 2, 0.0);
        let g = b.add_group("solo", 0.0);
        b.set_group(0, g);
        for i in 0..5 {
            report(&mut b, 0, &connect(), i as f64);
        }
        assert_eq!(b.group(g).unwrap().state(), State::Healthy);
        assert_eq!(b.tunnel_breaker(0).state(), State::Quarantined);
    }
}
