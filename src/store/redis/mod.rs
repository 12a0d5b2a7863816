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
//! A store that the server turns away when it is opened (a wrong password, none where one is
//! required, a database number out of range) is refused there and then: serving from local
//! state would silently make every ceiling a per-process one. Only a server that cannot be
//! reached is left for later.

mod handbacks;

pub(crate) use handbacks::before_fork;
pub use handbacks::flush_all;
use handbacks::{HandBack, HandBackQueue, LIVE, MAX_PENDING};

use super::{ejects, state_code, state_of, ExitCounts, Store, StoreError, StoreResult, Take, Taken, Verdict};
use crate::error::{Error, Result};
use crate::fork::{Condvar, Mutex};
use crate::mask::{mask_raw, scrub, MASK};
use crate::outcome::{Outcome, OUTCOMES};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use redis::{Connection, ConnectionLike, IntoConnectionInfo, RedisError, Script};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CONNECT_TIMEOUT: Duration = Duration::from_millis(250);
const IO_TIMEOUT: Duration = Duration::from_millis(500);
const RETRY_AFTER: Duration = Duration::from_secs(1);

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
    client: redis::Client,
    /// Every key of the namespace starts with this; the braces keep them in one cluster slot.
    prefix: String,
    shown: String,
    /// Secrets of the URL, scrubbed from any error text before it leaves this module.
    secrets: Vec<String>,
    idle: Mutex<Vec<Connection>>,
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
}

impl RedisStore {
    pub fn open(url: &str, namespace: &str) -> Result<RedisStore> {
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
                .map(
                    |(k, v)| {
                        if k == "pass" || k == "password" {
                            (k.into_owned(), MASK.to_owned())
                        } else {
                            (k.into_owned(), v.into_owned())
                        }
                    },
                )
                .collect();
            shown.query_pairs_mut().clear().extend_pairs(kept);
        }
        // The URL writer percent-encodes the mask's brackets; they are shown as typed.
        let shown = shown.to_string().replace(&utf8_percent_encode(MASK, NON_ALPHANUMERIC).to_string(), MASK);
        let bad_url = |e: RedisError| Error::BadInput(format!("store {shown}: {}", scrub(&e.to_string(), &secrets)));
        // TCP_NODELAY: commands are small and each one is waited on; Nagle's algorithm would
        // hold a write behind an unacknowledged one.
        let info = url.into_connection_info().map_err(bad_url)?;
        let info = info.set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
        let client = redis::Client::open(info).map_err(bad_url)?;
        let store = RedisStore {
            inner: Arc::new(Inner {
                client,
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
    fn with<T>(&self, f: impl FnOnce(&mut Connection) -> redis::RedisResult<T>) -> StoreResult<T> {
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
    fn run<T>(&self, f: impl FnOnce(&mut Connection) -> redis::RedisResult<T>) -> StoreResult<T> {
        self.try_run(f).map_err(|(e, _)| e)
    }

    /// [`Inner::run`], saying on failure whether `f` was tried: its command may then have
    /// reached the server, and may run there yet.
    fn try_run<T>(&self, f: impl FnOnce(&mut Connection) -> redis::RedisResult<T>) -> std::result::Result<T, (StoreError, bool)> {
        let pooled = self.idle.lock().pop();
        let mut con = match pooled {
            Some(c) => c,
            None => self.connect().map_err(|e| (e, false))?,
        };
        match f(&mut con) {
            Ok(v) => {
                self.idle.lock().push(con);
                if self.stuck.load(Ordering::Relaxed) {
                    self.stuck.store(false, Ordering::Relaxed);
                    self.pending.lock().failed = None;
                }
                Ok(v)
            }
            Err(e) => Err((self.failed(e), true)),
        }
    }

    /// Sends a command packed by hand that runs `script` by its hash, loading the script and
    /// sending again if the server has lost it (NOSCRIPT: a flushed cache, a restart).
    fn eval_packed(&self, con: &mut Connection, script: &Script, packed: &[u8]) -> redis::RedisResult<redis::Value> {
        let mut loaded = false;
        loop {
            let reply = match con.req_packed_command(packed) {
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

    /// A lease id: the counter through a bijective mixer (splitmix64), salted per store.
    fn next_id(&self) -> u64 {
        let salt = self.salt.load(Ordering::Relaxed);
        let mut z = salt.wrapping_add(self.ids.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)).max(1)
    }

    fn connect(&self) -> StoreResult<Connection> {
        let retry_at = *self.retry_at.lock();
        if let Some(at) = retry_at {
            if Instant::now() < at {
                return Err(StoreError::Unavailable(self.noting_backlog(format!("{} did not answer; trying again shortly", self.shown))));
            }
        }
        let con = self.open_connection().map_err(|e| self.failed(e))?;
        *self.retry_at.lock() = None;
        Ok(con)
    }

    fn open_connection(&self) -> redis::RedisResult<Connection> {
        let con = self.client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
        con.set_read_timeout(Some(IO_TIMEOUT))?;
        con.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(con)
    }

    /// Connects once as the store is opened: a server that turns this store away refuses it
    /// (see the module documentation); one that cannot be reached is tried again later.
    fn probe(&self) -> Result<()> {
        match self.open_connection().and_then(|mut con| redis::cmd("PING").query::<()>(&mut con).map(|()| con)) {
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
            || why.contains("LOADING");
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
        let id = s.next_id();
        // Without a ceiling, one take in 64 reclaims the exit's expired leases.
        let reclaim = if id % 64 == 0 { "1" } else { "0" };
        let backs = s.drain();
        let stride = if t.pace.is_some() { 3 } else { 1 };
        let mut cmd = Packed::new(18 + 3 * backs.len() + stride * t.candidates.len());
        cmd.arg("EVALSHA").arg(s.scripts.take.get_hash()).arg("0").arg(&s.prefix).arg(t.key.unwrap_or(""));
        cmd.num(t.max_leases.unwrap_or(0)).num(ms(t.lease_ttl)).num(ms(t.session_ttl)).num(ramp).num(interval).num(horizon);
        cmd.num(id).arg(reclaim).arg(if t.renew { "1" } else { "0" });
        cmd.num(t.generation).arg(if t.rebind { "1" } else { "0" }).arg(t.pace.map_or("", |p| p.site)).num(backs.len());
        for hb in &backs {
            cmd.arg(&hb.exit).num(hb.lease).arg(hb.outcome);
        }
        for (i, c) in t.candidates.iter().enumerate() {
            cmd.arg(c);
            if let Some(p) = t.pace {
                // Milliseconds to the microsecond: "6/s" is 166.667 ms, which rounded to whole
                // milliseconds would make six requests take more than a second.
                let (interval, tau) = p.spacing.get(i).copied().unwrap_or((0.0, 0.0));
                cmd.num(format_args!("{:.3}", interval * 1000.0)).num(format_args!("{:.3}", tau * 1000.0));
            }
        }
        let reply = match s.try_run(|con| s.eval_packed(con, &s.scripts.take, &cmd.0)) {
            Ok(reply) => reply,
            Err((e, tried)) => {
                let mut backs = backs;
                if tried && matches!(e, StoreError::Unavailable(_)) {
                    // No answer: the server may have granted the lease (or may yet, running the
                    // command late). Its id goes back on whichever candidate holds it, if any.
                    backs.extend(t.candidates.iter().map(|c| HandBack::new(c, id, None)));
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
        let n: i64 = self.inner.with(|con| redis::cmd("DEL").arg(&k).query(con))?;
        Ok(n == 1)
    }

    fn publish(&self, v: &Verdict, cap: u32) -> StoreResult<bool> {
        let hold = if v.hold.is_finite() { (v.hold * 1000.0).round().max(0.0) as i64 } else { -1 };
        let seq: i64 = self.inner.with(|con| {
            let mut inv = self.inner.scripts.publish.prepare_invoke();
            inv.arg(&self.inner.prefix)
                .arg(&v.exit)
                .arg(&v.site)
                .arg(state_code(v.state))
                .arg(hold)
                .arg(v.origin)
                .arg(cap)
                .arg(if ejects(v.state) { "1" } else { "0" });
            inv.invoke(con)
        })?;
        Ok(seq > 0)
    }

    fn verdicts(&self, since: u64) -> StoreResult<(Vec<Verdict>, u64)> {
        let answer: Vec<String> = self.inner.with(|con| self.inner.scripts.verdicts.arg(&self.inner.prefix).arg(since).invoke(con))?;
        let [now, last, rest @ ..] = answer.as_slice() else { return Err(bad("verdicts")) };
        let now: f64 = now.parse().map_err(|_| bad("verdicts"))?;
        let last: u64 = last.parse().map_err(|_| bad("verdicts"))?;
        let mut out = Vec::with_capacity(rest.len() / 2);
        for pair in rest.chunks_exact(2) {
            let (exit, site) = pair[0].split_once('\u{1f}').ok_or_else(|| bad("verdicts"))?;
            let fields: Vec<&str> = pair[1].split('\u{1f}').collect();
            let [seq, state, until, origin] = fields.as_slice() else { return Err(bad("verdicts")) };
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
            });
        }
        out.sort_by_key(|v| v.seq);
        Ok((out, last))
    }

    fn counts(&self, exits: &[&str]) -> StoreResult<Vec<ExitCounts>> {
        let answer: Vec<String> = self.inner.with(|con| {
            let mut inv = self.inner.scripts.counts.prepare_invoke();
            inv.arg(&self.inner.prefix);
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
