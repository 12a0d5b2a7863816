//! One behavioural suite for every store: the memory store with a manual clock, and a real
//! `redis-server` (started here on a free loopback port) whose clock is its own, so its run
//! waits out short TTLs for real.

use exitpool::{ManualClock, MemoryStore, Outcome, Pace, RedisStore, State, Store, Take, Taken, Verdict, WarmupConfig};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A store under test and a way to let its time pass.
struct Subject {
    store: Arc<dyn Store>,
    advance: Box<dyn Fn(f64)>,
    /// The same store as another worker sees it (another connection, for Redis).
    peer: Box<dyn Fn() -> Arc<dyn Store>>,
    _server: Option<Server>,
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts a redis-server of the test's own. Tests run in parallel, so two of them may be handed
/// the same free port; the loser's server exits on its failed bind, and a TCP connect alone would
/// then reach the winner's server (and die with it). Readiness is therefore judged on a Unix
/// socket only this server creates, and a server that exits is retried on another port.
fn redis_server() -> (Server, u16) {
    static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    for _ in 0..5 {
        let port = free_port();
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let sock = std::env::temp_dir().join(format!("exitpool-store-{}-{n}.sock", std::process::id()));
        let _ = std::fs::remove_file(&sock);
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(&sock)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/test-deps.sh installs it)");
        let mut server = Server(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if std::os::unix::net::UnixStream::connect(&sock).is_ok() {
                let _ = std::fs::remove_file(&sock);
                return (server, port);
            }
            if server.0.try_wait().unwrap().is_some() {
                break; // its port was taken: try another
            }
            assert!(Instant::now() < deadline, "redis-server did not start on port {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("redis-server failed to start on five free ports in a row");
}

fn memory() -> Subject {
    let clock = ManualClock::new(0.0);
    let c = clock.clone();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new("memory://test", Arc::new(clock)));
    let same = Arc::clone(&store);
    Subject { store, advance: Box::new(move |s| drop(c.advance(s))), peer: Box::new(move || Arc::clone(&same)), _server: None }
}

fn redis() -> Subject {
    let (server, port) = redis_server();
    let url = format!("redis://127.0.0.1:{port}/0");
    let store = RedisStore::open(&url, "suite").unwrap();
    let peer = Box::new(move || Arc::new(RedisStore::open(&url, "suite").unwrap()) as Arc<dyn Store>);
    Subject { store: Arc::new(store), advance: Box::new(|s| std::thread::sleep(Duration::from_secs_f64(s))), peer, _server: Some(server) }
}

fn take<'a>(key: Option<&'a str>, candidates: &'a [&'a str], max: Option<u32>) -> Take<'a> {
    Take {
        key,
        candidates,
        max_leases: max,
        lease_ttl: 60.0,
        session_ttl: 60.0,
        renew: true,
        warmup: None,
        generation: 0,
        rebind: false,
        pace: None,
    }
}

fn granted(t: Taken) -> (String, u64) {
    match t {
        Taken::Granted { exit, lease, .. } => (exit, lease),
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn verdict(exit: &str, site: &str, state: State, hold: f64) -> Verdict {
    Verdict { exit: exit.into(), site: site.into(), state, hold, origin: 7, seq: 0, pace: None }
}

macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod memory_store {
            $( #[test] fn $name() { super::$name(super::memory()) } )*
        }
        mod redis_store {
            $( #[test] fn $name() { super::$name(super::redis()) } )*
        }
    };
}

suite!(
    the_ceiling_holds_and_a_release_frees_a_slot,
    keyless_takes_the_first_candidate_with_room,
    an_expired_lease_frees_its_slot_and_its_late_release_is_ignored,
    a_second_release_is_ignored,
    a_live_session_never_moves_and_ends_when_told,
    a_session_lapses_after_its_ttl,
    a_new_pairing_warms_up,
    the_fleet_wide_ejection_cap_refuses_one_too_many,
    verdicts_arrive_in_order_with_their_remaining_hold,
    counts_are_fleet_wide,
    a_hand_back_frees_its_slot_without_waiting,
    a_hand_back_reaches_other_workers_without_another_command,
    a_closing_store_sends_its_hand_backs,
    being_told_elsewhere_does_not_extend_a_session,
    a_session_unrenewed_keeps_its_expiry_and_a_new_one_is_made_anyway,
    a_session_of_an_older_token_ends_once_for_every_worker,
    a_rebinding_gateway_moves_its_session_to_the_new_token,
    pacing_budgets_are_shared_by_every_worker,
    a_pace_cut_sits_beside_the_pairs_health_and_takes_no_exit_out,
);

fn pacing_budgets_are_shared_by_every_worker(s: Subject) {
    let (st, peer) = (&s.store, (s.peer)());
    // "4/s" on both exits: an interval of 0.25 s, a burst of four.
    let spacing = [(0.25, 1.0), (0.25, 1.0)];
    let paced =
        |key, c: &'static [&'static str], site| Take { pace: Some(Pace { site, spacing: &spacing[..c.len()] }), ..take(key, c, None) };
    for i in 0..4 {
        let worker = if i % 2 == 0 { st } else { &peer };
        granted(worker.take(&paced(None, &["a"], "shop.example")).unwrap());
    }
    // Spent fleet-wide: a keyless take moves on to the next candidate, a lone one waits.
    assert_eq!(granted(peer.take(&paced(None, &["a", "b"], "shop.example")).unwrap()).0, "b");
    match st.take(&paced(None, &["a"], "shop.example")).unwrap() {
        Taken::Paced { exit, wait } => assert!(exit == "a" && wait > 0.0 && wait <= 0.251, "{exit} {wait}"),
        other => panic!("expected a pacing wait, got {other:?}"),
    }
    // A key waits for its exit's budget: nothing taken, no session bound elsewhere.
    assert!(matches!(peer.take(&paced(Some("acct"), &["a"], "shop.example")).unwrap(), Taken::Paced { .. }));
    assert_eq!(st.session("acct").unwrap(), None);
    // Another site's budget, and an unpaced take, are untouched.
    granted(st.take(&paced(None, &["a"], "other.example")).unwrap());
    granted(st.take(&take(None, &["a"], None)).unwrap());
    (s.advance)(0.26);
    granted(peer.take(&paced(Some("acct"), &["a"], "shop.example")).unwrap());
}

fn a_hand_back_frees_its_slot_without_waiting(s: Subject) {
    let st = &s.store;
    for _ in 0..50 {
        let (_, id) = granted(st.take(&take(None, &["a"], Some(1))).unwrap());
        st.hand_back("a", id, Some(Outcome::Success)).unwrap();
    }
    let c = st.counts(&["a"]).unwrap();
    assert_eq!((c[0].active, c[0].leases, c[0].outcomes[Outcome::Success as usize]), (0, 50, 50));
}

/// A hand-back may wait to ride with the worker's next command, but a worker that goes quiet
/// must not keep its slots: another worker gets the slot long before the lease would expire.
fn a_hand_back_reaches_other_workers_without_another_command(s: Subject) {
    let other = (s.peer)();
    let (_, id) = granted(s.store.take(&take(None, &["a"], Some(1))).unwrap());
    assert!(matches!(other.take(&take(None, &["a"], Some(1))).unwrap(), Taken::Full { .. }));
    s.store.hand_back("a", id, Some(Outcome::Success)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match other.take(&take(None, &["a"], Some(1))).unwrap() {
            Taken::Granted { .. } => break,
            full => assert!(Instant::now() < deadline, "the slot never came back to other workers: {full:?}"),
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let c = other.counts(&["a"]).unwrap();
    assert_eq!((c[0].active, c[0].leases, c[0].outcomes[Outcome::Success as usize]), (1, 2, 1));
}

fn a_closing_store_sends_its_hand_backs(s: Subject) {
    let worker = (s.peer)();
    let ids: Vec<u64> = (0..3).map(|_| granted(worker.take(&take(None, &["a"], Some(3))).unwrap()).1).collect();
    for id in ids {
        worker.hand_back("a", id, None).unwrap();
    }
    drop(worker);
    let c = s.store.counts(&["a"]).unwrap();
    assert_eq!((c[0].active, c[0].leases), (0, 3), "the slots must be free the moment the store is gone");
}

fn the_ceiling_holds_and_a_release_frees_a_slot(s: Subject) {
    let st = &s.store;
    let (_, a) = granted(st.take(&take(None, &["a"], Some(2))).unwrap());
    granted(st.take(&take(None, &["a"], Some(2))).unwrap());
    assert_eq!(st.take(&take(None, &["a"], Some(2))).unwrap(), Taken::Full { exit: None });
    assert!(st.give_back("a", a, Some(Outcome::Success)).unwrap());
    assert_eq!(granted(st.take(&take(None, &["a"], Some(2))).unwrap()).0, "a");
}

fn keyless_takes_the_first_candidate_with_room(s: Subject) {
    let st = &s.store;
    assert_eq!(granted(st.take(&take(None, &["a", "b"], Some(1))).unwrap()).0, "a");
    assert_eq!(granted(st.take(&take(None, &["a", "b"], Some(1))).unwrap()).0, "b");
    assert!(matches!(st.take(&take(None, &["a", "b"], Some(1))).unwrap(), Taken::Full { .. }));
}

fn an_expired_lease_frees_its_slot_and_its_late_release_is_ignored(s: Subject) {
    let st = &s.store;
    let short = Take { lease_ttl: 0.2, ..take(None, &["a"], Some(1)) };
    let (_, id) = granted(st.take(&short).unwrap());
    assert!(matches!(st.take(&short).unwrap(), Taken::Full { .. }));
    (s.advance)(0.3);
    assert!(!st.give_back("a", id, Some(Outcome::Success)).unwrap(), "a release after expiry must change nothing");
    granted(st.take(&short).unwrap());
    assert!(matches!(st.take(&short).unwrap(), Taken::Full { .. }), "the late release must not have freed a second slot");
    let c = st.counts(&["a"]).unwrap();
    assert_eq!((c[0].leases, c[0].outcomes[Outcome::Success as usize]), (2, 0), "a late release counts no outcome");
}

fn a_second_release_is_ignored(s: Subject) {
    let st = &s.store;
    let (_, id) = granted(st.take(&take(None, &["a"], Some(1))).unwrap());
    assert!(st.give_back("a", id, Some(Outcome::Success)).unwrap());
    assert!(!st.give_back("a", id, Some(Outcome::Success)).unwrap());
    assert!(!st.give_back("a", 999_999, Some(Outcome::Success)).unwrap());
}

fn a_live_session_never_moves_and_ends_when_told(s: Subject) {
    let st = &s.store;
    let g = st.take(&take(Some("acct"), &["a"], None)).unwrap();
    assert!(matches!(g, Taken::Granted { ref exit, session: false, .. } if exit == "a"));
    // Another worker whose ring now says b (exits given in another order, b added) is told
    // where the session is, and nothing is taken until it asks for that exit.
    assert_eq!(st.take(&take(Some("acct"), &["b"], None)).unwrap(), Taken::Elsewhere { exit: "a".into() });
    let g = st.take(&take(Some("acct"), &["a"], None)).unwrap();
    assert!(matches!(g, Taken::Granted { ref exit, session: true, .. } if exit == "a"), "{g:?}");
    assert_eq!(st.session("acct").unwrap().as_deref(), Some("a"));
    // A full session exit means wait, never move.
    let full = st.take(&take(Some("acct"), &["a"], Some(2))).unwrap();
    assert_eq!(full, Taken::Full { exit: Some("a".into()) });
    assert!(st.end_session("acct").unwrap());
    assert!(!st.end_session("acct").unwrap());
    assert_eq!(granted(st.take(&take(Some("acct"), &["b"], None)).unwrap()).0, "b");
}

fn being_told_elsewhere_does_not_extend_a_session(s: Subject) {
    let st = &s.store;
    let short = |c: &'static [&'static str]| Take { session_ttl: 0.3, ..take(Some("acct"), c, None) };
    granted(st.take(&short(&["a"])).unwrap());
    (s.advance)(0.2);
    assert_eq!(st.take(&short(&["b"])).unwrap(), Taken::Elsewhere { exit: "a".into() });
    (s.advance)(0.2);
    assert_eq!(st.session("acct").unwrap(), None, "the session ended at its TTL: being asked about it kept nothing alive");
}

fn a_session_unrenewed_keeps_its_expiry_and_a_new_one_is_made_anyway(s: Subject) {
    let st = &s.store;
    let t = |renew| Take { session_ttl: 0.4, renew, ..take(Some("acct"), &["a"], None) };
    // A new session is bound even when the worker asks for no renewal.
    assert!(matches!(st.take(&t(false)).unwrap(), Taken::Granted { session: false, .. }));
    (s.advance)(0.25);
    assert!(matches!(st.take(&t(false)).unwrap(), Taken::Granted { session: true, .. }));
    (s.advance)(0.25);
    assert_eq!(st.session("acct").unwrap(), None, "an unrenewed session lapses at its first expiry");
    assert!(matches!(st.take(&t(true)).unwrap(), Taken::Granted { session: false, .. }));
    (s.advance)(0.25);
    assert!(matches!(st.take(&t(true)).unwrap(), Taken::Granted { session: true, .. }));
    (s.advance)(0.25);
    assert_eq!(st.session("acct").unwrap().as_deref(), Some("a"), "a renewed session is extended");
}

/// A gateway slot's session is bound with its token generation; a take in a newer generation
/// (the slot's token rotated) ends it, once, whichever worker asks, and the next take binds
/// afresh in the new generation. A worker whose clock lags (an older generation) keeps it.
fn a_session_of_an_older_token_ends_once_for_every_worker(s: Subject) {
    let (st, peer) = (&s.store, (s.peer)());
    let gen = |generation| Take { generation, ..take(Some("acct"), &["gw-3"], None) };
    assert!(matches!(st.take(&gen(5)).unwrap(), Taken::Granted { session: false, .. }));
    assert!(matches!(peer.take(&gen(5)).unwrap(), Taken::Granted { session: true, .. }));
    assert!(matches!(peer.take(&gen(4)).unwrap(), Taken::Granted { session: true, .. }), "a lagging worker keeps the session");
    assert_eq!(st.session("acct").unwrap().as_deref(), Some("gw-3"), "the generation is not part of the exit");
    assert_eq!(peer.take(&gen(6)).unwrap(), Taken::Rotated { exit: "gw-3".into() });
    assert_eq!(st.session("acct").unwrap(), None, "the rotated session ended for the fleet");
    assert!(matches!(st.take(&gen(6)).unwrap(), Taken::Granted { session: false, .. }), "the next take binds afresh");
    assert!(matches!(peer.take(&gen(6)).unwrap(), Taken::Granted { session: true, .. }));
    // On another exit the session is where it is: rotation is judged on the session's exit.
    assert_eq!(
        peer.take(&Take { generation: 9, ..take(Some("acct"), &["gw-4"], None) }).unwrap(),
        Taken::Elsewhere { exit: "gw-3".into() }
    );
}

fn a_rebinding_gateway_moves_its_session_to_the_new_token(s: Subject) {
    let st = &s.store;
    let gen = |generation, renew| Take { generation, renew, rebind: true, ..take(Some("acct"), &["gw-3"], None) };
    granted(st.take(&gen(5, true)).unwrap());
    // Unrenewed, the move to the new token is written all the same: generation 6 then holds.
    assert!(matches!(st.take(&gen(6, false)).unwrap(), Taken::Granted { session: true, .. }));
    let strict = Take { generation: 6, ..take(Some("acct"), &["gw-3"], None) };
    assert!(matches!(st.take(&strict).unwrap(), Taken::Granted { session: true, .. }), "the session moved to generation 6");
}

fn a_session_lapses_after_its_ttl(s: Subject) {
    let st = &s.store;
    let short = Take { session_ttl: 0.2, ..take(Some("acct"), &["a"], None) };
    granted(st.take(&short).unwrap());
    (s.advance)(0.1);
    assert_eq!(st.session("acct").unwrap().as_deref(), Some("a"));
    (s.advance)(0.25);
    assert_eq!(st.session("acct").unwrap(), None);
    let other = Take { session_ttl: 0.2, ..take(Some("acct"), &["b"], None) };
    assert_eq!(granted(st.take(&other).unwrap()).0, "b");
}

fn a_new_pairing_warms_up(s: Subject) {
    let st = &s.store;
    let warm = WarmupConfig::new(60.0, 0.5, 3600.0).unwrap();
    let t = Take { warmup: Some(warm), ..take(Some("acct"), &["a"], None) };
    granted(st.take(&t).unwrap());
    match st.take(&t).unwrap() {
        Taken::WarmingUp { exit, wait } => {
            assert_eq!(exit, "a");
            assert!(wait > 0.3 && wait <= 0.5, "the gap starts near initial_interval: {wait}");
        }
        other => panic!("a new pairing's second lease must wait: {other:?}"),
    }
    (s.advance)(0.6);
    granted(st.take(&t).unwrap());
}

fn the_fleet_wide_ejection_cap_refuses_one_too_many(s: Subject) {
    let st = &s.store;
    // A site's own verdict (an incident) takes no exit out: it never counts against the cap.
    assert!(st.publish(&verdict("", "shop.example", State::Quarantined, 60.0), 1).unwrap());
    assert!(st.publish(&verdict("", "news.example", State::Quarantined, 60.0), 1).unwrap());
    assert!(st.publish(&verdict("a", "", State::Quarantined, 30.0), 1).unwrap());
    assert!(!st.publish(&verdict("b", "", State::Quarantined, 30.0), 1).unwrap(), "a second ejection breaks a cap of 1");
    // For a site, tunnel ejections count too.
    assert!(!st.publish(&verdict("b", "shop.example", State::Quarantined, 30.0), 1).unwrap());
    // The same exit again (a longer backoff) is no new ejection.
    assert!(st.publish(&verdict("a", "", State::Dead, f64::INFINITY), 1).unwrap());
    assert!(st.publish(&verdict("a", "", State::Healthy, 0.0), 1).unwrap());
    assert!(st.publish(&verdict("b", "", State::Quarantined, 0.2), 1).unwrap());
    // A quarantine whose hold is over no longer holds a cap slot.
    (s.advance)(0.3);
    assert!(st.publish(&verdict("c", "", State::Quarantined, 30.0), 1).unwrap());
}

fn a_pace_cut_sits_beside_the_pairs_health_and_takes_no_exit_out(s: Subject) {
    let st = &s.store;
    let (_, start) = st.verdicts(0).unwrap();
    assert!(st.publish(&verdict("a", "shop.example", State::Quarantined, 30.0), 1).unwrap());
    let cut = Verdict { pace: Some(1.5), ..verdict("a", "shop.example", State::Healthy, 10.0) };
    assert!(st.publish(&cut, 1).unwrap());
    let (vs, _) = st.verdicts(start).unwrap();
    assert_eq!(vs.len(), 2, "{vs:?}");
    assert_eq!((vs[0].state, vs[0].pace), (State::Quarantined, None));
    assert_eq!((vs[1].exit.as_str(), vs[1].site.as_str(), vs[1].pace), ("a", "shop.example", Some(1.5)));
    assert!(vs[1].hold > 5.0 && vs[1].hold <= 10.0, "{}", vs[1].hold);
    // The quarantine still holds its cap slot: the cut did not put the exit back.
    assert!(!st.publish(&verdict("b", "shop.example", State::Quarantined, 30.0), 1).unwrap());
}

fn verdicts_arrive_in_order_with_their_remaining_hold(s: Subject) {
    let st = &s.store;
    let (none, start) = st.verdicts(0).unwrap();
    assert!(none.is_empty());
    st.publish(&verdict("a", "shop.example", State::Quarantined, 30.0), 10).unwrap();
    st.publish(&verdict("b", "", State::Dead, f64::INFINITY), 10).unwrap();
    (s.advance)(0.2);
    let (vs, last) = st.verdicts(start).unwrap();
    assert_eq!(vs.len(), 2);
    assert_eq!((vs[0].exit.as_str(), vs[0].site.as_str(), vs[0].state), ("a", "shop.example", State::Quarantined));
    assert!(vs[0].hold < 29.9 && vs[0].hold > 25.0, "hold counts down: {}", vs[0].hold);
    assert_eq!(vs[0].origin, 7);
    assert_eq!((vs[1].exit.as_str(), vs[1].state), ("b", State::Dead));
    assert!(vs[1].hold.is_infinite());
    assert!(vs[0].seq < vs[1].seq && vs[1].seq == last);
    st.publish(&verdict("a", "shop.example", State::Probing, 0.0), 10).unwrap();
    let (vs, _) = st.verdicts(last).unwrap();
    assert_eq!(vs.len(), 1, "only what changed since: {vs:?}");
    assert_eq!(vs[0].state, State::Probing);
}

fn counts_are_fleet_wide(s: Subject) {
    let st = &s.store;
    let (_, a1) = granted(st.take(&take(None, &["a"], None)).unwrap());
    granted(st.take(&take(None, &["a"], None)).unwrap());
    let (_, b1) = granted(st.take(&take(None, &["b"], None)).unwrap());
    st.give_back("a", a1, Some(Outcome::Success)).unwrap();
    st.give_back("b", b1, Some(Outcome::Block)).unwrap();
    let c = st.counts(&["a", "b", "never"]).unwrap();
    assert_eq!((c[0].active, c[0].leases, c[0].outcomes[Outcome::Success as usize]), (1, 2, 1));
    assert_eq!((c[1].active, c[1].leases, c[1].outcomes[Outcome::Block as usize]), (0, 1, 1));
    assert_eq!(c[2], Default::default());
}

#[test]
fn an_unreachable_server_answers_quickly_and_is_retried_after_a_pause() {
    let port = free_port();
    let st = RedisStore::open(&format!("redis://:s3cret-pw@127.0.0.1:{port}/0"), "down").unwrap();
    let t0 = Instant::now();
    let e = st.take(&take(None, &["a"], None)).unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(2));
    let msg = e.to_string();
    assert!(msg.contains("unavailable") && !msg.contains("s3cret-pw"), "{msg}");
    assert!(!st.describe().contains("s3cret-pw"));
    // Within the pause, no connection is attempted at all.
    let t1 = Instant::now();
    assert!(st.take(&take(None, &["a"], None)).is_err());
    assert!(t1.elapsed() < Duration::from_millis(50));
}

#[test]
fn scripts_reload_after_the_script_cache_is_flushed() {
    let (_server, port) = redis_server();
    let st = RedisStore::open(&format!("redis://127.0.0.1:{port}/0"), "flush").unwrap();
    let (_, id) = granted(st.take(&take(None, &["a"], Some(1))).unwrap());
    let out = Command::new("redis-cli").args(["-p", &port.to_string(), "SCRIPT", "FLUSH"]).output().unwrap();
    assert!(out.status.success());
    // A hand-back sent after the flush is not lost to NOSCRIPT.
    st.hand_back("a", id, Some(Outcome::Success)).unwrap();
    granted(st.take(&take(None, &["a"], Some(1))).unwrap());
}

// --- a stalled server -------------------------------------------------------------------------

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli").arg("-p").arg(port.to_string()).args(args).output().unwrap();
    assert!(out.status.success(), "redis-cli {args:?} failed");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Keeps the server busy in one script for `ms` milliseconds, in the background: commands that
/// arrive meanwhile wait unread, and run when it ends (even if their client gave up).
fn busy(port: u16, ms: u64) -> Child {
    let script = format!("local t0 = redis.call('TIME') local s0 = t0[1] * 1e6 + t0[2] while true do local t = redis.call('TIME') if t[1] * 1e6 + t[2] - s0 > {} then return 1 end end", ms * 1000);
    Command::new("redis-cli").arg("-p").arg(port.to_string()).args(["EVAL", &script, "0"]).stdout(Stdio::null()).spawn().unwrap()
}

/// Takes a slot of `exit` under a ceiling of one, trying every 20 ms until `within` passes.
fn take_within(store: &dyn Store, exit: &str, within: Duration) -> Option<u64> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Taken::Granted { lease, .. }) = store.take(&take(None, &[exit], Some(1))) {
            return Some(lease);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Releases made during `CLIENT PAUSE` (longer than a command's timeout) are kept and sent when
/// the server answers again: their slots are free long before `lease_ttl` (60 s), each counted
/// once.
fn releases_during_a_pause_land_after_it(exits: &[&str], pause_ms: u64) {
    let (_server, port) = redis_server();
    let url = format!("redis://127.0.0.1:{port}/0");
    let st = RedisStore::open(&url, "pause").unwrap();
    let ids: Vec<u64> = exits.iter().map(|e| granted(st.take(&take(None, &[e], Some(1))).unwrap()).1).collect();
    assert_eq!(cli(port, &["CLIENT", "PAUSE", &pause_ms.to_string(), "ALL"]), "OK");
    let resumes = Instant::now() + Duration::from_millis(pause_ms);
    for (e, id) in exits.iter().zip(&ids) {
        let _ = st.hand_back(e, *id, Some(Outcome::Success));
    }
    // The flusher's send times out during the pause, and the store says releases are stuck.
    let stuck = loop {
        if let Err(e) = st.backlog() {
            break Some(e.to_string());
        }
        if Instant::now() >= resumes {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stuck = stuck.expect("the store did not say that releases are waiting");
    assert!(stuck.contains("not yet handed back"), "{stuck}");
    std::thread::sleep(resumes.saturating_duration_since(Instant::now()));
    let peer = RedisStore::open(&url, "pause").unwrap();
    for e in exits {
        assert!(take_within(&peer, e, Duration::from_secs(10)).is_some(), "the slot of {e} stayed held after the pause");
    }
    assert_eq!(st.backlog(), Ok(()));
    for c in peer.counts(exits).unwrap() {
        assert_eq!((c.active, c.outcomes[Outcome::Success as usize]), (1, 1));
    }
}

#[test]
fn a_release_during_a_client_pause_is_sent_when_the_pause_ends() {
    releases_during_a_pause_land_after_it(&["a"], 1000);
}

#[test]
fn releases_of_many_leases_during_a_client_pause_are_sent_when_it_ends() {
    releases_during_a_pause_land_after_it(&["a", "b", "c", "d", "e", "f", "g", "h"], 1500);
}

#[test]
fn a_release_that_timed_out_but_ran_late_is_counted_once() {
    let (_server, port) = redis_server();
    let url = format!("redis://127.0.0.1:{port}/0");
    let st = RedisStore::open(&url, "late").unwrap();
    // Both scripts loaded: a late EVALSHA must not fail for want of its script.
    let (_, id) = granted(st.take(&take(None, &["a"], Some(1))).unwrap());
    assert!(st.give_back("a", id, None).unwrap());
    let (_, id) = granted(st.take(&take(None, &["a"], Some(1))).unwrap());
    let mut script = busy(port, 1200);
    std::thread::sleep(Duration::from_millis(200));
    // Its send times out on this side, and runs on the server once the script ends; the
    // store sends it again, which must end nothing twice.
    st.hand_back("a", id, Some(Outcome::Block)).unwrap();
    script.wait().unwrap();
    let peer = RedisStore::open(&url, "late").unwrap();
    assert!(take_within(&peer, "a", Duration::from_secs(10)).is_some());
    // Past the store's retry: whatever it still had to send went out.
    std::thread::sleep(Duration::from_millis(1600));
    assert_eq!(st.backlog(), Ok(()));
    let c = &peer.counts(&["a"]).unwrap()[0];
    assert_eq!((c.active, c.leases, c.outcomes[Outcome::Block as usize]), (1, 3, 1), "{c:?}");
}

#[test]
fn a_take_that_timed_out_but_ran_late_frees_its_slot() {
    let (_server, port) = redis_server();
    let url = format!("redis://127.0.0.1:{port}/0");
    let st = RedisStore::open(&url, "lost").unwrap();
    // Connected, and the take script loaded: a late EVALSHA must not fail for want of it.
    let (_, id) = granted(st.take(&take(None, &["a"], Some(1))).unwrap());
    assert!(st.give_back("a", id, None).unwrap());
    let mut script = busy(port, 1200);
    std::thread::sleep(Duration::from_millis(200));
    // No answer in time: the pool serves from its own state, but the server grants the lease
    // when the script ends, to nobody.
    assert!(st.take(&take(None, &["a"], Some(1))).is_err());
    script.wait().unwrap();
    let peer = RedisStore::open(&url, "lost").unwrap();
    assert!(take_within(&peer, "a", Duration::from_secs(10)).is_some(), "the late take's slot stayed held");
}
