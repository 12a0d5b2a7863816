//! The store for a fleet: every decision is one Lua script run atomically on a Redis server,
//! with the server's `TIME` as the one clock. `redis::Script` sends EVALSHA and loads the
//! script again when the server answers NOSCRIPT (a flushed script cache, a restart).
//!
//! A release needs no answer (a late one changes nothing on the server), so its hand-back is
//! sent without waiting, and its reply is read behind the next take on that connection: a
//! lease pair waits on the network once.
//!
//! Reaching the server never blocks a caller for long: connecting gives up after 250 ms, a
//! command after 500 ms, and after a failure no one tries again for a second, so a fleet whose
//! Redis is down pays nothing per lease while it serves from local state.

use super::{ejects, state_code, state_of, ExitCounts, Store, StoreError, StoreResult, Take, Taken, Verdict};
use crate::error::{Error, Result};
use crate::outcome::{Outcome, OUTCOMES};
use crate::proxy::mask_raw;
use parking_lot::Mutex;
use redis::{Connection, IntoConnectionInfo, RedisError, Script};
use std::time::{Duration, Instant};

const CONNECT_TIMEOUT: Duration = Duration::from_millis(250);
const IO_TIMEOUT: Duration = Duration::from_millis(500);
const RETRY_AFTER: Duration = Duration::from_secs(1);

struct Scripts {
    take: Script,
    give_back: Script,
    publish: Script,
    verdicts: Script,
    counts: Script,
}

/// A connection and the hand-backs sent on it whose replies are still unread.
struct Conn {
    con: Connection,
    unread: Vec<HandBack>,
}

/// What a hand-back needs to be sent again, should the server have lost its script.
struct HandBack {
    exit: String,
    lease: u64,
    outcome: &'static str,
}

/// Unread replies a connection may collect before they are read (bounds what a failure loses).
const MAX_UNREAD: usize = 32;

pub struct RedisStore {
    client: redis::Client,
    /// Every key of the namespace starts with this; the braces keep them in one cluster slot.
    prefix: String,
    shown: String,
    /// Secrets of the URL, scrubbed from any error text before it leaves this module.
    secrets: Vec<String>,
    idle: Mutex<Vec<Conn>>,
    /// After a failure, when to try the server again.
    retry_at: Mutex<Option<Instant>>,
    scripts: Scripts,
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
            let _ = shown.set_password(Some("[secure]"));
        }
        // Unix socket URLs carry their password as a query parameter.
        if parsed.query_pairs().any(|(k, _)| k == "pass" || k == "password") {
            secrets.extend(parsed.query_pairs().filter(|(k, _)| k == "pass" || k == "password").map(|(_, v)| v.into_owned()));
            let kept: Vec<(String, String)> = parsed.query_pairs().map(|(k, v)| if k == "pass" || k == "password" { (k.into_owned(), "[secure]".to_owned()) } else { (k.into_owned(), v.into_owned()) }).collect();
            shown.query_pairs_mut().clear().extend_pairs(kept);
        }
        let shown = shown.to_string().replace("%5Bsecure%5D", "[secure]");
        let bad_url = |e: RedisError| Error::BadInput(format!("store {shown}: {}", scrub(&e.to_string(), &secrets)));
        // TCP_NODELAY: a release's hand-back and the next lease's take are two small writes in
        // a row; Nagle's algorithm would hold the second until the first is acknowledged.
        let info = url.into_connection_info().map_err(bad_url)?;
        let info = info.set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
        let client = redis::Client::open(info).map_err(bad_url)?;
        Ok(RedisStore {
            client,
            prefix: format!("exitpool:{{{namespace}}}:"),
            shown,
            secrets,
            idle: Mutex::new(Vec::new()),
            retry_at: Mutex::new(None),
            scripts: Scripts {
                take: Script::new(include_str!("lua/take.lua")),
                give_back: Script::new(include_str!("lua/give_back.lua")),
                publish: Script::new(include_str!("lua/publish.lua")),
                verdicts: Script::new(include_str!("lua/verdicts.lua")),
                counts: Script::new(include_str!("lua/counts.lua")),
            },
        })
    }

    /// Runs `f` on an idle connection (or a new one), keeping the connection only if it
    /// came through unharmed.
    fn with<T>(&self, f: impl FnOnce(&mut Connection) -> redis::RedisResult<T>) -> StoreResult<T> {
        let mut conn = self.checkout()?;
        if let Err(e) = self.settle(&mut conn).and_then(|again| self.redo(&mut conn.con, again)) {
            return Err(self.failed(e));
        }
        match f(&mut conn.con) {
            Ok(v) => {
                self.idle.lock().push(conn);
                Ok(v)
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    fn checkout(&self) -> StoreResult<Conn> {
        let pooled = self.idle.lock().pop();
        match pooled {
            Some(c) => Ok(c),
            None => Ok(Conn { con: self.connect()?, unread: Vec::new() }),
        }
    }

    /// Reads the replies of the hand-backs sent on this connection; returns those the server
    /// could not run because its script cache was flushed (NOSCRIPT), to be sent again once
    /// nothing else is in flight. Other answers are not needed (a late hand-back changes
    /// nothing on the server); only a broken connection is.
    fn settle(&self, conn: &mut Conn) -> redis::RedisResult<Vec<HandBack>> {
        let mut again = Vec::new();
        for hb in std::mem::take(&mut conn.unread) {
            let reply = match conn.con.recv_response() {
                Ok(redis::Value::ServerError(e)) => Err(RedisError::from(e)),
                other => other,
            };
            match reply {
                Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => again.push(hb),
                Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_unrecoverable_error() => return Err(e),
                _ => {}
            }
        }
        Ok(again)
    }

    /// Sends hand-backs again, loading the script first.
    fn redo(&self, con: &mut Connection, again: Vec<HandBack>) -> redis::RedisResult<()> {
        for hb in again {
            let _: i64 = self.scripts.give_back.arg(&self.prefix).arg(&hb.exit).arg(hb.lease).arg(hb.outcome).invoke(con)?;
        }
        Ok(())
    }

    /// Sends an EVALSHA first and only then reads the replies of the hand-backs sent before
    /// it, then its own: a release's hand-back and the next lease's take share one wait.
    /// A flushed script cache (NOSCRIPT) loads the script and sends again, once.
    fn eval_behind_hand_backs<T: redis::FromRedisValue>(&self, script: &Script, cmd: &redis::Cmd) -> StoreResult<T> {
        let packed = cmd.get_packed_command();
        let mut conn = self.checkout()?;
        for attempt in 0..2 {
            let mut again = Vec::new();
            let sent = conn
                .con
                .send_packed_command(&packed)
                .and_then(|()| self.settle(&mut conn))
                .and_then(|a| {
                    again = a;
                    conn.con.recv_response()
                })
                .and_then(|v| self.redo(&mut conn.con, std::mem::take(&mut again)).map(|()| v));
            let reply = match sent {
                Ok(redis::Value::ServerError(e)) => Err(RedisError::from(e)),
                other => other,
            };
            match reply {
                Ok(v) => {
                    self.idle.lock().push(conn);
                    return redis::from_redis_value(v).map_err(|e| StoreError::Protocol(format!("{}: {e}", self.shown)));
                }
                Err(e) if attempt == 0 && e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                    if let Err(e) = script.load(&mut conn.con) {
                        return Err(self.failed(e));
                    }
                }
                Err(e) => return Err(self.failed(e)),
            }
        }
        Err(StoreError::Protocol(format!("{}: the script would not load", self.shown)))
    }

    fn connect(&self) -> StoreResult<Connection> {
        if let Some(at) = *self.retry_at.lock() {
            if Instant::now() < at {
                return Err(StoreError::Unavailable(format!("{} did not answer; trying again shortly", self.shown)));
            }
        }
        let mut con = self.client.get_connection_with_timeout(CONNECT_TIMEOUT).map_err(|e| self.failed(e))?;
        con.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| self.failed(e))?;
        con.set_write_timeout(Some(IO_TIMEOUT)).map_err(|e| self.failed(e))?;
        // Hand-backs are sent by hash without waiting: the script should be there already.
        self.scripts.give_back.load(&mut con).map_err(|e| self.failed(e))?;
        *self.retry_at.lock() = None;
        Ok(con)
    }

    fn failed(&self, e: RedisError) -> StoreError {
        let why = scrub(&e.to_string(), &self.secrets);
        let unreachable = e.is_io_error() || e.is_connection_refusal() || e.is_timeout() || e.is_connection_dropped() || e.is_unrecoverable_error() || why.contains("LOADING");
        if unreachable {
            // Every pooled connection went to the same server: none is worth trying now.
            self.idle.lock().clear();
            *self.retry_at.lock() = Some(Instant::now() + RETRY_AFTER);
            StoreError::Unavailable(format!("{}: {why}", self.shown))
        } else {
            StoreError::Protocol(format!("{}: {why}", self.shown))
        }
    }
}

fn scrub(text: &str, secrets: &[String]) -> String {
    let mut s = text.to_owned();
    for secret in secrets.iter().filter(|x| !x.is_empty()) {
        s = s.replace(secret.as_str(), "***");
    }
    s
}

fn ms(seconds: f64) -> i64 {
    (seconds * 1000.0).round().clamp(1.0, 1e15) as i64
}

fn bad(what: &str) -> StoreError {
    StoreError::Protocol(format!("unexpected answer from the {what} script"))
}

impl Store for RedisStore {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    fn take(&self, t: &Take<'_>) -> StoreResult<Taken> {
        let (ramp, interval, horizon) = t.warmup.map_or((0, 0, 0), |w| (ms(w.ramp), ms(w.initial_interval), ms(w.horizon)));
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.scripts.take.get_hash()).arg(0);
        cmd.arg(&self.prefix).arg(t.key.unwrap_or("")).arg(t.max_leases.unwrap_or(0)).arg(ms(t.lease_ttl)).arg(ms(t.session_ttl));
        cmd.arg(ramp).arg(interval).arg(horizon);
        for c in t.candidates {
            cmd.arg(*c);
        }
        let answer: Vec<String> = self.eval_behind_hand_backs(&self.scripts.take, &cmd)?;
        let mut it = answer.into_iter();
        match it.next().as_deref() {
            Some("ok") => {
                let (Some(exit), Some(lease), Some(session)) = (it.next(), it.next(), it.next()) else { return Err(bad("take")) };
                let lease = lease.parse().map_err(|_| bad("take"))?;
                Ok(Taken::Granted { exit, lease, session: session == "1" })
            }
            Some("full") => Ok(Taken::Full { exit: it.next() }),
            Some("elsewhere") => Ok(Taken::Elsewhere { exit: it.next().ok_or_else(|| bad("take"))? }),
            Some("warm") => {
                let (Some(exit), Some(wait)) = (it.next(), it.next()) else { return Err(bad("take")) };
                let wait: f64 = wait.parse().map_err(|_| bad("take"))?;
                Ok(Taken::WarmingUp { exit, wait: wait / 1000.0 })
            }
            _ => Err(bad("take")),
        }
    }

    fn hand_back(&self, exit: &str, lease: u64, outcome: Option<Outcome>) -> StoreResult<()> {
        let mut conn = self.checkout()?;
        if conn.unread.len() >= MAX_UNREAD {
            if let Err(e) = self.settle(&mut conn).and_then(|again| self.redo(&mut conn.con, again)) {
                return Err(self.failed(e));
            }
        }
        let outcome = outcome.map_or("", Outcome::name);
        let packed = redis::cmd("EVALSHA").arg(self.scripts.give_back.get_hash()).arg(0).arg(&self.prefix).arg(exit).arg(lease).arg(outcome).get_packed_command();
        match conn.con.send_packed_command(&packed) {
            Ok(()) => {
                conn.unread.push(HandBack { exit: exit.to_owned(), lease, outcome });
                self.idle.lock().push(conn);
                Ok(())
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    fn give_back(&self, exit: &str, lease: u64, outcome: Option<Outcome>) -> StoreResult<bool> {
        let ended: i64 = self.with(|con| self.scripts.give_back.arg(&self.prefix).arg(exit).arg(lease).arg(outcome.map_or("", Outcome::name)).invoke(con))?;
        Ok(ended == 1)
    }

    fn session(&self, key: &str) -> StoreResult<Option<String>> {
        let k = format!("{}sess:{key}", self.prefix);
        self.with(|con| redis::cmd("GET").arg(&k).query(con))
    }

    fn end_session(&self, key: &str) -> StoreResult<bool> {
        let k = format!("{}sess:{key}", self.prefix);
        let n: i64 = self.with(|con| redis::cmd("DEL").arg(&k).query(con))?;
        Ok(n == 1)
    }

    fn publish(&self, v: &Verdict, cap: u32) -> StoreResult<bool> {
        let hold = if v.hold.is_finite() { (v.hold * 1000.0).round().max(0.0) as i64 } else { -1 };
        let seq: i64 = self.with(|con| {
            let mut inv = self.scripts.publish.prepare_invoke();
            inv.arg(&self.prefix).arg(&v.exit).arg(&v.site).arg(state_code(v.state)).arg(hold).arg(v.origin).arg(cap).arg(if ejects(v.state) { "1" } else { "0" });
            inv.invoke(con)
        })?;
        Ok(seq > 0)
    }

    fn verdicts(&self, since: u64) -> StoreResult<(Vec<Verdict>, u64)> {
        let answer: Vec<String> = self.with(|con| self.scripts.verdicts.arg(&self.prefix).arg(since).invoke(con))?;
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
        let answer: Vec<String> = self.with(|con| {
            let mut inv = self.scripts.counts.prepare_invoke();
            inv.arg(&self.prefix);
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
