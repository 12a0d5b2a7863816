//! `state=`: an in-process pool saves what a restart must not forget (the file's layout is
//! `crate::persist`) at an interval and on close, and a new pool resumes from it. A burned
//! exit then stays out for the rest of its backoff across a deploy, instead of going
//! straight back into rotation.

use super::{Pool, State};
use crate::clock::MAX_SETTING_SECONDS;
use crate::error::{Error, Result};
use crate::events::EventKind;
use crate::health::State as Health;
use crate::persist::{self, Resume, Saved, SavedBreaker, SavedCooldown, SavedPace, SavedPairings, SavedSession, Unusable};
use crate::warmup::Pairing;
use parking_lot::{Condvar, Mutex};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Where a pool keeps its state, and the thread that saves it at an interval.
pub(super) struct Keeper {
    path: PathBuf,
    /// The process that keeps the state: a forked child has a copy of the pool, diverging
    /// from the parent's, and must not save it over the parent's file.
    pid: u32,
    stopped: Mutex<bool>,
    wake: Condvar,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Pool {
    /// Resumes from the state saved at `path` (a missing, unreadable or foreign file is an
    /// event and a clean start), then saves there every `interval` seconds, in a thread of its
    /// own, and on [`Pool::close`]. Only for a pool of its own: a fleet's state lives in its
    /// store.
    pub fn keep_state(self: &Arc<Pool>, path: PathBuf, interval: f64) -> Result<()> {
        if self.fleet.is_some() {
            return Err(Error::BadInput("state= keeps an in-process pool's state; a fleet's state lives in its store already".into()));
        }
        if !(interval.is_finite() && interval > 0.0 && interval <= MAX_SETTING_SECONDS) {
            return Err(Error::setting(&["state_interval"], format!("{interval} must be a number of seconds > 0 and at most a year")));
        }
        let keeper =
            Arc::new(Keeper { path, pid: std::process::id(), stopped: Mutex::new(false), wake: Condvar::new(), thread: Mutex::new(None) });
        if self.keeper.set(keeper.clone()).is_err() {
            return Err(Error::BadInput("this pool keeps its state in a file already".into()));
        }
        self.resume_from(&keeper.path);
        let pool = Arc::downgrade(self);
        let every = Duration::from_secs_f64(interval);
        let thread = std::thread::Builder::new()
            .name("exitpool-state".into())
            .spawn({
                let keeper = keeper.clone();
                move || save_every(&keeper, &pool, every)
            })
            .map_err(|e| Error::BadInput(format!("cannot start the thread that saves the pool's state: {e}")))?;
        *keeper.thread.lock() = Some(thread);
        Ok(())
    }

    /// Saves the state now (a pool without `state=`, or a forked child's copy of one, has
    /// nothing to do). A failure is an event too: the pool carries on and the next save tries
    /// again.
    pub fn save_state(&self) -> Result<()> {
        let Some(keeper) = self.keeper.get().filter(|k| k.pid == std::process::id()) else { return Ok(()) };
        let saved = self.capture();
        let r = persist::write(&keeper.path, &saved);
        if let Err(e) = &r {
            let now = self.clock.now();
            self.state.lock().board.events.push(now, EventKind::StateSaveFailed, None, None, e.to_string());
        }
        r
    }

    /// Stops saving at an interval and saves one last time. Idempotent; the pool still
    /// serves after it (it only stops keeping its state).
    pub fn close(&self) -> Result<()> {
        let Some(keeper) = self.keeper.get() else { return Ok(()) };
        let was = std::mem::replace(&mut *keeper.stopped.lock(), true);
        keeper.wake.notify_all();
        match keeper.thread.lock().take() {
            // A forked child's copy: the thread is the parent's, and joining it here would wait
            // for a thread this process does not have.
            Some(t) if keeper.pid != std::process::id() => std::mem::forget(t),
            Some(t) if t.thread().id() != std::thread::current().id() => {
                let _ = t.join();
            }
            _ => {}
        }
        if was {
            return Ok(());
        }
        self.save_state()
    }

    /// The state a restart must not forget, its times relative to now.
    fn capture(&self) -> Saved {
        let now = self.clock.now();
        let mut st = self.state.lock();
        st.board.poll(now);
        let saved_at = now + st.unix_offset;
        let st = &*st;
        let live = |h: usize| !st.exits[h].removed;
        // Every site the board has a slot for has a name; `get` all the same, since a save
        // must never panic.
        let name = |s: u32| st.site_names.get(s as usize).map_or_else(String::new, |n| n.to_string());
        let mut health = Vec::new();
        let mut cooldowns = Vec::new();
        for h in (0..st.exits.len()).filter(|&h| live(h)) {
            let exit = &st.exits[h].exit.id;
            let hu = h as u32;
            let tunnel = std::iter::once((None, Some(st.board.tunnel_breaker(hu))));
            let sites = (0..st.board.site_slots()).map(|s| (Some(s), st.board.site_breaker(hu, s)));
            for (site, b) in tunnel.chain(sites) {
                let Some(b) = b.filter(|b| b.state() != Health::Healthy || b.repeats() > 0 || b.failed_returns() > 0) else {
                    continue;
                };
                let remaining = if b.state() == Health::Quarantined { (b.until() - now).max(0.0) } else { 0.0 };
                health.push(SavedBreaker {
                    exit: exit.clone(),
                    site: site.map(name),
                    state: b.state().name().into(),
                    remaining,
                    repeats: b.repeats(),
                    failed_returns: b.failed_returns(),
                });
            }
            for s in 0..st.board.site_slots() {
                if let Some(until) = st.board.cooling_until(hu, s).filter(|&u| u > now) {
                    cooldowns.push(SavedCooldown { exit: exit.clone(), site: Some(name(s)), remaining: until - now });
                }
            }
        }
        let sessions = st
            .sessions
            .iter()
            .filter(|(_, s)| s.expires > now && live(s.exit as usize))
            .map(|(key, s)| SavedSession {
                key: key.to_owned(),
                exit: st.exits[s.exit as usize].exit.id.clone(),
                generation: s.generation,
                remaining: s.expires - now,
            })
            .collect();
        let pacing = st
            .pacer
            .iter()
            .flat_map(|p| p.rows())
            .flat_map(|(s, row)| row.cells().map(move |(h, g)| (s, h, *g)))
            .filter(|&(_, h, _)| st.exits.get(h as usize).is_some_and(|e| !e.removed))
            .map(|(s, h, g)| SavedPace {
                exit: st.exits[h as usize].exit.id.clone(),
                site: name(s),
                rate: g.rate,
                tat: g.tat.is_finite().then_some(g.tat - now),
            })
            .collect();
        let pairings = st.cfg.warmup.as_ref().map(|_| {
            let (seed, entries) = st.pairings.saved();
            SavedPairings { seed, entries: entries.map(|(id, p)| (id, now - p.born, now - p.last)).collect() }
        });
        Saved {
            format: persist::FORMAT.into(),
            version: persist::VERSION,
            saved_at,
            exits: st.exits.iter().map(|s| s.exit.id.clone()).collect(),
            health,
            cooldowns,
            sessions,
            pairings,
            pacing,
        }
    }

    /// Puts back what the file at `path` holds for this pool's exits, or says why not.
    fn resume_from(&self, path: &Path) {
        let now = self.clock.now();
        let read = persist::read(path);
        let mut st = self.state.lock();
        let shown = path.display();
        let read = read.and_then(|saved| match saved.exits.iter().any(|id| st.handle(id).is_ok()) {
            true => Ok(saved),
            false => Err(Unusable::Foreign("none of its exits is in this pool".into())),
        });
        let saved = match read {
            Ok(saved) => saved,
            Err(why) => {
                let kind = if why == Unusable::Missing { EventKind::StateNew } else { EventKind::StateDiscarded };
                let msg = format!("state {shown} not resumed: {why}; starting clean");
                st.board.events.push(now, kind, None, None, msg);
                return;
            }
        };
        let r = Resume::new(saved.saved_at, now, now + st.unix_offset);
        let msg = st.resume(&saved, r, now);
        let msg = format!("state {shown} resumed, saved {:.0} s ago: {msg}", r.elapsed);
        st.board.events.push(now, EventKind::StateResumed, None, None, msg);
    }
}

impl State {
    /// Puts back a saved state's sections for the exits in this pool (others are ignored);
    /// says what it put back.
    fn resume(&mut self, saved: &Saved, r: Resume, now: f64) -> String {
        let site_of = |st: &mut State, name: &str| if name.is_empty() { 0 } else { st.site_id(Some(name)) };
        let mut breakers = 0;
        for b in &saved.health {
            let (Ok(h), Some(to)) = (self.handle(&b.exit), Health::ALL.into_iter().find(|s| s.name() == b.state)) else { continue };
            let site = b.site.as_deref().map(|s| site_of(self, s));
            let hold = if to == Health::Quarantined { (r.ends(b.remaining) - now).max(0.0) } else { 0.0 };
            self.board.resume(h, site, to, hold, b.repeats, b.failed_returns, now);
            breakers += 1;
        }
        let mut cooling = 0;
        for c in &saved.cooldowns {
            let (Ok(h), until) = (self.handle(&c.exit), r.ends(c.remaining)) else { continue };
            if until > now {
                let site = site_of(self, c.site.as_deref().unwrap_or(""));
                self.board.cool(h, site, until);
                cooling += 1;
            }
        }
        // The longest-lived first, so that a bound keeps those.
        let mut sessions: Vec<&SavedSession> = saved.sessions.iter().filter(|s| r.ends(s.remaining) > now).collect();
        sessions.sort_by(|a, b| b.remaining.total_cmp(&a.remaining));
        let room = self.cfg.max_sessions.map_or(usize::MAX, |m| m as usize);
        let mut bound = 0;
        for s in sessions.into_iter().take(room) {
            if let Ok(h) = self.handle(&s.exit) {
                let _ = self.sessions.bind(&s.key, h, s.generation, r.ends(s.remaining));
                bound += 1;
            }
        }
        let mut paced = 0;
        for p in &saved.pacing {
            let Ok(h) = self.handle(&p.exit) else { continue };
            let site = site_of(self, &p.site);
            let tat = p.tat.map_or(f64::NEG_INFINITY, |t| r.ends(t));
            if let Some(pacer) = self.pacer.as_deref_mut().filter(|pacer| pacer.row(site).is_some()) {
                pacer.resume(site, h, p.rate, tat);
                paced += 1;
            }
        }
        let pairings = self.resume_pairings(saved, r);
        let ignored = saved.exits.iter().filter(|id| self.handle(id).is_err()).count();
        format!(
            "{breakers} breakers, {cooling} cooldowns, {paced} pacing budgets, {bound} sessions, {pairings}; \
             {ignored} saved exits not in this pool ignored"
        )
    }

    /// Pairings are kept by exit handle: they come back only when every exit the saved pool
    /// had is at the same handle here (a restart with the same list, or one that adds at the
    /// end), since a pairing put on another exit would skip that exit's warm-up.
    fn resume_pairings(&mut self, saved: &Saved, r: Resume) -> String {
        let Some(p) = saved.pairings.as_ref().filter(|_| self.cfg.warmup.is_some()) else { return "no pairings".into() };
        let same = saved.exits.len() <= self.exits.len() && saved.exits.iter().zip(&self.exits).all(|(id, s)| *id == s.exit.id);
        if !same {
            return format!("{} pairings not resumed (the list's exits moved; they ramp up again)", p.entries.len());
        }
        let entries = p.entries.iter().map(|&(id, born, last)| (id, Pairing { born: r.happened(born), last: r.happened(last) }));
        self.pairings.resume(p.seed, entries);
        format!("{} pairings", p.entries.len())
    }
}

/// The saving thread: a save every `every` until the pool is closed or gone.
fn save_every(keeper: &Keeper, pool: &Weak<Pool>, every: Duration) {
    loop {
        {
            let mut stopped = keeper.stopped.lock();
            if !*stopped {
                keeper.wake.wait_for(&mut stopped, every);
            }
            if *stopped {
                return;
            }
        }
        match pool.upgrade() {
            Some(pool) => {
                let _ = pool.save_state();
            }
            None => return,
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        *self.stopped.lock() = true;
        self.wake.notify_all();
    }
}

/// The slot a pool keeps its [`Keeper`] in: set once, by [`Pool::keep_state`].
pub(super) type KeeperSlot = std::sync::OnceLock<Arc<Keeper>>;

impl Drop for Pool {
    /// A pool dropped without `close` saves once more, so that its last changes are kept.
    fn drop(&mut self) {
        if self.keeper.get().is_some_and(|k| !*k.stopped.lock()) {
            let _ = self.save_state();
            if let Some(k) = self.keeper.get() {
                *k.stopped.lock() = true;
                k.wake.notify_all();
            }
        }
    }
}
