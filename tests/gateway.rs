//! Gateways in a pool, driven with a manual clock whose readings are Unix time: expansion,
//! rotation, sessions that end with their token, probes per token. No sleeping, no Python.

use exitpool::{Choice, Clock, Config, Exit, Gateway, GatewaySpec, ManualClock, Member, Pool, Refusal, Report};
use std::sync::Arc;

const T0: f64 = 1.7e9;

fn gateway(id: &str, slots: i64, lifetime: Option<f64>, rebind: bool) -> Gateway {
    let mut s = GatewaySpec::new(id, "http://customer-c1:s3cret@gw.provider.example:7777", slots);
    s.username = Some("{user}-session-{session}".into());
    s.lifetime = lifetime;
    s.rebind = rebind;
    Gateway::new(s).unwrap()
}

fn pool(members: Vec<Member>) -> (Pool, ManualClock) {
    let clock = ManualClock::new(T0);
    let cfg = Config { seed: Some(1), session_ttl: 1e6, ..Config::default() };
    (Pool::of(members, cfg, Arc::new(clock.clone())).unwrap(), clock)
}

fn token_of(e: &Exit) -> String {
    e.proxy.username().unwrap().rsplit('-').next().unwrap().to_owned()
}

#[test]
fn a_gateway_expands_into_slots_beside_plain_exits() {
    let dc = Exit::new("dc-1", "http://10.0.0.7:3128", Some("203.0.113.7"), 1, vec![]).unwrap();
    let (p, _) = pool(vec![gateway("resi", 3, Some(600.0), false).into(), dc.clone().into()]);
    let ids: Vec<String> = p.members(0).iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids, ["resi-0", "resi-1", "resi-2", "dc-1"]);
    let tokens: Vec<String> = p.members(0)[..3].iter().map(|e| token_of(e)).collect();
    assert!(tokens[0] != tokens[1] && tokens[1] != tokens[2], "{tokens:?}");
    // An id given twice across exits and slots is refused.
    let clash = Exit::new("resi-2", "http://10.0.0.8:3128", None, 1, vec![]).unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let e = Pool::of(vec![gateway("resi", 3, None, false).into(), clash.into()], Config::default(), clock).err().unwrap();
    assert_eq!(e.to_string(), "duplicate exit id \"resi-2\"");
}

#[test]
fn two_pools_on_the_same_gateway_agree_on_every_token() {
    let g = gateway("resi", 50, Some(600.0), false);
    let (a, ca) = pool(vec![g.clone().into()]);
    let (b, cb) = pool(vec![g.clone().into()]);
    for _ in 0..5 {
        let ta: Vec<String> = a.members(0).iter().map(|e| e.proxy.as_str().to_owned()).collect();
        let tb: Vec<String> = b.members(0).iter().map(|e| e.proxy.as_str().to_owned()).collect();
        assert_eq!(ta, tb);
        // ...and both hold the token of the time it is now.
        let now = ca.now();
        assert!(a.members(0).iter().enumerate().all(|(s, e)| token_of(e) == g.token(s as u32, g.generation(s as u32, now))));
        ca.advance(317.0).unwrap();
        cb.advance(317.0).unwrap();
    }
}

#[test]
fn a_slot_rotates_at_its_time_and_its_session_ends_visibly() {
    let g = gateway("resi", 4, Some(600.0), false);
    let (p, clock) = pool(vec![g.clone().into()]);
    let lease = p.try_acquire(0, Some("acct"), None).unwrap();
    let (slot_id, before) = (lease.exit.id.clone(), lease.exit.proxy.as_str().to_owned());
    let slot: u32 = slot_id.rsplit('-').next().unwrap().parse().unwrap();
    p.release(lease.id, &Report::SUCCESS);
    let generation = g.generation(slot, T0);
    let ends = g.rotates_at(slot, generation);
    clock.advance(ends - T0 - 0.5).unwrap();
    let lease = p.try_acquire(0, Some("acct"), None).unwrap();
    assert_eq!((lease.exit.proxy.as_str(), lease.choice), (before.as_str(), Choice::Session));
    p.release(lease.id, &Report::SUCCESS);
    clock.advance(0.5).unwrap();
    match p.try_acquire(0, Some("acct"), None) {
        Err(Refusal::SessionExitLost { key, exit_id, why }) => {
            assert_eq!((key.as_str(), exit_id.as_str()), ("acct", slot_id.as_str()));
            assert_eq!(why, "its gateway session expired (token rotated)");
        }
        other => panic!("{other:?}"),
    }
    // The session ended with its token: the next lease binds afresh, same slot, new token.
    let lease = p.try_acquire(0, Some("acct"), None).unwrap();
    assert_eq!((lease.exit.id.as_str(), lease.choice), (slot_id.as_str(), Choice::Ring));
    assert_ne!(lease.exit.proxy.as_str(), before);
    assert_eq!(token_of(&lease.exit), g.token(slot, generation + 1));
    p.release(lease.id, &Report::SUCCESS);
    let events = p.events(0);
    let rotated = events.iter().find(|e| e.kind == "token_rotated").unwrap();
    assert_eq!(rotated.exit_id.as_deref(), Some(slot_id.as_str()));
    assert!(!rotated.message.contains(&g.token(slot, generation + 1)) && !rotated.message.contains("s3cret"));
    assert!(events.iter().any(|e| e.kind == "session_lost" && e.message.contains("token rotated")));
}

#[test]
fn with_rebind_the_session_moves_to_the_new_token_silently() {
    let (p, clock) = pool(vec![gateway("resi", 2, Some(60.0), true).into()]);
    let lease = p.try_acquire(0, Some("acct"), None).unwrap();
    let (slot, before) = (lease.exit.id.clone(), lease.exit.proxy.as_str().to_owned());
    p.release(lease.id, &Report::SUCCESS);
    clock.advance(60.0).unwrap();
    let lease = p.try_acquire(0, Some("acct"), None).unwrap();
    assert_eq!((lease.exit.id.as_str(), lease.choice), (slot.as_str(), Choice::Session));
    assert_ne!(lease.exit.proxy.as_str(), before);
    p.release(lease.id, &Report::SUCCESS);
}

#[test]
fn tokens_that_never_expire_never_rotate() {
    let (p, clock) = pool(vec![gateway("isp", 2, None, false).into()]);
    let lease = p.try_acquire(0, Some("acct"), None).unwrap();
    let before = lease.exit.proxy.as_str().to_owned();
    p.release(lease.id, &Report::SUCCESS);
    clock.advance(5e5).unwrap();
    let lease = p.try_acquire(0, Some("acct"), None).unwrap();
    assert_eq!((lease.exit.proxy.as_str(), lease.choice), (before.as_str(), Choice::Session));
}

#[test]
fn probes_learn_a_slots_ip_per_token_and_catch_broken_stickiness() {
    let g = gateway("resi", 1, Some(600.0), false);
    let (p, clock) = pool(vec![g.clone().into()]);
    let ip = |s: &str| Some(s.parse().unwrap());
    // The first IP seen is learned; the same one again is fine.
    assert!(!p.record_probe("resi-0", true, ip("198.51.100.1"), "").unwrap());
    assert!(!p.record_probe("resi-0", true, ip("198.51.100.1"), "").unwrap());
    // A new IP after a rotation is expected.
    clock.advance(g.rotates_at(0, g.generation(0, T0)) - T0).unwrap();
    assert!(!p.record_probe("resi-0", true, ip("198.51.100.2"), "").unwrap());
    assert!(!p.events(0).iter().any(|e| e.kind == "sticky_broken" || e.kind == "exit_drifted"));
    // Within one token, a new IP is the provider breaking stickiness: an event, a failure.
    assert!(p.record_probe("resi-0", true, ip("198.51.100.3"), "").unwrap());
    let broken: Vec<_> = p.events(0).into_iter().filter(|e| e.kind == "sticky_broken").collect();
    assert_eq!(broken.len(), 1);
    assert!(broken[0].message.contains("198.51.100.3") && broken[0].message.contains("198.51.100.2"), "{}", broken[0].message);
}

#[test]
fn a_gateway_added_later_joins_all_or_nothing() {
    let dc = Exit::new("resi-1", "http://10.0.0.7:3128", None, 1, vec![]).unwrap();
    let (p, _) = pool(vec![dc.into()]);
    assert_eq!(p.add_gateway(gateway("resi", 3, Some(600.0), false)).unwrap_err().to_string(), "duplicate exit id \"resi-1\"");
    assert_eq!(p.members(0).len(), 1);
    p.add_gateway(gateway("mob", 2, Some(600.0), false)).unwrap();
    let ids: Vec<String> = p.members(0).iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids, ["resi-1", "mob-0", "mob-1"]);
    assert_eq!(p.generation("mob-1").unwrap(), Some(gateway("mob", 2, Some(600.0), false).generation(1, T0)));
    assert_eq!(p.generation("resi-1").unwrap(), None);
}

#[test]
fn a_probe_answered_407_takes_the_gateway_out_as_credentials_and_a_plain_exit_fails_it() {
    let dc = Exit::new("dc-1", "http://10.0.0.7:3128", None, 1, vec![]).unwrap();
    let (p, _) = pool(vec![gateway("resi", 4, Some(600.0), false).into(), dc.into()]);
    assert!(!p.record_probe_status("resi-2", false, None, Some(407), "407 Proxy Authentication Required").unwrap());
    let loud: Vec<_> = p.events(0).into_iter().filter(|e| e.kind == "gateway_credentials_rejected").collect();
    assert_eq!(loud.len(), 1);
    assert!(loud[0].message.contains("gateway resi") && !loud[0].message.contains("s3cret"), "{}", loud[0].message);
    for n in 0..4 {
        assert!(p.state(&format!("resi-{n}"), None).unwrap().is_ejected());
    }
    // No slot's own breaker counted it: one probe that gets through brings every slot back.
    assert!(!p.events(0).iter().any(|e| e.kind == "state_changed"));
    p.record_probe("resi-0", true, None, "").unwrap();
    for n in 0..4 {
        assert!(!p.state(&format!("resi-{n}"), None).unwrap().is_ejected());
    }
    // An exit of its own answered 407 by its proxy: a failed probe like any other.
    p.record_probe_status("dc-1", false, None, Some(407), "407").unwrap();
    assert_eq!(p.events(0).into_iter().filter(|e| e.kind == "gateway_credentials_rejected").count(), 1);
}

#[test]
fn a_keyless_lease_gets_the_token_of_the_time_it_is_now() {
    let g = gateway("resi", 1, Some(600.0), false);
    let (p, clock) = pool(vec![g.clone().into()]);
    let generation = g.generation(0, T0);
    let lease = p.try_acquire(0, None, None).unwrap();
    assert_eq!(token_of(&lease.exit), g.token(0, generation));
    p.release(lease.id, &Report::SUCCESS);
    clock.advance(g.rotates_at(0, generation) - T0).unwrap();
    let lease = p.try_acquire(0, None, None).unwrap();
    assert_eq!(token_of(&lease.exit), g.token(0, generation + 1));
}

/// Two workers on one store: the fleet's session of a key ends at its slot's rotation, once,
/// for whichever worker leases next, and the following lease binds afresh for both.
#[test]
fn a_fleet_session_ends_with_its_token_once_for_every_worker() {
    let g = gateway("resi", 4, Some(600.0), false);
    let clock = ManualClock::new(T0);
    let store: Arc<dyn exitpool::Store> = Arc::new(exitpool::MemoryStore::new("fleet", Arc::new(clock.clone())));
    let cfg = Config { seed: Some(1), session_ttl: 1e6, ..Config::default() };
    let workers: Vec<Pool> =
        (0..2).map(|_| Pool::of_with_store(vec![g.clone().into()], cfg.clone(), Arc::new(clock.clone()), store.clone()).unwrap()).collect();
    let lease = workers[0].try_acquire(0, Some("acct"), None).unwrap();
    let slot_id = lease.exit.id.clone();
    let slot: u32 = slot_id.rsplit('-').next().unwrap().parse().unwrap();
    workers[0].release(lease.id, &Report::SUCCESS);
    let ends = g.rotates_at(slot, g.generation(slot, T0));
    clock.advance(ends - T0 - 0.5).unwrap();
    let lease = workers[1].try_acquire(0, Some("acct"), None).unwrap();
    assert_eq!(lease.choice, Choice::Session, "the other worker shares the session until the token's end");
    workers[1].release(lease.id, &Report::SUCCESS);
    clock.advance(0.5).unwrap();
    match workers[1].try_acquire(0, Some("acct"), None) {
        Err(Refusal::SessionExitLost { exit_id, why, .. }) => {
            assert_eq!((exit_id.as_str(), why), (slot_id.as_str(), "its gateway session expired (token rotated)"))
        }
        other => panic!("{other:?}"),
    }
    // Once: the binder leases next and binds afresh on the new token; the other shares it.
    let lease = workers[0].try_acquire(0, Some("acct"), None).unwrap();
    assert_eq!((lease.exit.id.as_str(), lease.choice), (slot_id.as_str(), Choice::Ring));
    assert_eq!(token_of(&lease.exit), g.token(slot, g.generation(slot, T0) + 1));
    workers[0].release(lease.id, &Report::SUCCESS);
    let lease = workers[1].try_acquire(0, Some("acct"), None).unwrap();
    assert_eq!(lease.choice, Choice::Session);
    assert_eq!(store.session("acct").unwrap().as_deref(), Some(slot_id.as_str()));
}
