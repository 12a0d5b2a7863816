//! Pools sharing one store, as workers of a fleet do: a shared memory store and a manual clock
//! (the Redis store's part is tested in Python with real processes).

use exitpool::{Choice, Config, Exit, ManualClock, MemoryStore, Pool, Refusal, Report, Store};
use std::sync::Arc;

fn exits(order: &[usize]) -> Vec<Exit> {
    order.iter().map(|i| Exit::new(&format!("e{i}"), &format!("http://u:pw@e{i}.example:8000"), None, 1, vec![]).unwrap()).collect()
}

fn fleet(n: usize, cfg: Config) -> (Vec<Pool>, ManualClock) {
    let clock = ManualClock::new(0.0);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new("fleet", Arc::new(clock.clone())));
    let forward: Vec<usize> = (0..6).collect();
    let backward: Vec<usize> = (0..6).rev().collect();
    let pools = (0..n)
        .map(|i| {
            Pool::with_store(
                exits(if i % 2 == 0 { &forward } else { &backward }),
                Config { seed: Some(i as u64), ..cfg.clone() },
                Arc::new(clock.clone()),
                store.clone(),
            )
            .unwrap()
        })
        .collect();
    (pools, clock)
}

#[test]
fn the_ceiling_holds_across_workers() {
    let (pools, _) = fleet(3, Config { max_leases: Some(2), ..Config::default() });
    let mut grants = Vec::new();
    for _ in 0..4 {
        for p in &pools {
            if let Ok(g) = p.try_acquire(0, None, None) {
                grants.push((g.exit.id.clone(), g.id));
            }
        }
    }
    assert_eq!(grants.len(), 12, "6 exits x 2 slots, whichever worker asks");
    for p in &pools {
        assert!(matches!(p.try_acquire(0, None, None), Err(Refusal::Full)));
    }
}

#[test]
fn a_session_agrees_across_workers_with_exits_in_another_order() {
    let (pools, _) = fleet(2, Config::default());
    let a = pools[0].try_acquire(0, Some("acct-1"), None).unwrap();
    let b = pools[1].try_acquire(0, Some("acct-1"), None).unwrap();
    assert_eq!(a.exit.id, b.exit.id);
    assert_eq!(b.choice, Choice::Session);
    assert_eq!(pools[1].assign(0, "acct-1").unwrap().id, a.exit.id);
    // The first worker ends the session; the second sees it ended.
    assert!(pools[0].end_session("acct-1"));
    pools[1].release(b.id, &Report::new(None, None, false, None, None).unwrap());
}

#[test]
fn a_quarantine_reached_by_one_worker_reaches_the_others() {
    let (pools, clock) = fleet(2, Config { max_leases: None, ..Config::default() });
    let bad = "e3";
    // Worker 0 sees e3 fail its tunnel five times (the consecutive-failure threshold).
    let mut failures = 0;
    while failures < 5 {
        let g = pools[0].try_acquire(0, None, None).unwrap();
        let report = if g.exit.id == bad {
            failures += 1;
            Report::new(None, None, false, Some(exitpool::ErrorKind::Connect), None).unwrap()
        } else {
            Report::new(None, None, false, None, None).unwrap()
        };
        pools[0].release(g.id, &report);
    }
    assert_eq!(pools[0].state(bad, None).unwrap().name(), "quarantined");
    clock.advance(1.0).unwrap();
    assert_eq!(pools[1].state(bad, None).unwrap().name(), "quarantined", "worker 1 never leased e3 but learns of it");
    let ev = pools[1].events(0);
    assert!(ev.iter().any(|e| e.message.contains("another worker")), "{ev:?}");
}

#[test]
fn a_site_incident_seen_by_one_worker_spares_the_exits_of_every_worker() {
    let (pools, clock) = fleet(2, Config::default());
    let site = Some("shop.example");
    let r503 = Report::new(Some(503), None, false, None, None).unwrap();
    // Worker 0: the site answers 503 through every exit: an incident, the site's fault.
    for _ in 0..40 {
        let g = pools[0].try_acquire(0, None, site).unwrap_or_else(|r| panic!("{r:?}"));
        pools[0].release(g.id, &r503);
        if !pools[0].snapshot().pool.incidents.is_empty() {
            break;
        }
        clock.advance(0.01).unwrap();
    }
    assert_eq!(pools[0].snapshot().pool.incidents, vec!["shop.example".to_string()]);
    clock.advance(1.0).unwrap();
    // Worker 1 learns of it; blocks it sees for that site now judge no exit.
    assert_eq!(pools[1].snapshot().pool.incidents, vec!["shop.example".to_string()], "{:?}", pools[1].events(0));
    let r403 = Report::new(Some(403), None, false, None, None).unwrap();
    for _ in 0..10 {
        clock.advance(10.0).unwrap(); // past the incident's spacing of leases
        let g = pools[1].try_acquire(0, None, site).unwrap_or_else(|r| panic!("{r:?}"));
        pools[1].release(g.id, &r403);
    }
    let out: Vec<_> = pools[1]
        .snapshot()
        .exits
        .iter()
        .filter(|e| pools[1].state(&e.exit.id, site).unwrap().is_ejected())
        .map(|e| e.exit.id.clone())
        .collect();
    assert!(out.is_empty(), "no exit is punished during the fleet's incident: {out:?}");
}
