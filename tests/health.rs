//! The health scenarios from the articles' failure stories, driven through the pool with
//! synthetic reports on a manual clock.

use exitpool::{Config, ErrorKind, Exit, ManualClock, MemoryStore, Pool, Refusal, Report, Store, Strategy};
use std::sync::Arc;

fn fleet(n: usize, cfg: Config) -> (Pool, ManualClock, Vec<String>) {
    let clock = ManualClock::new(0.0);
    let ids: Vec<String> = (0..n).map(|i| format!("e{i}")).collect();
    let exits = ids.iter().map(|id| Exit::new(id, &format!("http://u:pw@{id}.example:8000"), None, 1, vec![]).unwrap()).collect();
    (Pool::new(exits, cfg, Arc::new(clock.clone())).unwrap(), clock, ids)
}

fn rr() -> Config {
    Config { strategy: Strategy::RoundRobin, seed: Some(3), ..Config::default() }
}

fn status(s: i64) -> Report {
    Report::new(Some(s), Some(0.2), false, None, None).unwrap()
}

fn connect_error() -> Report {
    Report::new(None, None, false, Some(ErrorKind::Connect), None).unwrap()
}

fn ejected(p: &Pool, ids: &[String], site: &str) -> usize {
    ids.iter().filter(|id| p.state(id, Some(site)).unwrap().is_ejected()).count()
}

#[test]
fn bad_exit_vs_bad_site() {
    let (p, clock, ids) = fleet(10, rr());
    let sites = ["a.example", "b.example", "bad.example"];
    for step in 0..600 {
        clock.advance(0.2).unwrap();
        let site = sites[step % 3];
        let g = match p.try_acquire(0, None, Some(site)) {
            Ok(g) => g,
            Err(Refusal::Cooling { .. }) => continue, // the incident spaces bad.example out
            Err(e) => panic!("step {step}: {e:?}"),
        };
        let report = if g.exit.id == "e3" {
            connect_error()
        } else if site == "bad.example" {
            status(403)
        } else {
            status(200)
        };
        p.release(g.id, &report);
    }
    // The bad exit is out everywhere, for its tunnel.
    assert!(p.state("e3", None).unwrap().is_ejected(), "{:?}", p.state("e3", None));
    // No exit was quarantined for the bad site: it was recognised as the site's fault.
    for id in ids.iter().filter(|id| *id != "e3") {
        assert!(!p.state(id, Some("bad.example")).unwrap().is_ejected(), "{id} ejected for the site");
        assert!(!p.state(id, Some("a.example")).unwrap().is_ejected());
    }
    let events = p.events(0);
    let incident = events.iter().find(|e| e.kind == "site_incident_opened").expect("a site incident event");
    assert_eq!(incident.site.as_deref(), Some("bad.example"));
    assert!(incident.message.contains("exits are failing this site at once"), "{}", incident.message);
    assert!(events.iter().any(|e| e.exit_id.as_deref() == Some("e3") && e.to == Some("quarantined") && e.site.is_none()));
}

#[test]
fn incident_without_avalanche() {
    let (p, clock, ids) = fleet(10, rr());
    let cap = 1; // 10% of 10, and one may always go
    let mut worst = 0;
    let mut served_during = 0;
    for step in 0..400 {
        clock.advance(0.25).unwrap();
        let failing = step < 200;
        match p.try_acquire(0, None, Some("shop.example")) {
            Ok(g) => {
                served_during += failing as u32;
                p.release(g.id, &if failing { status(403) } else { status(200) });
            }
            Err(Refusal::Cooling { wait, .. }) => assert!(wait <= 1.0, "slowed, not stopped: {wait}"),
            Err(e) => panic!("step {step}: {e:?}"),
        }
        let now_ejected = ejected(&p, &ids, "shop.example");
        worst = worst.max(now_ejected);
        assert!(now_ejected <= cap, "step {step}: {now_ejected} ejected");
    }
    assert!(served_during > 0);
    let kinds: Vec<&str> = p.events(0).iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&"site_incident_opened") && kinds.contains(&"site_incident_closed"), "{kinds:?}");
    // Service resumed: every exit serves the site again.
    for _ in 0..ids.len() {
        let g = p.try_acquire(0, None, Some("shop.example")).unwrap();
        p.release(g.id, &status(200));
    }
    assert_eq!(ejected(&p, &ids, "shop.example"), 0);
    assert!(worst <= cap);
}

#[test]
fn everything_failing_everywhere_ejects_nothing() {
    let (p, clock, ids) = fleet(10, rr());
    for step in 0..300 {
        clock.advance(0.1).unwrap();
        let site = ["a.example", "b.example"][step % 2];
        if let Ok(g) = p.try_acquire(0, None, Some(site)) {
            p.release(g.id, &connect_error());
        }
        assert_eq!(ids.iter().filter(|id| p.state(id, None).unwrap().is_ejected()).count(), 0, "step {step}");
    }
    assert!(p.events(0).iter().any(|e| e.kind == "global_incident_opened"));
}

#[test]
fn flapping_exit_does_not_bounce_faster_than_hold_times() {
    let cfg = rr();
    let hold = cfg.health.min_hold;
    let shortest_quarantine = cfg.health.base_ejection * (1.0 - cfg.health.jitter);
    let (p, clock, _ids) = fleet(4, cfg);
    let mut flip = false;
    for _ in 0..3000 {
        clock.advance(0.5).unwrap();
        let Ok(g) = p.try_acquire(0, None, Some("s.example")) else { continue };
        let report = if g.exit.id == "e0" {
            flip = !flip;
            if flip {
                status(200)
            } else {
                Report::new(None, None, false, Some(ErrorKind::Timeout), None).unwrap()
            }
        } else {
            status(200)
        };
        p.release(g.id, &report);
    }
    let changes: Vec<_> = p.events(0).into_iter().filter(|e| e.exit_id.as_deref() == Some("e0") && e.to.is_some()).collect();
    assert!(changes.len() >= 2, "{changes:?}");
    let mut quarantines = 0;
    for pair in changes.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let stayed = b.time - a.time;
        match a.to {
            Some("quarantined") => {
                quarantines += 1;
                assert!(stayed >= shortest_quarantine - 1e-9, "left quarantine after {stayed} s: {a:?} -> {b:?}");
            }
            Some("healthy") | Some("degraded") if b.to != Some("quarantined") => {
                assert!(stayed >= hold - 1e-9, "bounced after {stayed} s: {a:?} -> {b:?}");
            }
            _ => {}
        }
    }
    // 25 minutes of flapping: quarantines grow (30, 60, 120, ...) so they stay few.
    assert!(quarantines <= 6, "{quarantines} quarantines");
}

#[test]
fn a_session_on_a_quarantined_exit_is_lost_loudly_and_revive_restores() {
    let (p, clock, _ids) = fleet(5, rr());
    let g = p.try_acquire(0, Some("acct"), Some("s.example")).unwrap();
    let home = g.exit.id.clone();
    p.release(g.id, &connect_error());
    for _ in 0..4 {
        clock.advance(1.0).unwrap();
        let g = p.try_acquire(0, Some("acct"), Some("s.example")).unwrap();
        assert_eq!(g.exit.id, home);
        p.release(g.id, &connect_error());
    }
    match p.try_acquire(0, Some("acct"), Some("s.example")) {
        Err(Refusal::SessionExitLost { why, exit_id, .. }) => {
            assert_eq!(exit_id, home);
            assert_eq!(why, "its exit is quarantined");
        }
        other => panic!("{other:?}"),
    }
    // A new session goes to the next exit clockwise, never to the quarantined one.
    p.end_session("acct");
    let g = p.try_acquire(0, Some("acct"), Some("s.example")).unwrap();
    assert_ne!(g.exit.id, home);
    assert_eq!(g.choice.name(), "ring_next");
    p.release(g.id, &status(200));
    p.revive(&home).unwrap();
    assert_eq!(p.state(&home, None).unwrap().name(), "healthy");
    p.end_session("acct");
    assert_eq!(p.try_acquire(0, Some("acct"), Some("s.example")).unwrap().exit.id, home);
}

#[test]
fn rate_limited_exit_cools_for_that_site_only() {
    let (p, clock, _ids) = fleet(1, rr());
    let g = p.try_acquire(0, None, Some("a.example")).unwrap();
    p.release(g.id, &Report::new(Some(429), None, false, None, Some(12.0)).unwrap());
    assert_eq!(
        p.try_acquire(0, None, Some("a.example")).unwrap_err(),
        Refusal::Cooling { wait: 12.0, why: "every exit that could serve was rate-limited by this site (429)" }
    );
    let g = p.try_acquire(0, None, Some("b.example")).unwrap();
    p.release(g.id, &status(200));
    clock.advance(12.0).unwrap();
    p.try_acquire(0, None, Some("a.example")).unwrap();
}

#[test]
fn recalibrate_sets_capacity_from_identities_and_benches_burned_exits() {
    let (p, _clock, ids) = fleet(3, Config { calibrate: true, ..rr() });
    for i in 0..200 {
        let key = format!("acct-{i}");
        let g = p.try_acquire(0, Some(&key), None).unwrap();
        let burned = g.exit.id == "e1";
        p.release(g.id, &status(if burned { 403 } else { 200 }));
        p.end_session(&key);
    }
    let changes = p.recalibrate().unwrap();
    let by_id = |id: &str| changes.iter().find(|c| c.exit_id == id).cloned();
    assert_eq!(by_id("e1").unwrap().new, 0, "{changes:?}");
    assert_eq!(by_id("e0").unwrap().new, 6);
    assert_eq!(by_id("e2").unwrap().new, 6);
    assert_eq!(p.exit("e0").unwrap().capacity, 6);
    assert!(p.members(0).iter().all(|e| e.id != "e1"));
    let _ = ids;
}

/// The demo's shape of a site incident: `n` exits, the site answering 503 through every one
/// of them from `from` to `to`, then fine again; a client asking for a lease for it every
/// 20 ms, each answered 100 ms later. Returns the seconds from the incident's end to full
/// traffic: the last lease refused for the incident (`Cooling`) after the site came back.
fn time_to_full_traffic(n: usize, from: f64, to: f64) -> f64 {
    let (p, clock, _ids) = fleet(n, rr());
    let site = "shop.example";
    let (tick, latency, end) = (0.02, 0.1, to + 60.0);
    let mut in_flight: std::collections::VecDeque<(f64, u64, bool)> = std::collections::VecDeque::new();
    let mut last_refused = to;
    let mut now = 0.0;
    let mut opened = false;
    while now < end {
        now = clock.advance(tick).unwrap();
        while in_flight.front().is_some_and(|&(at, _, _)| at <= now) {
            let (_, id, failing) = in_flight.pop_front().unwrap();
            p.release(id, &status(if failing { 503 } else { 200 }));
        }
        match p.try_acquire(0, None, Some(site)) {
            Ok(g) => in_flight.push_back((now + latency, g.id, (from..to).contains(&now))),
            Err(Refusal::Cooling { .. }) => {
                opened = true;
                if now >= to {
                    last_refused = now;
                }
            }
            Err(e) => panic!("at {now}: {e:?}"),
        }
    }
    assert!(opened, "the incident was never seen");
    assert!(p.events(0).iter().any(|e| e.kind == "site_incident_closed"), "the incident never closed");
    last_refused - to
}

#[test]
fn traffic_is_back_within_two_seconds_of_a_site_incident_ending() {
    let took = time_to_full_traffic(12, 5.0, 25.0);
    eprintln!("time from the incident's end to full traffic: {took:.2} s");
    assert!(took <= 2.5, "full traffic {took:.2} s after the incident ended");
}

/// Leases granted to a dead exit, keyless and keyed: the cost of discovering that it is dead.
/// Twelve exits, two of them refusing every connection from the start (the demo's world); a
/// keyless client and a client of 30 keyed sessions each ask for a lease every 20 ms, each
/// answered 100 ms later. Every lease a dead exit gets must have gone out before its
/// threshold of refused connections was reported (so what was in flight then is the only
/// cost beyond the threshold), whatever the ejection cap; a keyed session bound to it gets
/// `SessionExitLost` once it is out.
#[test]
fn discovering_a_dead_exit_costs_its_threshold_plus_what_was_in_flight() {
    let (p, clock, _ids) = fleet(12, rr());
    let cfg = rr().health;
    let threshold = (cfg.consecutive / cfg.connect_weight).ceil() as u32;
    let dead = ["e2", "e7"];
    let mut in_flight: std::collections::VecDeque<(f64, u64, String)> = std::collections::VecDeque::new();
    let mut reported = std::collections::HashMap::<String, u32>::new();
    let mut sent = std::collections::HashMap::<(String, bool), u32>::new();
    let mut keys: Vec<String> = (0..30).map(|i| format!("k{i}")).collect();
    let mut lost_on_dead = 0;
    // 20 s: shorter than the shortest first quarantine (24 s), so no trial counts here.
    for step in 0..1000 {
        let now = clock.advance(0.02).unwrap();
        while in_flight.front().is_some_and(|&(at, _, _)| at <= now) {
            let (_, id, exit) = in_flight.pop_front().unwrap();
            let report = if dead.contains(&exit.as_str()) {
                *reported.entry(exit).or_default() += 1;
                connect_error()
            } else {
                status(200)
            };
            p.release(id, &report);
        }
        let slot = step % keys.len();
        for key in [None, Some(keys[slot].clone())] {
            match p.try_acquire(0, key.as_deref(), Some("shop.example")) {
                Ok(g) => {
                    let id = g.exit.id.clone();
                    if dead.contains(&id.as_str()) {
                        let before = reported.get(&id).copied().unwrap_or(0);
                        assert!(before < threshold, "{id} got a lease (key {key:?}) after {before} refused connections were reported");
                        *sent.entry((id.clone(), key.is_some())).or_default() += 1;
                    }
                    in_flight.push_back((now + 0.1, g.id, id));
                }
                Err(Refusal::SessionExitLost { exit_id, .. }) => {
                    assert!(dead.contains(&exit_id.as_str()), "a session lost a live exit {exit_id}");
                    lost_on_dead += 1;
                    // The client starts a new session under a new key.
                    keys[slot] = format!("{}'", keys[slot]);
                }
                Err(e) => panic!("step {step}: {e:?}"),
            }
        }
    }
    for id in dead {
        assert!(p.state(id, None).unwrap().is_ejected(), "{id}: {:?}", p.state(id, None));
        let total: u32 = [false, true].iter().map(|&keyed| sent.get(&(id.to_owned(), keyed)).copied().unwrap_or(0)).sum();
        assert!(total >= threshold, "{id} got {total} leases");
    }
    assert!(sent.keys().any(|(_, keyed)| *keyed), "no keyed session was bound to a dead exit: {sent:?}");
    assert!(lost_on_dead > 0, "no session on a dead exit was told it was lost");
}

/// Refused connections take out every exit that gives them, past the 10% cap; once fewer
/// than half the exits are left in service the pool panics: it says so once, shows it in the
/// snapshot, serves from every exit, and says so again when it is over.
#[test]
fn a_pool_that_lost_most_of_its_exits_panics_and_serves_from_all() {
    let (p, clock, ids) = fleet(10, rr());
    let panics = |p: &Pool| p.events(0).into_iter().filter(|e| e.kind == "panic").map(|e| e.to.unwrap()).collect::<Vec<_>>();
    // Six exits die one after another (each alone failing, so no global incident).
    for k in 0..6 {
        for _ in 0..100 {
            clock.advance(0.02).unwrap();
            let g = p.try_acquire(0, None, Some("shop.example")).unwrap();
            let dead = ids[..=k].contains(&g.exit.id);
            p.release(g.id, &if dead { connect_error() } else { status(200) });
        }
        assert!(p.state(&ids[k], None).unwrap().is_ejected(), "e{k} not out");
        if k < 5 {
            assert!(panics(&p).is_empty(), "panic with {} of 10 out", k + 1);
            assert!(!p.snapshot().pool.panic);
        }
    }
    assert_eq!(panics(&p), ["panic"]);
    assert!(p.snapshot().pool.panic);
    assert!(!p.events(0).iter().any(|e| e.kind == "global_incident_opened"));
    // In panic every exit serves, those held out included.
    let mut served = std::collections::HashSet::new();
    for _ in 0..100 {
        clock.advance(0.02).unwrap();
        let g = p.try_acquire(0, None, Some("shop.example")).unwrap();
        served.insert(g.exit.id.clone());
        p.release(g.id, &if ids[..6].contains(&g.exit.id) { connect_error() } else { status(200) });
    }
    assert_eq!(served.len(), 10, "{served:?}");
    assert!(!p.events(0).iter().any(|e| e.kind == "global_incident_opened"), "a panic's failures made an incident");
    p.revive(&ids[0]).unwrap();
    p.revive(&ids[1]).unwrap();
    assert_eq!(panics(&p), ["panic", "normal"]);
    assert!(!p.snapshot().pool.panic);
    let mut served = std::collections::HashSet::new();
    for _ in 0..100 {
        let g = p.try_acquire(0, None, Some("shop.example")).unwrap();
        served.insert(g.exit.id.clone());
        p.release(g.id, &status(200));
    }
    assert!(!served.iter().any(|id| ids[2..6].contains(id)), "{served:?}");
}

/// Soft evidence leaves a site an exit serving it, then hard evidence takes that one: the site
/// panics (not the pool: half its exits are in service) and its exit out for it serves again.
#[test]
fn a_site_left_without_exits_by_hard_evidence_panics_and_serves_from_those_out_for_it() {
    let (p, _clock, ids) = fleet(2, rr());
    let steps = [("e1", "e0", "shop.example", 2, status(403)), ("e0", "e1", "news.example", 5, connect_error())];
    for (id, other, site, n, report) in steps {
        for _ in 0..n {
            let g = p.try_acquire_avoiding(0, None, Some(site), &[other]).unwrap();
            assert_eq!(g.exit.id, id);
            p.release(g.id, &report);
        }
    }
    assert!(ids.iter().all(|id| p.state(id, Some("shop.example")).unwrap().is_ejected()));
    let snap = p.snapshot();
    assert!(!snap.pool.panic);
    assert!(snap.sites.iter().any(|s| s.site == "shop.example" && s.panic));
    assert!(!snap.sites.iter().any(|s| s.site == "news.example" && s.panic), "news.example has e1 serving it");
    assert_eq!(p.try_acquire(0, None, Some("shop.example")).unwrap().exit.id, "e1");
    assert_eq!(p.try_acquire(0, None, Some("news.example")).unwrap().exit.id, "e1");
}

/// Hard evidence is uncapped fleet-wide too: one worker sees two of ten exits refuse every
/// connection; both are out for it and for the other worker, though the fleet's cap (10%) is
/// one exit. That cap still holds for soft evidence, counting soft ejections only.
#[test]
fn a_fleet_takes_out_every_dead_exit_past_the_cap() {
    let clock = ManualClock::new(0.0);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new("health", Arc::new(clock.clone())));
    let ids: Vec<String> = (0..10).map(|i| format!("e{i}")).collect();
    let exits: Vec<Exit> =
        ids.iter().map(|id| Exit::new(id, &format!("http://u:pw@{id}.example:8000"), None, 1, vec![]).unwrap()).collect();
    // Seeded apart: a worker's seed makes its origin in the store.
    let workers: Vec<Pool> = (0..2)
        .map(|i| Pool::with_store(exits.clone(), Config { seed: Some(i), ..rr() }, Arc::new(clock.clone()), store.clone()).unwrap())
        .collect();
    for dead in ["e1", "e5"] {
        let others: Vec<&str> = ids.iter().map(String::as_str).filter(|id| *id != dead).collect();
        for _ in 0..5 {
            clock.advance(0.1).unwrap();
            let g = workers[0].try_acquire_avoiding(0, None, Some("shop.example"), &others).unwrap();
            workers[0].release(g.id, &connect_error());
        }
    }
    // Soft evidence is still capped, by soft ejections only: one exit may go out for the shop.
    for burned in ["e3", "e7"] {
        let others: Vec<&str> = ids.iter().map(String::as_str).filter(|id| *id != burned).collect();
        for _ in 0..2 {
            clock.advance(0.1).unwrap();
            let g = workers[0].try_acquire_avoiding(0, None, Some("shop.example"), &others).unwrap();
            workers[0].release(g.id, &status(403));
        }
    }
    clock.advance(1.0).unwrap();
    for (w, p) in workers.iter().enumerate() {
        for dead in ["e1", "e5"] {
            assert!(p.state(dead, None).unwrap().is_ejected(), "worker {w}: {dead} is {:?}", p.state(dead, None));
        }
        let shop = |id| p.state(id, Some("shop.example")).unwrap();
        assert_eq!(shop("e3"), exitpool::State::Quarantined, "worker {w}");
        assert!(!shop("e7").is_ejected(), "worker {w}: e7 is {:?}", shop("e7"));
    }
}

/// The ring shrinking is a change panic is judged on too: with two of four exits out (half in
/// service, no panic), benching a third leaves one of three serving; unbenching it ends it.
#[test]
fn benching_an_exit_can_start_a_panic_and_unbenching_it_ends_it() {
    let (p, clock, ids) = fleet(4, rr());
    for dead in &ids[..2] {
        let others: Vec<&str> = ids.iter().map(String::as_str).filter(|id| id != dead).collect();
        for _ in 0..5 {
            clock.advance(0.1).unwrap();
            let g = p.try_acquire_avoiding(0, None, Some("shop.example"), &others).unwrap();
            p.release(g.id, &connect_error());
        }
    }
    let panics = |p: &Pool| p.events(0).into_iter().filter(|e| e.kind == "panic").map(|e| (e.time, e.to.unwrap())).collect::<Vec<_>>();
    assert!(panics(&p).is_empty());
    let at = clock.advance(1.0).unwrap();
    p.bench("e3").unwrap();
    assert_eq!(panics(&p), [(at, "panic")]);
    assert!(p.snapshot().pool.panic);
    let later = clock.advance(1.0).unwrap();
    p.unbench("e3").unwrap();
    assert_eq!(panics(&p), [(at, "panic"), (later, "normal")]);
}

/// Most exits rate-limited and then banned for their pace (429s, then 403 for good), as a
/// site with tight per-IP limits does to a fleet that sends too fast: the exits are at
/// fault, not the site. No site incident opens (it would excuse the banned exits and hold
/// every lease for the site), and the banned exits are judged (ejected, within the cap).
#[test]
fn bans_that_follow_rate_limits_are_no_site_incident() {
    let cfg = Config { health: exitpool::HealthConfig { max_ejected: 0.5, ..Default::default() }, ..rr() };
    let (p, clock, ids) = fleet(8, cfg);
    let site = "tight.example";
    let banned = &ids[..6];
    let mut limited = std::collections::HashMap::<String, u32>::new();
    for step in 0..400 {
        clock.advance(0.05).unwrap();
        let g = match p.try_acquire(0, None, Some(site)) {
            Ok(g) => g,
            Err(Refusal::Cooling { .. }) => continue,
            Err(e) => panic!("step {step}: {e:?}"),
        };
        let n = limited.entry(g.exit.id.clone()).or_default();
        let report = if !banned.contains(&g.exit.id) {
            status(200)
        } else if *n < 3 {
            *n += 1;
            Report::new(Some(429), Some(0.2), false, None, Some(1.0)).unwrap()
        } else {
            status(403)
        };
        p.release(g.id, &report);
    }
    let kinds: Vec<&str> = p.events(0).iter().map(|e| e.kind).collect();
    assert!(!kinds.contains(&"site_incident_opened"), "{kinds:?}");
    assert!(ejected(&p, &ids, site) >= 4, "the banned exits were not judged: {kinds:?}");
    for id in &ids[6..] {
        assert!(!p.state(id, Some(site)).unwrap().is_ejected(), "{id}");
    }
}

/// A site 403s every exit at once with no rate limit before it (it blocks the whole fleet):
/// still the site's fault, a site incident; what excuses a block is a 429 on that exit first.
#[test]
fn blocks_everywhere_without_rate_limits_are_still_a_site_incident() {
    let (p, clock, _ids) = fleet(8, rr());
    for _ in 0..100 {
        clock.advance(0.05).unwrap();
        if let Ok(g) = p.try_acquire(0, None, Some("shop.example")) {
            p.release(g.id, &status(403));
        }
    }
    assert!(p.events(0).iter().any(|e| e.kind == "site_incident_opened"));
}

/// After a site incident, each success lets the next lease go at once (the ramp doubles per
/// answer, not per spacing): full traffic comes back within one `incident_interval` (to see
/// the site is back) plus a round trip per doubling (12 exits: 1, 2, 4, 8, 16), here 0.1 s each.
#[test]
fn full_traffic_within_one_interval_and_a_round_trip_per_doubling() {
    let interval = rr().health.incident_interval;
    let took = time_to_full_traffic(12, 5.0, 25.0);
    assert!(took <= interval + 4.0 * 0.1 + 0.05, "full traffic {took:.2} s after the incident ended");
}

/// A real incident (503 through every exit) in a fleet most of whose exits the site had
/// already banned for their pace (a 429, then 403 for good): once the site is back the banned
/// exits answer 403, which shows the site works for them; the incident closes and the exits
/// that serve get full traffic, rather than the site's leases being held to one a second.
#[test]
fn an_incident_closes_when_the_site_is_back_though_most_exits_are_banned() {
    let cfg = Config { health: exitpool::HealthConfig { max_ejected: 0.1, ..Default::default() }, ..rr() };
    let (p, clock, ids) = fleet(8, cfg);
    let site = "tight.example";
    let banned = &ids[..6];
    let mut limited = std::collections::HashSet::<String>::new();
    let mut refused_after = 0;
    for step in 0..600 {
        let now = clock.advance(0.05).unwrap();
        let g = match p.try_acquire(0, None, Some(site)) {
            Ok(g) => g,
            Err(Refusal::Cooling { .. }) => {
                refused_after += (now > 25.0) as u32;
                continue;
            }
            Err(e) => panic!("step {step}: {e:?}"),
        };
        let report = if (10.0..20.0).contains(&now) {
            status(503)
        } else if !banned.contains(&g.exit.id) {
            status(200)
        } else if limited.insert(g.exit.id.clone()) {
            Report::new(Some(429), Some(0.2), false, None, Some(1.0)).unwrap()
        } else {
            status(403)
        };
        p.release(g.id, &report);
    }
    let kinds: Vec<&str> = p.events(0).iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&"site_incident_opened") && kinds.contains(&"site_incident_closed"), "{kinds:?}");
    assert_eq!(refused_after, 0, "leases still held for the site 5 s after it came back");
}
