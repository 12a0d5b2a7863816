//! State that survives: a new list applied as a difference (`Pool::update`) and the
//! in-process state kept in a file across a restart (`Pool::keep_state`), on manual clocks.

use exitpool::{Config, ErrorKind, Exit, HealthConfig, ManualClock, Member, Pool, Refusal, Report};
use std::path::PathBuf;
use std::sync::Arc;

fn exit(id: &str, password: &str, capacity: i64) -> Exit {
    Exit::new(id, &format!("http://user:{password}@{id}.example:8000"), None, capacity, vec![]).unwrap()
}

fn members(ids: impl IntoIterator<Item = String>) -> Vec<Member> {
    ids.into_iter().map(|id| Member::Exit(exit(&id, "pw", 1))).collect()
}

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("e{i}")).collect()
}

fn cfg() -> Config {
    // No jitter: a backoff is exactly its base, so the tests can say when it ends.
    Config { seed: Some(7), health: HealthConfig { jitter: 0.0, ..HealthConfig::default() }, ..Config::default() }
}

fn pool_at(n: usize, clock: &ManualClock) -> Pool {
    Pool::of(members(ids(n)), cfg(), Arc::new(clock.clone())).unwrap()
}

fn connect_error() -> Report {
    Report::new(None, None, false, Some(ErrorKind::Connect), None).unwrap()
}

/// Burns `key`'s ring exit with connection failures until it is quarantined; its id.
fn burn(p: &Pool, key: &str) -> String {
    let id = p.assign(0, key).unwrap().id.clone();
    for _ in 0..20 {
        if p.state(&id, None).unwrap().is_ejected() {
            return id;
        }
        let g = p.try_acquire(0, Some(key), None).unwrap();
        p.release(g.id, &connect_error());
    }
    panic!("{id} was not quarantined");
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("exitpool-durable-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("state.json")
}

#[test]
fn an_update_keeps_the_state_of_unchanged_and_changed_exits_and_drains_removed_ones() {
    let clock = ManualClock::new(0.0);
    let p = pool_at(10, &clock);
    let burned = burn(&p, "burner");
    // A session on an exit that stays, one on an exit that will go, and a lease out on it.
    let stay_key = (0..).map(|i| format!("k{i}")).find(|k| p.assign(0, k).unwrap().id.as_str() != burned).unwrap();
    let stay = p.try_acquire(0, Some(&stay_key), None).unwrap();
    p.release(stay.id, &Report::SUCCESS);
    let gone = (0..10).map(|i| format!("e{i}")).find(|id| *id != burned && *id != stay.exit.id).unwrap();
    let gone_key = (0..).map(|i| format!("g{i}")).find(|k| p.assign(0, k).unwrap().id.as_str() == gone).unwrap();
    let live = p.try_acquire(0, Some(&gone_key), None).unwrap();
    let released_before = p.snapshot().counts.released;

    // The new list: `gone` removed, the burned exit's password changed, one new exit.
    let mut list: Vec<Member> = ids(10)
        .into_iter()
        .filter(|id| *id != gone)
        .map(|id| Member::Exit(exit(&id, if id == burned { "new-secret" } else { "pw" }, 1)))
        .collect();
    list.push(Member::Exit(exit("e10", "pw", 1)));
    let done = p.update(list).unwrap();
    assert_eq!(done.added, ["e10"]);
    assert_eq!(done.removed, std::slice::from_ref(&gone));
    assert_eq!(done.changed, std::slice::from_ref(&burned));
    assert_eq!(done.unchanged, 8);

    // The changed exit kept its state (still out) and has the new URL.
    assert!(p.state(&burned, None).unwrap().is_ejected());
    assert!(p.exit(&burned).unwrap().proxy.password() == Some("new-secret"));
    // The unchanged exit kept its session.
    let again = p.try_acquire(0, Some(&stay_key), None).unwrap();
    assert_eq!((again.exit.id.as_str(), again.choice), (stay.exit.id.as_str(), exitpool::Choice::Session));
    p.release(again.id, &Report::SUCCESS);
    // The removed exit: its live lease finishes and counts; its session ends visibly.
    assert!(p.release(live.id, &Report::SUCCESS));
    assert_eq!(p.snapshot().counts.released, released_before + 2);
    match p.try_acquire(0, Some(&gone_key), None) {
        Err(Refusal::SessionExitLost { exit_id, .. }) => assert_eq!(exit_id, gone),
        other => panic!("{other:?}"),
    }
    assert!(p.members(0).iter().all(|e| e.id != gone));
    let events = p.events(0);
    assert_eq!(events.iter().filter(|e| e.kind == "exits_updated").count(), 1);
}

#[test]
fn a_bad_update_changes_nothing() {
    let clock = ManualClock::new(0.0);
    let p = pool_at(5, &clock);
    let before: Vec<String> = p.members(0).iter().map(|e| e.id.clone()).collect();
    // An id twice, after a valid new exit and a removal: refused as a whole.
    let list = vec![Member::Exit(exit("e0", "pw", 1)), Member::Exit(exit("new", "pw", 1)), Member::Exit(exit("e0", "pw", 2))];
    assert!(matches!(p.update(list), Err(exitpool::Error::DuplicateExit(id)) if id == "e0"));
    assert!(p.update(vec![]).is_err());
    let after: Vec<String> = p.members(0).iter().map(|e| e.id.clone()).collect();
    assert_eq!(before, after);
    assert!(p.events(0).iter().all(|e| e.kind != "exits_updated"));
}

#[test]
fn a_reload_of_1000_exits_moves_only_the_removed_exits_keys() {
    let clock = ManualClock::new(0.0);
    let p = pool_at(1000, &clock);
    let keys: Vec<String> = (0..20_000).map(|i| format!("account-{i}")).collect();
    let before: Vec<String> = keys.iter().map(|k| p.assign(0, k).unwrap().id.clone()).collect();
    let removed: Vec<String> = (0..1000).step_by(37).map(|i| format!("e{i}")).collect();
    let done = p.update(members(ids(1000).into_iter().filter(|id| !removed.contains(id)))).unwrap();
    assert_eq!(done.removed.len(), removed.len());
    assert_eq!(done.unchanged, 1000 - removed.len());
    let mut moved = 0;
    for (k, was) in keys.iter().zip(&before) {
        let now = p.assign(0, k).unwrap().id.clone();
        if removed.contains(was) {
            moved += 1;
            assert_ne!(&now, was);
        } else {
            assert_eq!(&now, was, "key {k} moved off {was}, which stayed");
        }
    }
    assert!(moved > 0);
}

#[test]
fn a_restart_mid_backoff_keeps_a_burned_exit_out_for_the_rest_of_it_on_the_new_clock() {
    let path = temp("backoff");
    // The first pool: an exit burned at t=100 (backoff 30 s: out until 130), saved at 110.
    let c1 = ManualClock::new(100.0);
    let p1 = Arc::new(pool_at(10, &c1));
    p1.keep_state(path.clone(), 30.0).unwrap();
    let burned = burn(&p1, "burner");
    c1.advance(10.0).unwrap();
    p1.close().unwrap();
    drop(p1);

    // The second pool starts at 115 by the wall (a manual clock's readings are Unix time):
    // 5 s passed while down, so 15 s of the backoff remain.
    let c2 = ManualClock::new(115.0);
    let p2 = Arc::new(pool_at(10, &c2));
    p2.keep_state(path.clone(), 30.0).unwrap();
    assert_eq!(p2.state(&burned, None).unwrap().name(), "quarantined");
    assert!(p2.events(0).iter().any(|e| e.kind == "state_resumed"), "{:?}", p2.events(0));
    c2.advance(14.9).unwrap();
    assert_eq!(p2.state(&burned, None).unwrap().name(), "quarantined");
    c2.advance(0.2).unwrap();
    assert_eq!(p2.state(&burned, None).unwrap().name(), "probing");
    p2.close().unwrap();
}

#[test]
fn a_backoff_that_ended_while_down_ends_and_the_repeat_count_carries_over() {
    let path = temp("repeats");
    let c1 = ManualClock::new(0.0);
    let p1 = Arc::new(pool_at(10, &c1));
    p1.keep_state(path.clone(), 30.0).unwrap();
    let burned = burn(&p1, "burner");
    p1.close().unwrap();
    drop(p1);
    let saved = std::fs::read_to_string(&path).unwrap();
    assert!(!saved.contains("pw") && !saved.contains("example"), "{saved}");
    // A minute later by the wall: the 30 s backoff is over; the exit is on trial.
    let c2 = ManualClock::new(60.0);
    let p2 = Arc::new(pool_at(10, &c2));
    p2.keep_state(path.clone(), 30.0).unwrap();
    assert_eq!(p2.state(&burned, None).unwrap().name(), "probing");
    // Its trial fails: the second ejection's backoff is the doubled one (60 s), not the first's.
    let g = p2.try_acquire(0, Some("burner"), None).unwrap();
    p2.release(g.id, &connect_error());
    assert_eq!(p2.state(&burned, None).unwrap().name(), "quarantined");
    c2.advance(59.0).unwrap();
    assert_eq!(p2.state(&burned, None).unwrap().name(), "quarantined");
    c2.advance(1.5).unwrap();
    assert_eq!(p2.state(&burned, None).unwrap().name(), "probing");
}

#[test]
fn sessions_and_cooldowns_resume_with_the_time_left() {
    let path = temp("sessions");
    let c1 = ManualClock::new(0.0);
    let p1 = Arc::new(Pool::of(members(ids(10)), Config { session_ttl: 100.0, ..cfg() }, Arc::new(c1.clone())).unwrap());
    p1.keep_state(path.clone(), 30.0).unwrap();
    let g = p1.try_acquire(0, Some("acct"), Some("shop")).unwrap();
    let bound = g.exit.id.clone();
    p1.release(g.id, &Report::new(Some(429), None, false, None, Some(50.0)).unwrap());
    p1.close().unwrap();
    drop(p1);
    let c2 = ManualClock::new(40.0);
    // A different list order: the session still finds its exit by id.
    let mut reversed = ids(10);
    reversed.reverse();
    let p2 = Arc::new(Pool::of(members(reversed), Config { session_ttl: 100.0, ..cfg() }, Arc::new(c2.clone())).unwrap());
    p2.keep_state(path.clone(), 30.0).unwrap();
    assert_eq!(p2.assign(0, "acct").unwrap().id, bound);
    // The cooldown had 50 s left at the save, 40 s passed: 10 s to go.
    assert!(matches!(p2.try_acquire(0, Some("acct"), Some("shop")), Err(Refusal::Cooling { wait, .. }) if (wait - 10.0).abs() < 1e-6));
    c2.advance(10.5).unwrap();
    let g = p2.try_acquire(0, Some("acct"), Some("shop")).unwrap();
    assert_eq!((g.exit.id.as_str(), g.choice), (bound.as_str(), exitpool::Choice::Session));
}

#[test]
fn a_missing_corrupt_or_foreign_file_is_an_event_and_a_clean_start() {
    for (name, body) in [("missing", None), ("corrupt", Some("{\"format\": \"exitpool-state\", ")), ("foreign", Some("{\"format\":\"exitpool-state\",\"version\":1,\"saved_at\":0,\"exits\":[\"other\"],\"health\":[{\"exit\":\"other\",\"state\":\"dead\"}]}")), ("future", Some("{\"format\":\"exitpool-state\",\"version\":2}"))] {
        let path = temp(name);
        if let Some(body) = body {
            std::fs::write(&path, body).unwrap();
        }
        let c = ManualClock::new(0.0);
        let p = Arc::new(pool_at(3, &c));
        p.keep_state(path.clone(), 30.0).unwrap();
        let events = p.events(0);
        let kind = if name == "missing" { "state_new" } else { "state_discarded" };
        assert!(events.iter().any(|e| e.kind == kind), "{name}: {events:?}");
        assert!(ids(3).iter().all(|id| p.state(id, None).unwrap().name() == "healthy"));
        // The next save replaces the bad file with a good one.
        p.close().unwrap();
        assert!(std::fs::read_to_string(&path).unwrap().contains("\"version\":1"));
    }
}

#[test]
fn a_capacity_set_since_the_list_is_kept_by_a_reload_that_does_not_change_it() {
    let clock = ManualClock::new(0.0);
    let p = pool_at(4, &clock);
    // Measured or set by hand since the list was read: state, which a reload keeps.
    p.set_capacity("e0", 3).unwrap();
    assert_eq!(p.update(members(ids(4))).unwrap().unchanged, 4);
    assert_eq!(p.exit("e0").unwrap().capacity, 3);
    // A list that changes the capacity changes it.
    let mut list = members(ids(4));
    list[0] = Member::Exit(exit("e0", "pw", 2));
    assert_eq!(p.update(list).unwrap().changed, ["e0"]);
    assert_eq!(p.exit("e0").unwrap().capacity, 2);
}

#[test]
fn a_learned_pace_and_a_spent_budget_survive_a_restart() {
    let path = temp("pacing");
    let paced = || Config {
        // No 429 cooldown from health: what holds the pair off here is its pacing budget alone.
        health: HealthConfig { jitter: 0.0, rate_limit_cooldown: 0.0, ..HealthConfig::default() },
        pacing: exitpool::PacingConfig::parse([("shop", "6/s")]).unwrap(),
        ..cfg()
    };
    let refused = |r: Result<exitpool::Grant, Refusal>| match r {
        Err(r) => r.paced().unwrap_or_else(|| panic!("not a pacing refusal: {r:?}")),
        Ok(g) => panic!("granted {} with the budget spent", g.exit.id),
    };
    let c1 = ManualClock::new(0.0);
    let p1 = Arc::new(Pool::of(members(ids(1)), paced(), Arc::new(c1.clone())).unwrap());
    p1.keep_state(path.clone(), 30.0).unwrap();
    // A 429 halves the pair's rate to 3/s; then its budget (3 at once) is spent.
    let g = p1.try_acquire(0, None, Some("shop")).unwrap();
    p1.release(g.id, &Report::new(Some(429), None, false, None, None).unwrap());
    while let Ok(g) = p1.try_acquire(0, None, Some("shop")) {
        p1.release(g.id, &Report::SUCCESS);
    }
    let wait = refused(p1.try_acquire(0, None, Some("shop")));
    let rate = p1.snapshot().pacing[0].rate;
    assert!(rate < 6.0, "{rate}");
    p1.close().unwrap();
    drop(p1);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"pacing\":[{\"exit\":\"e0\",\"site\":\"shop\""), "{text}");

    // A restart at once: the rate is still the learned one and the budget still spent.
    let c2 = ManualClock::new(0.0);
    let p2 = Arc::new(Pool::of(members(ids(1)), paced(), Arc::new(c2.clone())).unwrap());
    p2.keep_state(path.clone(), 30.0).unwrap();
    assert!((p2.snapshot().pacing[0].rate - rate).abs() < 1e-9);
    assert!((refused(p2.try_acquire(0, None, Some("shop"))) - wait).abs() < 1e-6);
    c2.advance(wait).unwrap();
    p2.try_acquire(0, None, Some("shop")).unwrap();
}
