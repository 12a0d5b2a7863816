//! The store for a fleet: every decision is one Lua script run atomically on a Redis server,
//! with the server's `TIME` as the one clock. `redis::Script` sends EVALSHA and loads the
//! script again when the server answers NOSCRIPT (a flushed script cache, a restart).
//!
//! A release needs no answer, so it is not sent on its own: its hand-back waits in `pending`
//! and rides along with the next command of this process, inside the next take's script run.
//! A lease pair then costs one round trip and one script run, not two of each; a script run
//! costs the server far more than a round trip's worth of plain commands. A flusher thread
//! sends what is still waiting after `FLUSH_AFTER`, so a worker that goes quiet frees its
//! slots within milliseconds, and dropping the store sends the rest.
//!
//! Lease ids are chosen here, not by the server: a counter scrambled with a per-store salt,
//! distinct within the store and, across a fleet, colliding with odds of one in 2^64.
//!
//! A forked worker (multiprocessing, a preforking server) inherits the store with its parent's
//! sockets, waiting hand-backs and salt. Like redis-py's connection pool, the store checks the
//! process id before it uses any of them: a child forgets its parent's connections and
//! hand-backs, draws a new salt and starts a flusher of its own.
//!
//! Reaching the server never blocks a caller for long: connecting gives up after 250 ms, a
//! command after 500 ms, and after a failure no one tries again for a second, so a fleet whose
//! Redis is down pays nothing per lease while it serves from local state.
//!
//! A hand-back whose send failed (a stalled server, a dropped connection) is not lost: it goes
//! back to the head of the queue and rides with the first command that reaches the server,
//! the flusher trying again every `RETRY_AFTER`. It may have reached the server anyway (a reply
//! that timed out, a command the server ran late); sending it again is safe because the server
//! ends a lease once (`end_lease` in lua/common.lua does nothing for a lease no longer live).
//! The queue stays bounded: it only grows by releases of leases the server granted, every
//! command that reaches the server empties it, and a hand-back stuck for longer than the
//! longest `lease_ttl` is dropped, its lease having certainly expired (the server reclaims it).
//! While hand-backs are stuck, [`Store::backlog`] and every hand-back say so.
//!
//! The server may be one server, the primary a set of Sentinels names, or a Redis Cluster
//! (`topology`). With the latter two a failed command is tried again on the new primary while
//! a failover lasts (`Inner::try_run`), so that the fleet keeps its ceilings through it.
//!
//! A store that the server turns away when it is opened (a wrong password, none where one is
//! required, a database number out of range) is refused there and then: serving from local
//! state would silently make every ceiling a per-process one. Only a server that cannot be
//! reached is left for later.

mod handbacks;
mod topology;

pub(crate) use handbacks::before_fork;
pub use handbacks::flush_all;
use handbacks::{HandBack, HandBackQueue, LIVE, MAX_PENDING};

use super::{ejects, state_code, state_of, ExitCounts, Store, StoreError, StoreResult, Take, Taken, Verdict};
use crate::error::{Error, Result};
use crate::fork::{Condvar, Mutex};
use crate::mask::{mask_raw, scrub, MASK};
use crate::outcome::{Outcome, OUTCOMES};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use redis::{ConnectionLike, IntoConnectionInfo, RedisError, Script};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use topology::{Con, Target};

const CONNECT_TIMEOUT: Duration = Duration::from_millis(250);
const IO_TIMEOUT: Duration = Duration::from_millis(500);
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// With Sentinel or a Cluster, how long a command waits for a new primary after the old one
/// failed (refused, dropped, or turned replica): a failover ends within this, and a fleet that
/// fell back on local state meanwhile would hold each ceiling per process, not fleet-wide.
const FAILOVER_WAIT: Duration = Duration::from_secs(8);
/// Between tries while a failover goes on: Sentinels and cluster nodes agree within a few.
const FAILOVER_PAUSE: Duration = Duration::from_millis(100);

/// Every script starts with the shared clock and lease-ending functions.
macro_rules! script {
    ($name:literal) => {
        Script::new(concat!(include_str!("lua/common.lua"), include_str!(concat!("lua/", $name, ".lua"))))
    };
}

struct Scripts {
    take: Script,
    give_back: Script,
    publish: Script,
    verdicts: Script,
    counts: Script,
}

pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    target: Target,
    /// Every key of the namespace starts with this; the braces keep them in one cluster slot.
    prefix: String,
    shown: String,
    /// Secrets of the URL, scrubbed from any error text before it leaves this module.
    secrets: Vec<String>,
    idle: Mutex<Vec<Con>>,
    /// After a failure, when to try the server again.
    retry_at: Mutex<Option<Instant>>,
    scripts: Scripts,
    pending: Mutex<HandBackQueue>,
    /// Wakes the flusher when a hand-back starts waiting, and when the store closes.
    wake: Condvar,
    /// The process whose connections, hand-backs and salt these are.
    process: AtomicU32,
    /// The process a flusher thread was started for (0: none yet).
    flusher: AtomicU32,
    /// The flusher thread could not be started: every hand-back is sent at once instead.
    no_flusher: AtomicBool,
    salt: AtomicU64,
    ids: AtomicU64,
    /// Some hand-backs are waiting because their send failed (`HandBackQueue::failed`).
    stuck: AtomicBool,
    /// The longest `lease_ttl` of a take, in milliseconds: how long a stuck hand-back is kept.
    max_ttl_ms: AtomicU64,
    /// A failover was waited out in vain: until a connection opens again, failures are not
    /// waited on (the pool serves from its own state without paying `FAILOVER_WAIT` again).
    away: AtomicBool,
}

impl RedisStore {
    pub fn open(url: &str, namespace: &str) -> Result<RedisStore> {
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        let opened = match scheme.as_deref() {
            Some(s @ ("redis+sentinel" | "redis+cluster")) => topology::open_multi(url, s)?,
            _ => open_one(url)?,
        };
        let topology::Opened { target, shown, secrets } = opened;
        let store = RedisStore {
            inner: Arc::new(Inner {
                target,
                prefix: format!("exitpool:{{{namespace}}}:"),
                shown,
                secrets,
                idle: Mutex::new(Vec::new()),
                retry_at: Mutex::new(None),
                scripts: Scripts {
                    take: script!("take"),
                    give_back: script!("give_back"),
                    publish: script!("publish"),
                    verdicts: script!("verdicts"),
                    counts: script!("counts"),
                },
                pending: Mutex::new(HandBackQueue::default()),
                wake: Condvar::new(),
                process: AtomicU32::new(std::process::id()),
                flusher: AtomicU32::new(0),
                no_flusher: AtomicBool::new(false),
                salt: AtomicU64::new(crate::seed::random_seed()),
                ids: AtomicU64::new(0),
                stuck: AtomicBool::new(false),
                max_ttl_ms: AtomicU64::new(0),
                away: AtomicBool::new(false),
            }),
        };
        store.inner.probe()?;
        let mut live = LIVE.lock();
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&store.inner));
        drop(live);
        Ok(store)
    }
}

/// One server's URL (`redis://`, `rediss://`, `unix://`), read by the `redis` crate.
fn open_one(url: &str) -> Result<topology::Opened> {
    let parsed = url::Url::parse(url).map_err(|e| Error::BadInput(format!("store {} is not a URL: {e}", mask_raw(url))))?;
    let mut secrets: Vec<String> = Vec::new();
    let mut shown = parsed.clone();
    if let Some(pw) = parsed.password() {
        secrets.push(pw.to_owned());
        if let Ok(decoded) = percent_encoding::percent_decode_str(pw).decode_utf8() {
            secrets.push(decoded.into_owned());
        }
        let _ = shown.set_password(Some(MASK));
    }
    // Unix socket URLs carry their password as a query parameter.
    if parsed.query_pairs().any(|(k, _)| k == "pass" || k == "password") {
        secrets.extend(parsed.query_pairs().filter(|(k, _)| k == "pass" || k == "password").map(|(_, v)| v.into_owned()));
        let kept: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| if k == "pass" || k == "password" { (k.into_owned(), MASK.to_owned()) } else { (k.into_owned(), v.into_owned()) })
            .collect();
        shown.query_pairs_mut().clear().extend_pairs(kept);
    }
    // The URL writer percent-encodes the mask's brackets; they are shown as typed.
    let shown = shown.to_string().replace(&utf8_percent_encode(MASK, NON_ALPHANUMERIC).to_string(), MASK);
    let bad_url = |e: RedisError| Error::BadInput(format!("store {shown}: {}", scrub(&e.to_string(), &secrets)));
    let info = url.into_connection_info().map_err(bad_url)?;
    let client = redis::Client::open(info.set_tcp_settings(topology::nodelay())).map_err(bad_url)?;
    Ok(topology::Opened { target: Target::One(client), shown, secrets })
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        self.inner.pending.lock().closed = true;
        self.inner.wake.notify_all();
        // The flusher may not get to run before the process exits: send the rest now.
        let _ = self.inner.flush();
    }
}

impl Inner {
    /// Sends the waiting hand-backs on a connection, then runs `f` on it: a command never
    /// overtakes a release made before it.
    fn with<T>(&self, mut f: impl FnMut(&mut Con) -> redis::RedisResult<T>) -> StoreResult<T> {
        self.own_process();
        let backs = self.drain();
        let mut delivered = backs.is_empty();
        let r = self.run(|con| {
            if !delivered {
                self.send_backs(con, &backs)?;
                delivered = true;
            }
            f(con)
        });
        if let (Err(e), false) = (&r, delivered) {
            self.requeue(backs, e);
        }
        r
    }

    /// Runs `f` on an idle connection (or a new one), keeping the connection only if it came
    /// through unharmed.
    fn run<T>(&self, f: impl FnMut(&mut Con) -> redis::RedisResult<T>) -> StoreResult<T> {
        self.try_run(f).map_err(|(e, _)| e)
    }

    /// [`Inner::run`], saying on failure whether `f` was tried: its command may then have
    /// reached the server, and may run there yet.
    ///
    /// With Sentinel or a Cluster, a failure that a failover explains (the primary refused,
    /// dropped, or became a replica) is tried again on whichever server is primary next, for
    /// up to `FAILOVER_WAIT`: `f` may then run more than once, and must be safe to repeat
    /// (a take chooses a new lease id each time and hands back the ids it tried before).
    /// Once a wait was in vain, the store is away as a single server would be, until a
    /// connection opens again.
    fn try_run<T>(&self, mut f: impl FnMut(&mut Con) -> redis::RedisResult<T>) -> std::result::Result<T, (StoreError, bool)> {
        let mut tried = false;
        // While a failover goes on: when to stop waiting for the new primary.
        let mut failover: Option<Instant> = None;
        loop {
            let pooled = self.idle.lock().pop();
            let con = match pooled {
                Some(c) => Ok(c),
                None => {
                    if failover.is_none() {
                        if let Some(e) = self.paused() {
                            return Err((e, tried));
                        }
                    }
                    let con = self.open_connection().and_then(|mut con| self.mark(&mut con).map(|()| con));
                    if con.is_ok() {
                        *self.retry_at.lock() = None;
                        self.away.store(false, Ordering::Relaxed);
                    }
                    con
                }
            };
            let e = match con {
                Ok(mut con) => match f(&mut con) {
                    Ok(v) => {
                        self.idle.lock().push(con);
                        if self.stuck.load(Ordering::Relaxed) {
                            self.stuck.store(false, Ordering::Relaxed);
                            self.pending.lock().failed = None;
                        }
                        return Ok(v);
                    }
                    Err(e) => {
                        tried = true;
                        e
                    }
                },
                Err(e) => e,
            };
            if self.target.fails_over() && !self.away.load(Ordering::Relaxed) && failing_over(&e) {
                let until = *failover.get_or_insert_with(|| Instant::now() + FAILOVER_WAIT);
                if Instant::now() < until {
                    // Every pooled connection went to the old primary.
                    self.idle.lock().clear();
                    std::thread::sleep(FAILOVER_PAUSE);
                    continue;
                }
                self.away.store(true, Ordering::Relaxed);
                self.target.recount_replicas();
            }
            return Err((self.failed(e), tried));
        }
    }

    /// Sends a command packed by hand that runs `script` by its hash, loading the script and
    /// sending again if the server has lost it (NOSCRIPT: a flushed cache, a restart). Under
    /// Sentinel the command is followed, in the same round trip, by a WAIT for its replicas (see
    /// [`Inner::replicated`]).
    fn eval_packed(&self, con: &mut Con, script: &Script, packed: &mut Vec<u8>) -> redis::RedisResult<redis::Value> {
        let acks = self.target.acks();
        let count = if acks > 0 {
            let _ = write!(packed, "*3\r\n$4\r\nWAIT\r\n${}\r\n{acks}\r\n$3\r\n{WAIT_MS}\r\n", acks.to_string().len());
            2
        } else {
            1
        };
        let mut loaded = false;
        loop {
            let reply = if count == 1 {
                con.req_packed_command(packed)
            } else {
                con.req_packed_commands(packed, 0, count).and_then(|mut replies| {
                    let acked = replies.pop();
                    let reply = replies.pop().unwrap_or(redis::Value::Nil);
                    match (&reply, acked) {
                        (redis::Value::ServerError(_), _) => Ok(reply),
                        (_, Some(redis::Value::Int(n))) if n >= i64::from(acks) => Ok(reply),
                        _ => Err(not_replicated()),
                    }
                })
            };
            let reply = match reply {
                Ok(redis::Value::ServerError(e)) => Err(RedisError::from(e)),
                other => other,
            };
            match reply {
                Err(e) if !loaded && e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                    script.load(con)?;
                    loaded = true;
                }
                other => return other,
            }
        }
    }

    /// Under Sentinel, waits until the primary's replicas have every write this connection
    /// made (see `topology::Sentinels` for which and why). Without their word the write counts
    /// as unanswered: it is tried again, on the new primary if a failover is under way.
    pub(super) fn replicated(&self, con: &mut Con) -> redis::RedisResult<()> {
        let acks = self.target.acks();
        if acks == 0 {
            return Ok(());
        }
        match redis::cmd("WAIT").arg(acks).arg(WAIT_MS).query(con)? {
            redis::Value::Int(n) if n >= i64::from(acks) => Ok(()),
            _ => Err(not_replicated()),
        }
    }

    /// A lease id: the counter through a bijective mixer (splitmix64), salted per store.
    fn next_id(&self) -> u64 {
        let salt = self.salt.load(Ordering::Relaxed);
        let mut z = salt.wrapping_add(self.ids.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)).max(1)
    }

    /// In a cluster, makes the namespace's one declared key (its prefix) a real key: every
    /// script names it for routing, and while its slot migrates, a node sends a command on to
    /// the importing node (ASK) only once the key has moved. The namespace's other keys are
    /// not declared; they must move in the same MIGRATE (see docs/fleet.md).
    fn mark(&self, con: &mut Con) -> redis::RedisResult<()> {
        match con {
            Con::Cluster(_) => redis::cmd("SET").arg(&self.prefix).arg("exitpool").query(con),
            Con::One(_) => Ok(()),
        }
    }

    /// The error to answer with while the server is left alone after a failure.
    fn paused(&self) -> Option<StoreError> {
        let retry_at = *self.retry_at.lock();
        match retry_at {
            Some(at) if Instant::now() < at => {
                Some(StoreError::Unavailable(self.noting_backlog(format!("{} did not answer; trying again shortly", self.shown))))
            }
            _ => None,
        }
    }

    fn open_connection(&self) -> redis::RedisResult<Con> {
        self.target.connect(CONNECT_TIMEOUT, IO_TIMEOUT)
    }

    /// Connects once as the store is opened: a server that turns this store away refuses it
    /// (see the module documentation); one that cannot be reached is tried again later.
    fn probe(&self) -> Result<()> {
        match self
            .open_connection()
            .and_then(|mut con| redis::cmd("PING").query::<()>(&mut con).and_then(|()| self.mark(&mut con)).map(|()| con))
        {
            Ok(con) => self.idle.lock().push(con),
            Err(e) if turned_away(&e) => {
                let why = scrub(&e.to_string(), &self.secrets);
                return Err(Error::BadInput(format!(
                    "store {}: the server refused this client ({why}): check the password and the database number",
                    self.shown
                )));
            }
            Err(e) => drop(self.failed(e)),
        }
        Ok(())
    }

    fn failed(&self, e: RedisError) -> StoreError {
        let why = scrub(&e.to_string(), &self.secrets);
        // A server that turns this store away (its password changed since) is as good as
        // unreachable: it is not asked again at every lease either.
        let unreachable = e.is_io_error()
            || e.is_connection_refusal()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_unrecoverable_error()
            || turned_away(&e)
            || why.contains("LOADING")
            || failing_over(&e);
        if unreachable {
            // Every pooled connection went to the same server: none is worth trying now.
            self.idle.lock().clear();
            *self.retry_at.lock() = Some(Instant::now() + RETRY_AFTER);
            StoreError::Unavailable(self.noting_backlog(format!("{}: {why}", self.shown)))
        } else {
            StoreError::Protocol(format!("{}: {why}", self.shown))
        }
    }
}

/// One command in the protocol's framing, packed into one buffer: the take runs once per
/// lease, and building it through `redis::Cmd` cost an allocation per argument.
struct Packed(Vec<u8>);

impl Packed {
    fn new(args: usize) -> Packed {
        let mut buf = Vec::with_capacity(512);
        let _ = write!(buf, "*{args}\r\n");
        Packed(buf)
    }

    fn arg(&mut self, a: impl AsRef<[u8]>) -> &mut Packed {
        let a = a.as_ref();
        let _ = write!(self.0, "${}\r\n", a.len());
        self.0.extend_from_slice(a);
        self.0.extend_from_slice(b"\r\n");
        self
    }

    fn num(&mut self, n: impl std::fmt::Display) -> &mut Packed {
        let mut digits = [0u8; 24];
        let len = {
            let mut w = &mut digits[..];
            let _ = write!(w, "{n}");
            24 - w.len()
        };
        self.arg(&digits[..len])
    }
}

/// How long a WAIT for replicas may take, in milliseconds: half the command timeout.
const WAIT_MS: u32 = 250;

/// A write no replica acknowledged: as good as unanswered (it may be lost in a failover).
fn not_replicated() -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "NOREPLICAS: no replica acknowledged the write in time"))
}

/// Whether a failure is one a failover explains: the primary cannot be reached, dropped the
/// connection, stopped taking writes (it became a replica: READONLY; its replicas left it:
/// NOREPLICAS, with `min-replicas-to-write`, or no replica acknowledged the write), or the
/// cluster or Sentinel is still deciding. Script errors carry the server's code inside their
/// text. Every write the store makes is safe to try again (see `Inner::try_run`): a script
/// that stopped halfway is one of these.
fn failing_over(e: &RedisError) -> bool {
    if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() || e.is_timeout() {
        return true;
    }
    let text = e.to_string();
    // A script that meets a key of its slot gone elsewhere (the slot migrates) stops there; it
    // is tried again once the slot has settled.
    ["READONLY", "NOREPLICAS", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "LOADING", "non local key"].iter().any(|code| text.contains(code))
}

/// Whether the server refused the client itself: authentication (a wrong password, none where
/// one is required, a user without the right) or the database number.
fn turned_away(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
        || e.to_string().contains("refused to switch database")
}

fn ms(seconds: f64) -> i64 {
    (seconds * 1000.0).round().clamp(1.0, 1e15) as i64
}

fn bad(what: &str) -> StoreError {
    StoreError::Protocol(format!("unexpected answer from the {what} script"))
}

impl Store for RedisStore {
    fn describe(&self) -> String {
        self.inner.shown.clone()
    }

    fn take(&self, t: &Take<'_>) -> StoreResult<Taken> {
        let s = &self.inner;
        s.own_process();
        let ttl = ms(t.lease_ttl) as u64;
        if ttl > s.max_ttl_ms.load(Ordering::Relaxed) {
            s.max_ttl_ms.fetch_max(ttl, Ordering::Relaxed);
        }
        let (ramp, interval, horizon) = t.warmup.map_or((0, 0, 0), |w| (ms(w.ramp), ms(w.initial_interval), ms(w.horizon)));
        let backs = s.drain();
        // The ids of takes tried before this one whose outcome is unknown (a failover): each
        // try hands them back on every candidate before it takes, so that a lease granted by
        // a try whose answer was lost ends there, never to be held twice.
        let mut earlier: Vec<u64> = Vec::new();
        let mut id = 0;
        let stride = if t.pace.is_some() { 3 } else { 1 };
        let reply = s.try_run(|con| {
            if id != 0 {
                earlier.push(id);
            }
            id = s.next_id();
            // Without a ceiling, one take in 64 reclaims the exit's expired leases.
            let reclaim = if id % 64 == 0 { "1" } else { "0" };
            let n_backs = backs.len() + earlier.len() * t.candidates.len();
            let mut cmd = Packed::new(19 + 3 * n_backs + stride * t.candidates.len());
            // The prefix is the one key, for a cluster to route by (the scripts read ARGV).
            cmd.arg("EVALSHA").arg(s.scripts.take.get_hash()).arg("1").arg(&s.prefix).arg(&s.prefix).arg(t.key.unwrap_or(""));
            cmd.num(t.max_leases.unwrap_or(0)).num(ms(t.lease_ttl)).num(ms(t.session_ttl)).num(ramp).num(interval).num(horizon);
            cmd.num(id).arg(reclaim).arg(if t.renew { "1" } else { "0" });
            cmd.num(t.generation).arg(if t.rebind { "1" } else { "0" }).arg(t.pace.map_or("", |p| p.site)).num(n_backs);
            for hb in &backs {
                cmd.arg(&hb.exit).num(hb.lease).arg(hb.outcome);
            }
            for &old in &earlier {
                for c in t.candidates {
                    cmd.arg(c).num(old).arg("");
                }
            }
            for (i, c) in t.candidates.iter().enumerate() {
                cmd.arg(c);
                if let Some(p) = t.pace {
                    // Milliseconds to the microsecond: "6/s" is 166.667 ms, which rounded to
                    // whole milliseconds would make six requests take more than a second.
                    let (interval, tau) = p.spacing.get(i).copied().unwrap_or((0.0, 0.0));
                    cmd.num(format_args!("{:.3}", interval * 1000.0)).num(format_args!("{:.3}", tau * 1000.0));
                }
            }
            s.eval_packed(con, &s.scripts.take, &mut cmd.0)
        });
        let reply = match reply {
            Ok(reply) => reply,
            Err((e, tried)) => {
                let mut backs = backs;
                if tried && matches!(e, StoreError::Unavailable(_)) {
                    // No answer: the server may have granted the lease (or may yet, running the
                    // command late). Its id goes back on whichever candidate holds it, if any.
                    earlier.push(id);
                }
                if !earlier.is_empty() {
                    for &old in &earlier {
                        backs.extend(t.candidates.iter().map(|c| HandBack::new(c, old, None)));
                    }
                    s.start_flusher(std::process::id());
                }
                s.requeue(backs, &e);
                return Err(e);
            }
        };
        let redis::Value::Array(items) = reply else { return Err(bad("take")) };
        let word = |i: usize| match items.get(i) {
            Some(redis::Value::BulkString(b)) => Some(b.as_slice()),
            Some(redis::Value::SimpleString(s)) => Some(s.as_bytes()),
            _ => None,
        };
        let text = |i: usize| word(i).and_then(|b| std::str::from_utf8(b).ok()).map(str::to_owned);
        match word(0) {
            Some(b"ok") => {
                let exit = text(1).ok_or_else(|| bad("take"))?;
                Ok(Taken::Granted { exit, lease: id, session: word(2) == Some(b"1") })
            }
            Some(b"full") => Ok(Taken::Full { exit: text(1) }),
            Some(b"elsewhere") => Ok(Taken::Elsewhere { exit: text(1).ok_or_else(|| bad("take"))? }),
            Some(b"rotated") => Ok(Taken::Rotated { exit: text(1).ok_or_else(|| bad("take"))? }),
            Some(b"paced") => {
                let (Some(exit), Some(wait)) = (text(1), text(2)) else { return Err(bad("take")) };
                let wait: f64 = wait.parse().map_err(|_| bad("take"))?;
                Ok(Taken::Paced { exit, wait: wait / 1000.0 })
            }
            Some(b"warm") => {
                let (Some(exit), Some(wait)) = (text(1), text(2)) else { return Err(bad("take")) };
                let wait: f64 = wait.parse().map_err(|_| bad("take"))?;
                Ok(Taken::WarmingUp { exit, wait: wait / 1000.0 })
            }
            _ => Err(bad("take")),
        }
    }

    fn hand_back(&self, exit: &str, lease: u64, outcome: Option<Outcome>) -> StoreResult<()> {
        let s = &self.inner;
        let pid = s.own_process();
        let waiting = s.queue(pid, HandBack::new(exit, lease, outcome));
        // While sends fail, the flusher retries with a pause; a caller would wait on each try.
        if s.stuck.load(Ordering::Relaxed) {
            return s.backlog();
        }
        if waiting >= MAX_PENDING || s.no_flusher.load(Ordering::Relaxed) {
            return s.flush();
        }
        Ok(())
    }

    fn backlog(&self) -> StoreResult<()> {
        self.inner.backlog()
    }

    fn give_back(&self, exit: &str, lease: u64, outcome: Option<Outcome>) -> StoreResult<bool> {
        let s = &self.inner;
        let one = [HandBack::new(exit, lease, outcome)];
        Ok(s.with(|con| s.send_backs(con, &one))? == 1)
    }

    fn session(&self, key: &str) -> StoreResult<Option<String>> {
        let k = format!("{}sess:{key}", self.inner.prefix);
        let bound: Option<String> = self.inner.with(|con| redis::cmd("GET").arg(&k).query(con))?;
        // A gateway slot's session carries its token generation after the exit (take.lua).
        Ok(bound.map(|b| match b.split_once('\u{1}') {
            Some((exit, _)) => exit.to_owned(),
            None => b,
        }))
    }

    fn end_session(&self, key: &str) -> StoreResult<bool> {
        let k = format!("{}sess:{key}", self.inner.prefix);
        let n: i64 = self.inner.with(|con| {
            let n = redis::cmd("DEL").arg(&k).query(con)?;
            self.inner.replicated(con).map(|()| n)
        })?;
        Ok(n == 1)
    }

    fn publish(&self, v: &Verdict, cap: u32) -> StoreResult<bool> {
        let hold = if v.hold.is_finite() { (v.hold * 1000.0).round().max(0.0) as i64 } else { -1 };
        let seq: i64 = self.inner.with(|con| {
            let mut inv = self.inner.scripts.publish.prepare_invoke();
            inv.key(&self.inner.prefix)
                .arg(&self.inner.prefix)
                .arg(&v.exit)
                .arg(&v.site)
                .arg(state_code(v.state))
                .arg(hold)
                .arg(v.origin)
                .arg(cap)
                .arg(if ejects(v.state) { "1" } else { "0" })
                .arg(v.pace.map_or(String::new(), |r| r.to_string()));
            let seq = inv.invoke(con)?;
            self.inner.replicated(con).map(|()| seq)
        })?;
        Ok(seq > 0)
    }

    fn verdicts(&self, since: u64) -> StoreResult<(Vec<Verdict>, u64)> {
        let answer: Vec<String> =
            self.inner.with(|con| self.inner.scripts.verdicts.key(&self.inner.prefix).arg(&self.inner.prefix).arg(since).invoke(con))?;
        let [now, last, rest @ ..] = answer.as_slice() else { return Err(bad("verdicts")) };
        let now: f64 = now.parse().map_err(|_| bad("verdicts"))?;
        let last: u64 = last.parse().map_err(|_| bad("verdicts"))?;
        let mut out = Vec::with_capacity(rest.len() / 2);
        for pair in rest.chunks_exact(2) {
            let (exit, site) = pair[0].split_once('\u{1f}').ok_or_else(|| bad("verdicts"))?;
            let site = site.strip_suffix("\u{1f}pace").unwrap_or(site);
            let fields: Vec<&str> = pair[1].split('\u{1f}').collect();
            let (seq, state, until, origin, pace) = match fields.as_slice() {
                [seq, state, until, origin] => (seq, state, until, origin, None),
                [seq, state, until, origin, pace] => (seq, state, until, origin, Some(pace.parse::<f64>().map_err(|_| bad("verdicts"))?)),
                _ => return Err(bad("verdicts")),
            };
            let hold = match *until {
                "+inf" => f64::INFINITY,
                u => ((u.parse::<f64>().map_err(|_| bad("verdicts"))? - now) / 1000.0).max(0.0),
            };
            out.push(Verdict {
                exit: exit.to_owned(),
                site: site.to_owned(),
                state: state_of(state).ok_or_else(|| bad("verdicts"))?,
                hold,
                origin: origin.parse().map_err(|_| bad("verdicts"))?,
                seq: seq.parse().map_err(|_| bad("verdicts"))?,
                pace,
            });
        }
        out.sort_by_key(|v| v.seq);
        Ok((out, last))
    }

    fn counts(&self, exits: &[&str]) -> StoreResult<Vec<ExitCounts>> {
        let answer: Vec<String> = self.inner.with(|con| {
            let mut inv = self.inner.scripts.counts.prepare_invoke();
            inv.key(&self.inner.prefix).arg(&self.inner.prefix);
            for e in exits {
                inv.arg(*e);
            }
            inv.invoke(con)
        })?;
        let mut out = Vec::with_capacity(exits.len());
        let mut it = answer.iter();
        for _ in exits {
            let n: usize = it.next().and_then(|n| n.parse().ok()).ok_or_else(|| bad("counts"))?;
            let mut c = ExitCounts { active: it.next().and_then(|a| a.parse().ok()).ok_or_else(|| bad("counts"))?, ..Default::default() };
            for _ in 0..n / 2 {
                let (Some(field), Some(value)) = (it.next(), it.next()) else { return Err(bad("counts")) };
                let value: u64 = value.parse().map_err(|_| bad("counts"))?;
                if field == "leases" {
                    c.leases = value;
                } else if let Some(o) = OUTCOMES.iter().find(|o| o.name() == field) {
                    c.outcomes[*o as usize] = value;
                }
            }
            out.push(c);
        }
        Ok(out)
    }
}
