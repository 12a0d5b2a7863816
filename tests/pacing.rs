//! Pacing per (exit, site) in the pool, driven with a manual clock: a paced site's leases go
//! where there is budget, or wait, and 429s cut the pair's learned rate.

use exitpool::{Choice, Config, Exit, ManualClock, PacingConfig, Pool, Refusal, Report, Strategy, SystemClock};
use std::sync::Arc;
use std::time::Duration;

fn exits(n: usize) -> Vec<Exit> {
    (0..n).map(|i| Exit::new(&format!("e{i}"), &format!("http://user:pw@e{i}.example:8000"), None, 1, vec![]).unwrap()).collect()
}

fn paced(entries: &[(&str, &str)]) -> Config {
    Config { seed: Some(1), cooldown: 0.0, pacing: PacingConfig::parse(entries.iter().copied()).unwrap(), ..Config::default() }
}

fn pool(n: usize, cfg: Config) -> (Pool, ManualClock) {
    let clock = ManualClock::new(100.0);
    (Pool::new(exits(n), cfg, Arc::new(clock.clone())).unwrap(), clock)
}

fn paced_wait(r: Result<exitpool::Grant, Refusal>) -> f64 {
    match r {
        Err(r) => r.paced().unwrap_or_else(|| panic!("not a pacing refusal: {r:?}")),
        Ok(g) => panic!("granted {} where the budget was spent", g.exit.id),
    }
}

#[test]
fn every_strategy_grants_each_exits_burst_then_refuses_until_budget_frees() {
    for strategy in [Strategy::Weighted, Strategy::LeastConn, Strategy::RoundRobin, Strategy::P2c, Strategy::Lru] {
        let (p, clock) = pool(3, Config { strategy, ..paced(&[("shop.example", "6/s")]) });
        let mut per_exit = std::collections::HashMap::new();
        for _ in 0..18 {
            let g = p.try_acquire(0, None, Some("shop.example")).unwrap_or_else(|r| panic!("{strategy:?}: {r:?}"));
            *per_exit.entry(g.exit.id.clone()).or_insert(0) += 1;
            p.release(g.id, &Report::SUCCESS);
        }
        assert_eq!(per_exit.values().copied().collect::<Vec<_>>(), [6, 6, 6], "{strategy:?}");
        let wait = paced_wait(p.try_acquire(0, None, Some("shop.example")));
        assert!((wait - 1.0 / 6.0).abs() < 1e-6, "{strategy:?}: {wait}");
        // Another site is not paced (no "*"), nor is a lease without a site.
        for site in [Some("other.example"), None] {
            for _ in 0..50 {
                let g = p.try_acquire(0, None, site).unwrap();
                p.release(g.id, &Report::SUCCESS);
            }
        }
        clock.advance(wait).unwrap();
        let got: Vec<_> = (0..3).map(|_| p.try_acquire(0, None, Some("shop.example")).unwrap().exit.id.clone()).collect();
        assert_eq!(got.len(), 3, "{strategy:?}: one per exit after 1/6 s");
        paced_wait(p.try_acquire(0, None, Some("shop.example")));
    }
}

#[test]
fn the_default_entry_paces_every_other_site_on_its_own_budget() {
    let (p, _clock) = pool(1, paced(&[("shop.example", "3/s"), ("*", "2/s")]));
    for (site, n) in [("shop.example", 3), ("a.example", 2), ("b.example", 2)] {
        for _ in 0..n {
            p.try_acquire(0, None, Some(site)).unwrap();
        }
        paced_wait(p.try_acquire(0, None, Some(site)));
    }
}

#[test]
fn a_429_halves_the_pairs_rate_and_says_so_without_credentials() {
    let (p, clock) = pool(2, paced(&[("shop.example", "6/s")]));
    let g = p.try_acquire(0, None, Some("shop.example")).unwrap();
    let hit = g.exit.id.clone();
    p.release(g.id, &Report::new(Some(429), None, false, None, Some(2.0)).unwrap());
    let events: Vec<_> = p.events(0).into_iter().filter(|e| e.kind == "pace_decreased").collect();
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!((e.exit_id.as_deref(), e.site.as_deref()), (Some(hit.as_str()), Some("shop.example")));
    assert!(e.message.contains("3.000/s") && e.message.contains("configured 6/s"), "{}", e.message);
    assert!(!e.message.contains("pw"), "{}", e.message);
    let snap = p.snapshot();
    let rec = snap.pacing.iter().find(|r| r.exit_id == hit).unwrap();
    assert_eq!((rec.site.as_str(), rec.rate, rec.tokens), ("shop.example", 3.0, 0));
    assert!(rec.next_free > 1.9, "Retry-After holds the pair: {rec:?}");
    // The health board cools the pair too (rate_limit_cooldown); past both, the pair's burst
    // is the halved rate's.
    clock.advance(3600.0).unwrap();
    let snap = p.snapshot();
    let rec = snap.pacing.iter().find(|r| r.exit_id == hit).unwrap();
    assert_eq!((rec.rate, rec.tokens, rec.next_free), (3.0, 3, 0.0));
    // Successes climb back, to the configured rate and no further.
    for _ in 0..200 {
        let g = p.try_acquire(0, None, Some("shop.example")).unwrap();
        p.release(g.id, &Report::SUCCESS);
        clock.advance(0.5).unwrap();
    }
    let snap = p.snapshot();
    assert!(snap.pacing.iter().all(|r| r.rate == 6.0), "{:?}", snap.pacing);
}

#[test]
fn a_keyed_session_waits_for_its_exits_budget_and_never_moves() {
    let (p, clock) = pool(4, paced(&[("*", "2/s")]));
    let first = p.try_acquire(0, Some("acct"), Some("shop.example")).unwrap();
    assert_eq!(first.choice, Choice::Ring);
    p.release(first.id, &Report::SUCCESS);
    let g = p.try_acquire(0, Some("acct"), Some("shop.example")).unwrap();
    p.release(g.id, &Report::SUCCESS);
    let wait = paced_wait(p.try_acquire(0, Some("acct"), Some("shop.example")));
    assert!((wait - 0.5).abs() < 1e-6, "{wait}");
    // Other exits have budget; keyless leases go there, the key stays.
    let other = p.try_acquire(0, None, Some("shop.example")).unwrap();
    assert_ne!(other.exit.id, first.exit.id);
    clock.advance(wait).unwrap();
    let g = p.try_acquire(0, Some("acct"), Some("shop.example")).unwrap();
    assert_eq!((g.exit.id.as_str(), g.choice), (first.exit.id.as_str(), Choice::Session));
}

#[test]
fn an_acquire_waits_for_budget_within_its_timeout_else_answers_at_once() {
    // A manual clock that does not move: the wait never ends, so a timeout shorter than it
    // is answered at once, with the wait.
    let (p, _clock) = pool(1, paced(&[("*", "1/m")]));
    p.try_acquire(0, None, Some("s")).unwrap();
    let wait = paced_wait(p.acquire(0, None, Some("s"), Duration::from_millis(10)));
    assert!((wait - 60.0).abs() < 1e-6);
    // On the system clock a short wait is waited out.
    let p = Pool::new(exits(1), paced(&[("*", "20/s")]), Arc::new(SystemClock::new())).unwrap();
    for _ in 0..20 {
        p.try_acquire(0, None, Some("s")).unwrap();
    }
    paced_wait(p.try_acquire(0, None, Some("s")));
    let g = p.acquire(0, None, Some("s"), Duration::from_secs(30)).unwrap();
    assert!(g.waited > 0.0);
    let r = exitpool::wait_for_slot::<()>(&p, 0, None, Some("s"), &[], Some(30.0), || Ok(()));
    assert!(r.unwrap().is_ok(), "the sync wait in slices waits out pacing too");
}

#[test]
fn without_pacing_nothing_changes() {
    let (p, _clock) = pool(1, Config { seed: Some(1), ..Config::default() });
    for _ in 0..100 {
        let g = p.try_acquire(0, None, Some("shop.example")).unwrap();
        p.release(g.id, &Report::SUCCESS);
    }
    let g = p.try_acquire(0, None, Some("shop.example")).unwrap();
    p.release(g.id, &Report::new(Some(429), None, false, None, None).unwrap());
    assert!(p.snapshot().pacing.is_empty());
    assert!(p.events(0).iter().all(|e| e.kind != "pace_decreased"));
}
