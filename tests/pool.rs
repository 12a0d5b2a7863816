//! The core pool's rules, driven with a manual clock: no sleeping, no Python.

use exitpool::{Choice, Config, Exit, ManualClock, Pool, Refusal, Report, Strategy};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn exit(id: &str, capacity: i64, tags: &[(&str, &str)]) -> Exit {
    let tags = tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Exit::new(id, &format!("http://user:pw@{id}.example:8000"), None, capacity, tags).unwrap()
}

fn pool(n: usize, cfg: Config) -> (Pool, ManualClock) {
    let clock = ManualClock::new(0.0);
    let exits = (0..n).map(|i| exit(&format!("e{i}"), 1, &[])).collect();
    (Pool::new(exits, cfg, Arc::new(clock.clone())).unwrap(), clock)
}

fn cfg() -> Config {
    Config { seed: Some(1), ..Config::default() }
}

#[test]
fn a_session_sticks_until_its_ttl_then_rebinds_from_the_ring() {
    let (p, clock) = pool(10, Config { session_ttl: 100.0, ..cfg() });
    let g = p.try_acquire(0, Some("acct"), None).unwrap();
    assert_eq!(g.choice, Choice::Ring);
    let first = g.exit.id.clone();
    p.release(g.id, &Report::SUCCESS);
    // Benching everything else, adding exits: a live session never moves.
    for i in 10..20 {
        p.add(exit(&format!("e{i}"), 1, &[])).unwrap();
    }
    clock.advance(99.0).unwrap();
    let g = p.try_acquire(0, Some("acct"), None).unwrap();
    assert_eq!((g.exit.id.as_str(), g.choice), (first.as_str(), Choice::Session));
    p.release(g.id, &Report::SUCCESS);
    // Each lease extended the session: 99 s after the last lease it is still alive.
    clock.advance(99.0).unwrap();
    assert_eq!(p.try_acquire(0, Some("acct"), None).unwrap().choice, Choice::Session);
    clock.advance(100.0).unwrap();
    let g = p.try_acquire(0, Some("acct"), None).unwrap();
    assert_eq!(g.choice, Choice::Ring);
    assert_eq!(g.exit.id, p.assign(0, "acct").unwrap().id);
}

#[test]
fn max_leases_holds_and_expiry_frees_a_slot_once() {
    let (p, clock) = pool(1, Config { max_leases: Some(2), lease_ttl: 10.0, ..cfg() });
    let a = p.try_acquire(0, None, None).unwrap();
    let b = p.try_acquire(0, Some("k"), None).unwrap();
    assert_eq!(p.try_acquire(0, None, None).unwrap_err(), Refusal::Full);
    clock.advance(9.999).unwrap();
    assert_eq!(p.try_acquire(0, None, None).unwrap_err(), Refusal::Full);
    clock.advance(0.001).unwrap();
    let c = p.try_acquire(0, None, None).unwrap();
    let d = p.try_acquire(0, None, None).unwrap();
    // The expired leases' late releases change nothing: the new ones keep their slots.
    assert!(!p.release(a.id, &Report::SUCCESS));
    assert!(!p.release(b.id, &Report::SUCCESS));
    assert_eq!(p.try_acquire(0, None, None).unwrap_err(), Refusal::Full);
    assert!(p.release(c.id, &Report::SUCCESS));
    assert!(!p.release(c.id, &Report::SUCCESS));
    let counts = p.snapshot().counts;
    assert_eq!((counts.acquired, counts.released, counts.expired, counts.ignored_releases), (4, 1, 2, 3));
    assert_eq!(counts.acquired, counts.released + counts.expired + p.snapshot().live_leases as u64);
    p.release(d.id, &Report::SUCCESS);
}

#[test]
fn a_waiting_acquire_gets_the_slot_a_release_frees() {
    let (p, _clock) = pool(1, Config { max_leases: Some(1), ..cfg() });
    let p = Arc::new(p);
    let held = p.try_acquire(0, None, None).unwrap();
    let waiter = {
        let p = p.clone();
        std::thread::spawn(move || p.acquire(0, Some("k"), None, Duration::from_secs(10)))
    };
    std::thread::sleep(Duration::from_millis(50));
    p.release(held.id, &Report::SUCCESS);
    let got = waiter.join().unwrap().unwrap();
    assert!(got.waited > 0.0);
    assert_eq!(p.snapshot().counts.waits, 1);
    assert_eq!(p.acquire(0, None, None, Duration::from_millis(20)).unwrap_err(), Refusal::Full);
}

#[test]
fn bench_drains_and_remove_loses_the_session_loudly() {
    let (p, _clock) = pool(5, cfg());
    let g = p.try_acquire(0, Some("acct"), None).unwrap();
    let home = g.exit.id.clone();
    p.release(g.id, &Report::SUCCESS);
    assert_eq!(p.bench(&home).unwrap(), vec!["acct".to_string()]);
    // Benched: the live session keeps its exit, new keys go elsewhere.
    assert_eq!(p.try_acquire(0, Some("acct"), None).unwrap().exit.id, home);
    for i in 0..200 {
        assert_ne!(p.try_acquire(0, Some(&format!("new-{i}")), None).unwrap().exit.id, home);
    }
    p.unbench(&home).unwrap();
    p.remove(&home).unwrap();
    match p.try_acquire(0, Some("acct"), None) {
        Err(Refusal::SessionExitLost { key, exit_id, .. }) => assert_eq!((key.as_str(), exit_id.as_str()), ("acct", home.as_str())),
        other => panic!("expected SessionExitLost, got {other:?}"),
    }
    assert!(p.end_session("acct"));
    assert_ne!(p.try_acquire(0, Some("acct"), None).unwrap().exit.id, home);
}

#[test]
fn set_capacity_moves_only_that_exits_arcs() {
    let (p, _clock) = pool(20, cfg());
    let keys: Vec<String> = (0..5000).map(|i| format!("k{i}")).collect();
    let before: Vec<String> = keys.iter().map(|k| p.assign(0, k).unwrap().id.clone()).collect();
    p.set_capacity("e3", 4).unwrap();
    for (k, b) in keys.iter().zip(&before) {
        let a = p.assign(0, k).unwrap().id.clone();
        assert!(a == *b || a == "e3", "{k} moved {b} -> {a}");
    }
}

#[test]
fn weighted_order_is_smooth_earliest_deadline_first() {
    let clock = ManualClock::new(0.0);
    let exits = vec![exit("a", 5, &[]), exit("b", 1, &[]), exit("c", 1, &[])];
    let p = Pool::new(exits, cfg(), Arc::new(clock)).unwrap();
    let order: String = (0..7)
        .map(|_| {
            let g = p.try_acquire(0, None, None).unwrap();
            p.release(g.id, &Report::SUCCESS);
            g.exit.id.clone()
        })
        .collect();
    // Half a period in, then every 1/weight: b and c come inside the first round, not at its end.
    assert_eq!(order, "aabcaaa");
}

#[test]
fn lru_cools_per_site() {
    let (p, clock) = pool(2, Config { strategy: Strategy::Lru, cooldown: 8.0, ..cfg() });
    p.try_acquire(0, None, Some("a.example")).unwrap();
    p.try_acquire(0, None, Some("a.example")).unwrap();
    assert_eq!(
        p.try_acquire(0, None, Some("a.example")).unwrap_err(),
        Refusal::Cooling { wait: 8.0, why: "every exit used this site within the lru cooldown" }
    );
    // Another site is not cooling.
    p.try_acquire(0, None, Some("b.example")).unwrap();
    clock.advance(8.0).unwrap();
    p.try_acquire(0, None, Some("a.example")).unwrap();
}

#[test]
fn subsets_lease_only_their_exits_and_share_state() {
    let clock = ManualClock::new(0.0);
    let exits = vec![exit("de1", 1, &[("country", "DE")]), exit("de2", 1, &[("country", "DE")]), exit("us1", 1, &[("country", "US")])];
    let p = Pool::new(exits, Config { max_leases: Some(1), ..cfg() }, Arc::new(clock)).unwrap();
    let de = p.subset(vec![("country".into(), "DE".into())]).unwrap();
    assert_eq!(p.subset(vec![("country".into(), "DE".into())]).unwrap(), de, "one view per filter");
    let a = p.try_acquire(de, None, None).unwrap();
    let b = p.try_acquire(de, None, None).unwrap();
    assert!(a.exit.id.starts_with("de") && b.exit.id.starts_with("de"));
    assert_eq!(p.try_acquire(de, None, None).unwrap_err(), Refusal::Full);
    // The whole pool sees the same slots taken.
    let us = p.try_acquire(0, None, None).unwrap();
    assert_eq!(us.exit.id, "us1");
    // A key bound through the whole pool to a US exit is not silently moved by the subset.
    p.release(us.id, &Report::SUCCESS);
    let mut us_key = None;
    for i in 0..100 {
        let k = format!("k{i}");
        if p.assign(0, &k).unwrap().id == "us1" {
            us_key = Some(k);
            break;
        }
    }
    let k = us_key.unwrap();
    let g = p.try_acquire(0, Some(&k), None).unwrap();
    p.release(g.id, &Report::SUCCESS);
    assert!(matches!(p.try_acquire(de, Some(&k), None), Err(Refusal::SessionExitLost { .. })));
}

#[test]
fn bounded_loads_cap_sessions_per_exit() {
    let (p, _clock) = pool(10, Config { balance_factor: Some(1.25), ..cfg() });
    let n = 2000;
    for i in 0..n {
        let g = p.try_acquire(0, Some(&format!("acct-{i}")), None).unwrap();
        p.release(g.id, &Report::SUCCESS);
    }
    let bound = (1.25 * n as f64 / 10.0).ceil() as u32;
    let snap = p.snapshot();
    assert_eq!(snap.sessions, n);
    for e in &snap.exits {
        assert!(e.sessions <= bound, "{} carries {} > {bound}", e.exit.id, e.sessions);
    }
}

#[test]
fn warm_up_spaces_a_new_pairing() {
    let (p, clock) = pool(3, Config { warmup: Some(Default::default()), ..cfg() });
    let g = p.try_acquire(0, Some("acct"), None).unwrap();
    p.release(g.id, &Report::SUCCESS);
    match p.try_acquire(0, Some("acct"), None) {
        Err(Refusal::WarmingUp { retry_after, .. }) => assert!((retry_after - 60.0).abs() < 1e-9),
        other => panic!("expected WarmingUp, got {other:?}"),
    }
    clock.advance(60.0).unwrap();
    p.try_acquire(0, Some("acct"), None).unwrap();
    // Keyless leases never warm up.
    p.try_acquire(0, None, None).unwrap();
    p.try_acquire(0, None, None).unwrap();
}

#[test]
fn bad_config_is_refused_with_the_value() {
    let clock = Arc::new(ManualClock::new(0.0));
    let bad = |cfg: Config| Pool::new(vec![exit("a", 1, &[])], cfg, clock.clone()).err().unwrap().to_string();
    assert_eq!(bad(Config { session_ttl: -1.0, ..cfg() }), "session_ttl -1 must be a finite number of seconds > 0");
    assert_eq!(bad(Config { lease_ttl: f64::NAN, ..cfg() }), "lease_ttl NaN must be a finite number of seconds > 0");
    assert!(bad(Config { balance_factor: Some(1.0), ..cfg() }).starts_with("balance_factor 1 must be"));
    assert!(bad(Config { max_leases: Some(0), ..cfg() }).starts_with("max_leases 0"));
    // Durations stop at a year: longer is a slip.
    assert_eq!(bad(Config { session_ttl: 1e300, ..cfg() }), "session_ttl 1e300 is over the ceiling of 31536000 seconds (a year)");
    assert!(Pool::new(vec![exit("a", 1, &[])], Config { session_ttl: 31_536_000.0, ..cfg() }, clock.clone()).is_ok());
    let health = exitpool::HealthConfig { min_hold: 31_536_001.0, ..Default::default() };
    assert!(bad(Config { health, ..cfg() }).starts_with("health min_hold 3.1536001e7 is over the ceiling"));
    let ramp = exitpool::WarmupConfig::new(1e308, 60.0, 1e308).unwrap_err().to_string();
    assert!(ramp.starts_with("warmup ramp 1e308 is over the ceiling"), "{ramp}");
    assert_eq!(Pool::new(vec![], cfg(), clock.clone()).err().unwrap().to_string(), "a pool needs at least one exit");
    assert_eq!(Pool::new(vec![exit("a", 1, &[]), exit("a", 1, &[])], cfg(), clock).err().unwrap().to_string(), "duplicate exit id \"a\"");
}

#[test]
fn threads_never_exceed_max_leases_and_counts_balance() {
    let (p, _clock) = pool(4, Config { max_leases: Some(2), ..cfg() });
    let p = Arc::new(p);
    let inside: Arc<Vec<AtomicU32>> = Arc::new((0..4).map(|_| AtomicU32::new(0)).collect());
    let worst = Arc::new(AtomicU32::new(0));
    let handles: Vec<_> = (0..16)
        .map(|t| {
            let (p, inside, worst) = (p.clone(), inside.clone(), worst.clone());
            std::thread::spawn(move || {
                let mut seen: HashMap<String, String> = HashMap::new();
                for i in 0..2000 {
                    let key = (t % 2 == 0).then(|| format!("acct-{}", (t * 7 + i) % 40));
                    let g = p.acquire(0, key.as_deref(), None, Duration::from_secs(10)).unwrap();
                    let slot: usize = g.exit.id[1..].parse().unwrap();
                    let now = inside[slot].fetch_add(1, Ordering::SeqCst) + 1;
                    worst.fetch_max(now, Ordering::SeqCst);
                    if let Some(k) = key {
                        let prev = seen.entry(k).or_insert_with(|| g.exit.id.clone());
                        assert_eq!(*prev, g.exit.id, "a live session moved");
                    }
                    inside[slot].fetch_sub(1, Ordering::SeqCst);
                    p.release(g.id, &Report::SUCCESS);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(worst.load(Ordering::SeqCst) <= 2);
    let snap = p.snapshot();
    assert_eq!(snap.counts.acquired, 32_000);
    assert_eq!(snap.counts.acquired, snap.counts.released + snap.counts.expired + snap.live_leases as u64);
}

/// Every strategy, on the pool's own state and on a shared store: a keyless pick passes over
/// the avoided exits, a keyed one ignores them, and when only avoided exits could serve the
/// refusal is the one the caller can act on.
#[test]
fn a_keyless_pick_passes_over_the_avoided_exits() {
    for strategy in [Strategy::RoundRobin, Strategy::Weighted, Strategy::LeastConn, Strategy::Lru, Strategy::P2c] {
        for shared in [false, true] {
            let clock = ManualClock::new(0.0);
            let exits: Vec<Exit> = (0..4).map(|i| exit(&format!("e{i}"), 1, &[])).collect();
            let cfg = Config { strategy, cooldown: 0.0, ..cfg() };
            let p = if shared {
                let store: Arc<dyn exitpool::Store> = Arc::new(exitpool::MemoryStore::new("avoid", Arc::new(clock.clone())));
                Pool::with_store(exits, cfg, Arc::new(clock.clone()), store).unwrap()
            } else {
                Pool::new(exits, cfg, Arc::new(clock.clone())).unwrap()
            };
            let case = format!("{strategy:?}, shared store: {shared}");
            for _ in 0..40 {
                let g = p.try_acquire_avoiding(0, None, Some("site"), &["e0", "e2", "gone"]).unwrap();
                assert!(g.exit.id == "e1" || g.exit.id == "e3", "{case}: {}", g.exit.id);
                p.release(g.id, &Report::SUCCESS);
            }
            let home = p.assign(0, "acct").unwrap().id.clone();
            let g = p.try_acquire_avoiding(0, Some("acct"), None, &[home.as_str()]).unwrap();
            assert_eq!(g.exit.id, home, "{case}: a keyed lease never moves for `avoid`");
            p.release(g.id, &Report::SUCCESS);
            p.bench("e1").unwrap();
            p.bench("e3").unwrap();
            let r = p.try_acquire_avoiding(0, None, None, &["e0", "e2"]);
            assert_eq!(r.map(|g| g.exit.id.clone()).unwrap_err(), Refusal::OutOfService, "{case}");
            // Nothing avoided: the same pool serves.
            assert!(p.try_acquire(0, None, None).is_ok(), "{case}");
        }
    }
}

#[test]
fn an_unused_release_frees_the_slot_and_counts_no_outcome() {
    let (p, _clock) = pool(1, Config { max_leases: Some(1), ..cfg() });
    let g = p.try_acquire(0, None, Some("site")).unwrap();
    assert!(p.release_unused(g.id));
    assert!(!p.release_unused(g.id), "a second end is ignored");
    let s = p.snapshot();
    assert_eq!((s.live_leases, s.counts.released, s.counts.outcomes), (0, 1, [0; 8]));
    let g = p.try_acquire(0, None, Some("site")).unwrap();
    p.release(g.id, &Report::SUCCESS);
}

#[test]
fn a_lease_is_live_until_released_or_past_its_ttl() {
    let (p, clock) = pool(1, Config { max_leases: Some(1), lease_ttl: 10.0, ..cfg() });
    let g = p.try_acquire(0, None, None).unwrap();
    assert!(p.is_live(g.id));
    clock.advance(9.5).unwrap();
    assert!(p.is_live(g.id));
    clock.advance(0.5).unwrap();
    assert!(!p.is_live(g.id), "expired by the pool's clock, swept or not");
    let h = p.try_acquire(0, None, None).unwrap();
    assert!(p.is_live(h.id) && !p.is_live(g.id));
    p.release(h.id, &Report::SUCCESS);
    assert!(!p.is_live(h.id));
}

#[test]
fn a_429_cools_for_at_most_max_ejection_and_shows_as_cooling() {
    let (p, clock) = pool(1, cfg());
    let g = p.try_acquire(0, None, Some("s")).unwrap();
    p.release(g.id, &Report::new(Some(429), None, false, None, Some(1e12)).unwrap());
    assert_eq!(p.state_name("e0", Some("s")).unwrap(), "cooling");
    assert_eq!(p.state_name("e0", Some("t")).unwrap(), "healthy");
    match p.try_acquire(0, None, Some("s")) {
        Err(Refusal::Cooling { wait, .. }) => assert_eq!(wait, 600.0),
        other => panic!("{other:?}"),
    }
    clock.advance(600.0).unwrap();
    assert_eq!(p.state_name("e0", Some("s")).unwrap(), "healthy");
    let g = p.try_acquire(0, None, Some("s")).unwrap();
    p.release(g.id, &Report::SUCCESS);
}

#[test]
fn capacity_zero_is_refused_wherever_it_enters() {
    let clock = Arc::new(ManualClock::new(0.0));
    let mut zero = exit("e0", 1, &[]);
    zero.capacity = 0;
    let refused = Pool::new(vec![zero.clone()], cfg(), clock.clone()).err().expect("capacity 0 must be refused");
    assert!(refused.to_string().contains("pool.bench"), "{refused}");
    let p = Pool::new(vec![exit("e1", 1, &[])], cfg(), clock).unwrap();
    assert!(p.add(zero).unwrap_err().to_string().contains("capacity 0"));
    assert!(p.set_capacity("e1", 0).unwrap_err().to_string().contains("pool.bench"));
    assert_eq!(p.exit("e1").unwrap().capacity, 1);
    assert!(Exit::new("x", "http://h:1", None, 0, vec![]).is_err());
}

/// The keys of live sessions on `exit_id` (benching lists them), the exit put back after.
fn sessions_on(p: &Pool, exit_id: &str) -> Vec<String> {
    let keys = p.bench(exit_id).unwrap();
    p.unbench(exit_id).unwrap();
    keys
}

#[test]
fn a_flood_of_one_off_keys_keeps_at_most_max_sessions() {
    let (p, clock) = pool(10, Config { max_sessions: Some(100), ..cfg() });
    for i in 0..5_000 {
        let g = p.try_acquire(0, Some(&format!("one-off-{i}")), None).unwrap();
        p.release(g.id, &Report::SUCCESS);
        clock.advance(0.001).unwrap();
        assert!(p.snapshot().sessions <= 100, "{} sessions after {i} keys", p.snapshot().sessions);
    }
    let evicted = p.snapshot().counts.evicted_sessions;
    assert!(evicted >= 4_900, "{evicted}");
    let events: Vec<_> = p.events(0).into_iter().filter(|e| e.kind == "sessions_evicted").collect();
    assert!(!events.is_empty() && events[0].message.contains("max_sessions 100"), "{:?}", events.first());
    // The newest keys kept their sessions; the oldest went.
    let kept: usize = (0..10).map(|i| sessions_on(&p, &format!("e{i}")).len()).sum();
    assert_eq!(kept, p.snapshot().sessions);
    assert!(p.assign(0, "one-off-4999").is_ok());
}

#[test]
fn a_session_holding_a_lease_is_never_evicted_and_the_least_recently_leased_goes_first() {
    let (p, clock) = pool(5, Config { max_sessions: Some(16), ..cfg() });
    // "held" keeps its lease through the flood; "idle" leased later but gave it back.
    let held = p.try_acquire(0, Some("held"), None).unwrap();
    clock.advance(1.0).unwrap();
    let g = p.try_acquire(0, Some("idle"), None).unwrap();
    let idle_exit = g.exit.id.clone();
    p.release(g.id, &Report::SUCCESS);
    clock.advance(1.0).unwrap();
    for i in 0..1_000 {
        let g = p.try_acquire(0, Some(&format!("one-off-{i}")), None).unwrap();
        p.release(g.id, &Report::SUCCESS);
        clock.advance(0.01).unwrap();
    }
    assert!(sessions_on(&p, &held.exit.id).contains(&"held".to_owned()));
    assert!(!sessions_on(&p, &idle_exit).contains(&"idle".to_owned()));
    // The held lease's key still leases its session's exit, as a session.
    let again = p.try_acquire(0, Some("held"), None).unwrap();
    assert_eq!((again.exit.id.as_str(), again.choice), (held.exit.id.as_str(), Choice::Session));
    p.release(again.id, &Report::SUCCESS);
    p.release(held.id, &Report::SUCCESS);
    // Released, it is idle like any other and goes when it is the least recently leased.
    clock.advance(1.0).unwrap();
    for i in 0..100 {
        let g = p.try_acquire(0, Some(&format!("later-{i}")), None).unwrap();
        p.release(g.id, &Report::SUCCESS);
    }
    assert!(!sessions_on(&p, &held.exit.id).contains(&"held".to_owned()));
    assert!(p.snapshot().sessions <= 16);
}

#[test]
fn a_flood_of_one_off_keys_keeps_at_most_max_pairings_and_a_forgotten_pairing_ramps_again() {
    let warmup = exitpool::WarmupConfig::default();
    let (p, clock) = pool(3, Config { warmup: Some(warmup), max_pairings: Some(50), ..cfg() });
    let g = p.try_acquire(0, Some("first"), None).unwrap();
    p.release(g.id, &Report::SUCCESS);
    // Remembered: its next lease waits out the ramp's gap.
    assert!(matches!(p.try_acquire(0, Some("first"), None), Err(Refusal::WarmingUp { .. })));
    for i in 0..500 {
        clock.advance(0.01).unwrap();
        let g = p.try_acquire(0, Some(&format!("one-off-{i}")), None).unwrap();
        p.release(g.id, &Report::SUCCESS);
    }
    assert!(p.snapshot().counts.evicted_pairings >= 450);
    assert!(p.events(0).iter().any(|e| e.kind == "pairings_evicted" && e.message.contains("max_pairings 50")));
    // Forgotten as the least recently used: new again, so its first lease goes at once.
    let g = p.try_acquire(0, Some("first"), None).unwrap();
    p.release(g.id, &Report::SUCCESS);
}

#[test]
fn max_sessions_and_max_pairings_refuse_zero_naming_it() {
    let exits = vec![exit("a", 1, &[])];
    for cfg in [Config { max_sessions: Some(0), ..cfg() }, Config { max_pairings: Some(0), ..cfg() }] {
        let name = if cfg.max_sessions == Some(0) { "max_sessions" } else { "max_pairings" };
        let e = Pool::new(exits.clone(), cfg, Arc::new(ManualClock::new(0.0))).err().unwrap().to_string();
        assert!(e.contains(name) && e.contains("0 is outside 1..=4294967295"), "{e}");
    }
}

#[test]
fn add_remove_bench_and_subset_work_on_a_pool_of_twenty_thousand_exits() {
    let clock = ManualClock::new(0.0);
    let exits = (0..20_000).map(|i| exit(&format!("e{i}"), 1, &[("kind", if i % 2 == 0 { "dc" } else { "isp" })])).collect();
    // Few replicas: the debug build hashes slowly; the structures are the same at any count.
    let p = Pool::new(exits, Config { replicas: 4, ..cfg() }, Arc::new(clock)).unwrap();
    let g = p.try_acquire(0, Some("acct"), None).unwrap();
    p.release(g.id, &Report::SUCCESS);
    assert_eq!(p.bench(&g.exit.id).unwrap(), vec!["acct".to_owned()]);
    p.unbench(&g.exit.id).unwrap();
    p.add(exit("extra", 2, &[("kind", "dc")])).unwrap();
    p.remove("e7").unwrap();
    let dc = p.subset(vec![("kind".into(), "dc".into())]).unwrap();
    assert_eq!(p.members(dc).len(), 10_001);
    assert_eq!(p.members(0).len(), 20_000);
    let g = p.try_acquire(dc, Some("acct-2"), None).unwrap();
    assert_eq!(g.exit.tag("kind"), Some("dc"));
    p.release(g.id, &Report::SUCCESS);
    assert_eq!(p.snapshot().exits.len(), 20_000);
}

/// A snapshot copies its records in batches with the lock let go between them: on a pool of
/// several batches the listing, the matrix and the groups still line up, a limit takes the
/// worst states first, and every form gives the same pool-wide counts.
#[test]
fn a_snapshot_lists_what_its_selection_asks_for_and_always_counts_the_whole_pool() {
    use exitpool::{ErrorKind, Selection};
    let clock = ManualClock::new(0.0);
    let exits: Vec<Exit> = (0..1000)
        .map(|i| exit(&format!("e{i}"), 1, &[("id", &format!("e{i}")), ("half", if i % 2 == 0 { "even" } else { "odd" })]))
        .collect();
    let p = Pool::new(exits, Config { strategy: Strategy::RoundRobin, ..cfg() }, Arc::new(clock.clone())).unwrap();
    for _ in 0..1000 {
        let g = p.try_acquire(0, None, Some("shop")).unwrap();
        p.release(g.id, &Report::SUCCESS);
    }
    let connect = Report::new(None, None, false, Some(ErrorKind::Connect), None).unwrap();
    for bad in ["e700", "e301"] {
        let view = p.subset(vec![("id".into(), bad.into())]).unwrap();
        for _ in 0..5 {
            let g = p.try_acquire(view, None, Some("news")).unwrap();
            p.release(g.id, &connect);
        }
        assert!(p.state(bad, None).unwrap().is_ejected());
    }
    let ids = |s: &exitpool::Snapshot| s.exits.iter().map(|e| e.exit.id.clone()).collect::<Vec<_>>();
    let full = p.snapshot();
    assert_eq!(ids(&full), (0..1000).map(|i| format!("e{i}")).collect::<Vec<_>>());
    for site in &full.sites {
        assert_eq!(site.cells.len(), 1000);
        assert_eq!(site.outcomes.iter().sum::<u64>(), site.cells.iter().flatten().map(|c| c.tally.reports()).sum::<u64>());
    }
    let worst = p.snapshot_of(&Selection { limit: Some(3), by_tag: Some("half".into()), ..Selection::default() });
    assert_eq!(ids(&worst), ["e0", "e301", "e700"], "the two ejected, then the first in pool order");
    assert_eq!((worst.total_exits, worst.pool.states, worst.counts.acquired), (1000, full.pool.states, full.counts.acquired));
    assert!(worst.sites.iter().all(|s| s.cells.len() == 3));
    let groups = worst.groups.unwrap();
    assert_eq!(groups.iter().map(|(v, g)| (v.as_str(), g.exits, g.states[3])).collect::<Vec<_>>(), [("even", 500, 1), ("odd", 500, 1)]);
    assert_eq!(groups.iter().map(|(_, g)| g.leases).sum::<u64>(), full.counts.acquired);
    let odd = p.snapshot_of(&Selection {
        tags: vec![("half".into(), "odd".into())],
        exit_ids: Some(vec!["e301".into(), "e2".into(), "e999".into(), "gone".into()]),
        ..Selection::default()
    });
    assert_eq!(ids(&odd), ["e301", "e999"]);
    let summary = p.snapshot_of(&Selection { limit: Some(0), ..Selection::default() });
    assert!(summary.exits.is_empty() && summary.sites.iter().all(|s| s.cells.is_empty()));
    assert_eq!(summary.sites.iter().map(|s| s.outcomes).collect::<Vec<_>>(), full.sites.iter().map(|s| s.outcomes).collect::<Vec<_>>());
    assert!(Selection::state_named("sick").unwrap_err().to_string().contains("'sick'"));
}

/// p2c weighs the two exits it draws by active leases per unit of capacity, read from the
/// health board's record of each exit: a capacity set after the pool was made counts there.
#[test]
fn p2c_weighs_a_capacity_set_after_the_pool_was_made() {
    let (p, _clock) = pool(2, Config { strategy: Strategy::P2c, ..cfg() });
    p.set_capacity("e1", 4).unwrap();
    // e0: 1 lease of capacity 1; e1: 2 of capacity 4. With two exits p2c compares both.
    let mut held = Vec::new();
    let mut on = |id: &str, n: usize| {
        for _ in 0..n {
            let g = p.try_acquire_avoiding(0, None, None, &[if id == "e0" { "e1" } else { "e0" }]).unwrap();
            assert_eq!(g.exit.id, id);
            held.push(g.id);
        }
    };
    on("e0", 1);
    on("e1", 2);
    for _ in 0..20 {
        let g = p.try_acquire(0, None, None).unwrap();
        assert_eq!(g.exit.id, "e1", "e1 is at 2/4, e0 at 1/1");
        p.release(g.id, &Report::SUCCESS);
    }
}

/// Under random leases, releases, expiries, benching and capacity changes, a keyless p2c pick
/// sees each exit's active leases as the pool holds them: it never goes past `max_leases` and
/// never refuses while an exit in service has room.
#[test]
fn p2c_sees_active_leases_as_the_pool_holds_them_under_random_changes() {
    use rand::rngs::SmallRng;
    use rand::{RngExt, SeedableRng};
    const EXITS: usize = 6;
    const MAX: u32 = 2;
    for seed in 0..10 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let (p, clock) = pool(EXITS, Config { strategy: Strategy::P2c, max_leases: Some(MAX), lease_ttl: 10.0, ..cfg() });
        let mut now = 0.0;
        // Leases held: (lease id, exit index, taken at).
        let mut held: Vec<(exitpool::LeaseId, usize, f64)> = Vec::new();
        let mut benched = [false; EXITS];
        for step in 0..1500 {
            match rng.random_range(0..10) {
                0..=4 => {
                    held.retain(|&(_, _, at)| now < at + 10.0);
                    let active = |e: usize| held.iter().filter(|l| l.1 == e).count() as u32;
                    let room = (0..EXITS).any(|e| !benched[e] && active(e) < MAX);
                    match p.try_acquire(0, None, None) {
                        Ok(g) => {
                            let e: usize = g.exit.id[1..].parse().unwrap();
                            assert!(!benched[e] && active(e) < MAX, "seed {seed} step {step}: e{e} was full or benched");
                            held.push((g.id, e, now));
                        }
                        Err(r) => assert!(!room, "seed {seed} step {step}: refused ({r:?}) with an exit free"),
                    }
                }
                5 | 6 => {
                    if !held.is_empty() {
                        let (id, _, _) = held.swap_remove(rng.random_range(0..held.len()));
                        p.release(id, &Report::SUCCESS);
                    }
                }
                7 => {
                    let dt = rng.random_range(0.0..4.0);
                    clock.advance(dt).unwrap();
                    now += dt;
                }
                8 => {
                    let e = rng.random_range(0..EXITS);
                    p.set_capacity(&format!("e{e}"), rng.random_range(1..5)).unwrap();
                }
                _ => {
                    let e = rng.random_range(0..EXITS);
                    if benched[e] {
                        p.unbench(&format!("e{e}")).unwrap();
                    } else {
                        p.bench(&format!("e{e}")).unwrap();
                    }
                    benched[e] = !benched[e];
                }
            }
        }
    }
}
