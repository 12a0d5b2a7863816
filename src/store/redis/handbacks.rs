//! The Redis store's released leases on their way back to the server: the queue they wait in,
//! the flusher thread that sends what no command carried, and what a fork must do about both
//! (see the store's module documentation).

use super::topology::Con;
use super::{Inner, RETRY_AFTER};
use crate::fork::{self, Mutex};
use crate::outcome::Outcome;
use crate::store::{StoreError, StoreResult};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a hand-back waits for a command to ride with before it is sent on its own.
const FLUSH_AFTER: Duration = Duration::from_millis(2);

/// How long the flusher keeps looking every `FLUSH_AFTER` with nothing to send before it
/// sleeps until woken: a worker leasing in a loop must not pay a thread wake-up per release.
const PARK_AFTER: Duration = Duration::from_millis(100);

/// Hand-backs waiting at once beyond which the releasing caller sends them itself.
pub(super) const MAX_PENDING: usize = 256;

/// Beyond `lease_ttl`, how long a stuck hand-back is kept before its lease is taken for
/// expired: room for the server's clock to run a little slower than this machine's.
const EXPIRY_SLACK: Duration = Duration::from_secs(5);

/// Every Redis store of this process, for [`flush_all`].
pub(super) static LIVE: Mutex<Vec<std::sync::Weak<Inner>>> = Mutex::new(Vec::new());

/// Sends the waiting hand-backs of every Redis store of this process, waiting for the answer.
/// For a process about to end without dropping its stores (a `multiprocessing` child, which
/// leaves by `os._exit`).
pub fn flush_all() {
    let live: Vec<Arc<Inner>> = LIVE.lock().iter().filter_map(std::sync::Weak::upgrade).collect();
    for store in live {
        let _ = store.flush();
    }
}

/// Takes every lock of every Redis store of this process before a fork (see `crate::fork`):
/// the registry, then each store's `retry_at`, `idle`, `pending`, the order in which the
/// store's own code nests them. `pool::after_fork` lets go of them.
pub(crate) fn before_fork() {
    let live = LIVE.lock();
    let stores: Vec<Arc<Inner>> = live.iter().filter_map(std::sync::Weak::upgrade).collect();
    // SAFETY: the registry is a static; each store is kept (by `keep`) before its locks are held.
    unsafe { fork::hold(live) };
    for s in stores {
        fork::keep(Box::new(s.clone()));
        unsafe {
            fork::hold(s.retry_at.lock());
            fork::hold(s.idle.lock());
            fork::hold(s.pending.lock());
        }
    }
}

/// A released lease whose end the server has not been told yet.
pub(super) struct HandBack {
    pub(super) exit: String,
    pub(super) lease: u64,
    pub(super) outcome: &'static str,
    /// When a send of it first failed.
    pub(super) stuck_since: Option<Instant>,
}

impl HandBack {
    pub(super) fn new(exit: &str, lease: u64, outcome: Option<Outcome>) -> HandBack {
        HandBack { exit: exit.to_owned(), lease, outcome: outcome.map_or("", Outcome::name), stuck_since: None }
    }
}

#[derive(Default)]
pub(super) struct HandBackQueue {
    pub(super) backs: Vec<HandBack>,
    /// When the oldest of `backs` started waiting.
    pub(super) since: Option<Instant>,
    /// The flusher sleeps on `wake` (after `PARK_AFTER` with nothing to send) until woken.
    pub(super) parked: bool,
    pub(super) closed: bool,
    /// Why the last send of hand-backs failed; cleared when a command reaches the server.
    pub(super) failed: Option<String>,
}

fn stuck_leases(n: usize) -> String {
    format!("{n} released lease{} not yet handed back (their slots stay held fleet-wide until it answers)", if n == 1 { "" } else { "s" })
}

impl Inner {
    /// Puts hand-backs whose send failed back at the head of the queue, ahead of newer ones,
    /// for the next command (see the module documentation); drops those stuck for longer than
    /// the longest `lease_ttl`, whose leases the server has reclaimed or will.
    pub(super) fn requeue(&self, mut backs: Vec<HandBack>, why: &StoreError) {
        let now = Instant::now();
        let keep = Duration::from_millis(self.max_ttl_ms.load(Ordering::Relaxed)) + EXPIRY_SLACK;
        backs.retain_mut(|hb| now.saturating_duration_since(*hb.stuck_since.get_or_insert(now)) <= keep);
        let parked = {
            let mut p = self.pending.lock();
            backs.append(&mut p.backs);
            p.backs = backs;
            if p.backs.is_empty() {
                return;
            }
            p.failed = Some(match why {
                StoreError::Unavailable(w) | StoreError::Protocol(w) => w.clone(),
            });
            self.stuck.store(true, Ordering::Relaxed);
            p.since.get_or_insert(now);
            p.parked
        };
        if parked {
            self.wake.notify_one();
        }
    }

    /// Whether hand-backs wait because their send failed, and why.
    pub(super) fn backlog(&self) -> StoreResult<()> {
        if !self.stuck.load(Ordering::Relaxed) {
            return Ok(());
        }
        let p = self.pending.lock();
        match (&p.failed, p.backs.len()) {
            (Some(why), n) if n > 0 => Err(StoreError::Unavailable(format!("{why}; {}", stuck_leases(n)))),
            _ => Ok(()),
        }
    }

    /// A failure's message, saying how many released leases are stuck, if any: the reason to
    /// expect `NoExitAvailable` elsewhere in the fleet meanwhile.
    pub(super) fn noting_backlog(&self, why: String) -> String {
        if !self.stuck.load(Ordering::Relaxed) {
            return why;
        }
        match self.pending.lock().backs.len() {
            0 => why,
            n => format!("{why}; {}", stuck_leases(n)),
        }
    }

    /// This process's id, after forgetting what a parent process left behind (see the module
    /// documentation): its connections are its parent's sockets, its hand-backs the parent's
    /// leases, and its salt would repeat the parent's lease ids.
    pub(super) fn own_process(&self) -> u32 {
        let pid = std::process::id();
        if self.process.load(Ordering::Acquire) != pid {
            // Dropping a connection closes this process's copy of the socket only.
            self.idle.lock().clear();
            {
                let mut p = self.pending.lock();
                p.backs.clear();
                p.since = None;
                p.parked = false;
                p.failed = None;
            }
            self.stuck.store(false, Ordering::Relaxed);
            *self.retry_at.lock() = None;
            self.salt.store(crate::seed::random_seed() ^ u64::from(pid), Ordering::Relaxed);
            self.ids.store(0, Ordering::Relaxed);
            self.process.store(pid, Ordering::Release);
        }
        pid
    }

    /// Starts this process's flusher if it has none: a forked child has its parent's store but
    /// not its threads.
    pub(super) fn start_flusher(self: &Arc<Self>, pid: u32) {
        let started = self.flusher.load(Ordering::Acquire);
        if started != pid && self.flusher.compare_exchange(started, pid, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            let me = Arc::clone(self);
            let spawned = std::thread::Builder::new().name("exitpool-store".into()).spawn(move || me.flush_behind());
            self.no_flusher.store(spawned.is_err(), Ordering::Relaxed);
        }
    }

    /// Queues a hand-back for the next command or the flusher; returns how many wait.
    pub(super) fn queue(self: &Arc<Self>, pid: u32, hb: HandBack) -> usize {
        self.start_flusher(pid);
        let (waiting, parked) = {
            let mut p = self.pending.lock();
            p.backs.push(hb);
            p.since.get_or_insert_with(Instant::now);
            (p.backs.len(), p.parked)
        };
        if parked {
            self.wake.notify_one();
        }
        waiting
    }

    pub(super) fn drain(&self) -> Vec<HandBack> {
        let mut p = self.pending.lock();
        p.since = None;
        std::mem::take(&mut p.backs)
    }

    /// Ends leases in one script run; returns how many were live.
    pub(super) fn send_backs(&self, con: &mut Con, backs: &[HandBack]) -> redis::RedisResult<i64> {
        let mut inv = self.scripts.give_back.prepare_invoke();
        // The prefix is the one key, for a cluster to route by (the scripts read ARGV).
        inv.key(&self.prefix).arg(&self.prefix);
        for hb in backs {
            inv.arg(&hb.exit).arg(hb.lease).arg(hb.outcome);
        }
        let live = inv.invoke(con)?;
        self.replicated(con).map(|()| live)
    }

    pub(super) fn flush(&self) -> StoreResult<()> {
        self.own_process();
        let backs = self.drain();
        if backs.is_empty() {
            return Ok(());
        }
        let r = self.run(|con| self.send_backs(con, &backs)).map(drop);
        if let Err(e) = &r {
            self.requeue(backs, e);
        }
        r
    }

    /// Sends what waited `FLUSH_AFTER` without a command to ride with; ends with the store.
    /// A worker leasing in a loop keeps its hand-backs younger than that, so this thread
    /// then only looks every `FLUSH_AFTER`, never competing for the server, and is never
    /// woken by a release; it sleeps until woken only once there was nothing to send for
    /// `PARK_AFTER`.
    pub(super) fn flush_behind(self: Arc<Self>) {
        let mut busy = Instant::now();
        loop {
            let due = {
                let mut p = self.pending.lock();
                if p.since.is_none() && busy.elapsed() >= PARK_AFTER {
                    p.parked = true;
                    while p.since.is_none() && !p.closed {
                        p = self.wake.wait(p);
                    }
                    p.parked = false;
                }
                if p.closed {
                    return;
                }
                if p.since.is_some() {
                    busy = Instant::now();
                }
                p.since.map_or(Instant::now() + FLUSH_AFTER, |t| t + FLUSH_AFTER)
            };
            let wait = due.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                if self.flush().is_err() {
                    // Kept for the next try (see `requeue`), a second from now, or sooner with
                    // the next command that reaches the server.
                    let retry = Instant::now() + RETRY_AFTER;
                    let mut p = self.pending.lock();
                    while !p.closed && Instant::now() < retry {
                        let (q, timed_out) = self.wake.wait_until(p, retry);
                        p = q;
                        if timed_out {
                            break;
                        }
                    }
                }
            } else {
                std::thread::sleep(wait);
            }
        }
    }
}
