//! The store for the pools of one process: the same decisions as the Redis scripts, behind a
//! mutex, with time from a replaceable clock so the suite runs it without sleeping.

use super::{ejects, ExitCounts, Store, StoreResult, Take, Taken, Verdict};
use crate::clock::Clock;
use crate::outcome::Outcome;
use crate::warmup::Pairing;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

/// The store's tables (leases, sessions, pairings, verdicts, counts), behind one lock.
#[derive(Default)]
struct Tables {
    seq: u64,
    /// Exit -> live leases (id, expiry).
    leases: HashMap<String, Vec<(u64, f64)>>,
    sessions: HashMap<String, Bound>,
    pairings: HashMap<(String, String), Pairing>,
    vseq: u64,
    /// (exit, site) -> (verdict, when its hold ends).
    /// By (exit, site, whether it is a pace cut): a pair's pace cut sits beside its health.
    verdicts: HashMap<(String, String, bool), (Verdict, f64)>,
    /// Site ("" for tunnels) -> exit -> until.
    ejected: HashMap<String, HashMap<String, f64>>,
    counts: HashMap<String, ExitCounts>,
    /// (exit, site) -> its pacing budget's theoretical arrival time.
    pace: HashMap<(String, String), f64>,
}

/// A key's session: its exit, the exit's token generation it was bound in, its expiry.
#[derive(Clone)]
struct Bound {
    exit: String,
    generation: u64,
    expires: f64,
}

pub struct MemoryStore {
    name: String,
    clock: Arc<dyn Clock>,
    state: Mutex<Tables>,
}

impl MemoryStore {
    pub fn new(name: &str, clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore { name: name.to_owned(), clock, state: Mutex::new(Tables::default()) }
    }

    /// The process-wide store of this name and namespace, made on first use (with that
    /// caller's clock) and kept while some pool holds it.
    pub fn named(name: &str, namespace: &str, clock: Arc<dyn Clock>) -> Arc<dyn Store> {
        type Registry = Mutex<HashMap<(String, String), Weak<MemoryStore>>>;
        static REGISTRY: OnceLock<Registry> = OnceLock::new();
        let mut reg = REGISTRY.get_or_init(Default::default).lock();
        reg.retain(|_, w| w.strong_count() > 0);
        let id = (name.to_owned(), namespace.to_owned());
        if let Some(s) = reg.get(&id).and_then(Weak::upgrade) {
            return s;
        }
        let s = Arc::new(MemoryStore::new(&format!("memory://{name} (namespace {namespace:?})"), clock));
        reg.insert(id, Arc::downgrade(&s));
        s
    }
}

impl Tables {
    /// Reclaims expired leases (a crashed worker's) and says whether one more fits.
    fn has_room(&mut self, exit: &str, max: Option<u32>, now: f64) -> bool {
        let live = self.leases.entry(exit.to_owned()).or_default();
        live.retain(|&(_, expires)| expires > now);
        max.is_none_or(|m| live.len() < m as usize)
    }

    fn take_slot(&mut self, exit: &str, ttl: f64, now: f64) -> u64 {
        self.seq += 1;
        self.leases.entry(exit.to_owned()).or_default().push((self.seq, now + ttl));
        self.counts.entry(exit.to_owned()).or_default().leases += 1;
        self.seq
    }
}

impl Store for MemoryStore {
    fn describe(&self) -> String {
        self.name.clone()
    }

    fn take(&self, t: &Take<'_>) -> StoreResult<Taken> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let live = t.key.and_then(|k| st.sessions.get(k).filter(|s| s.expires > now).cloned());
        let session = live.is_some();
        let mut regenerate = false;
        if let (Some(s), Some(first)) = (&live, t.candidates.first()) {
            if s.exit != *first {
                return Ok(Taken::Elsewhere { exit: s.exit.clone() });
            }
            if s.generation < t.generation {
                if !t.rebind {
                    st.sessions.remove(t.key.unwrap_or_default());
                    return Ok(Taken::Rotated { exit: s.exit.clone() });
                }
                regenerate = true;
            }
        }
        let bound = live.map(|s| s.exit);
        let exit = match bound {
            Some(e) => e,
            None => match t.candidates.first() {
                Some(e) => (*e).to_owned(),
                None => return Ok(Taken::Full { exit: None }),
            },
        };
        let exit_of_key = exit.clone();
        // A keyed lease goes where its session or its ring says, or waits: it never moves on.
        let options: Vec<String> = if t.key.is_some() { vec![exit] } else { t.candidates.iter().map(|c| (*c).to_owned()).collect() };
        let mut paced: Option<(String, f64)> = None;
        for (i, exit) in options.into_iter().enumerate() {
            if !st.has_room(&exit, t.max_leases, now) {
                continue;
            }
            let budget = t.pace.map(|p| {
                let (interval, tau) = p.spacing.get(i).copied().unwrap_or((0.0, 0.0));
                let id = (exit.clone(), p.site.to_owned());
                let tat = st.pace.get(&id).copied().unwrap_or(f64::NEG_INFINITY);
                (id, tat.max(now) + interval, crate::pacing::wait_at(tat, interval, tau, now))
            });
            if let Some(&(_, _, wait)) = budget.as_ref().filter(|b| b.2 > 0.0) {
                if paced.as_ref().is_none_or(|p| wait < p.1) {
                    paced = Some((exit, wait));
                }
                continue;
            }
            if let (Some(key), Some(cfg)) = (t.key, &t.warmup) {
                let id = (key.to_owned(), exit.clone());
                match Pairing::admit(st.pairings.get(&id).copied(), cfg, now) {
                    Err(wait) => return Ok(Taken::WarmingUp { exit, wait }),
                    Ok(p) => st.pairings.insert(id, p),
                };
            }
            if let Some((id, tat, _)) = budget {
                st.pace.insert(id, tat);
            }
            let lease = st.take_slot(&exit, t.lease_ttl, now);
            if let (Some(key), true) = (t.key, t.renew || !session || regenerate) {
                let expires = now + t.session_ttl;
                st.sessions.insert(key.to_owned(), Bound { exit: exit.clone(), generation: t.generation, expires });
            }
            return Ok(Taken::Granted { exit, lease, session });
        }
        if let Some((exit, wait)) = paced {
            return Ok(Taken::Paced { exit, wait });
        }
        Ok(Taken::Full { exit: t.key.map(|_| exit_of_key.clone()) })
    }

    fn give_back(&self, exit: &str, lease: u64, outcome: Option<Outcome>) -> StoreResult<bool> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let Some(live) = st.leases.get_mut(exit) else { return Ok(false) };
        let Some(i) = live.iter().position(|&(id, expires)| id == lease && expires > now) else { return Ok(false) };
        live.swap_remove(i);
        if let Some(o) = outcome {
            st.counts.entry(exit.to_owned()).or_default().outcomes[o as usize] += 1;
        }
        Ok(true)
    }

    fn session(&self, key: &str) -> StoreResult<Option<String>> {
        let now = self.clock.now();
        Ok(self.state.lock().sessions.get(key).filter(|s| s.expires > now).map(|s| s.exit.clone()))
    }

    fn end_session(&self, key: &str) -> StoreResult<bool> {
        let now = self.clock.now();
        Ok(self.state.lock().sessions.remove(key).is_some_and(|s| s.expires > now))
    }

    fn publish(&self, v: &Verdict, cap: u32) -> StoreResult<bool> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        if v.pace.is_some() {
            st.vseq += 1;
            let stored = Verdict { seq: st.vseq, ..v.clone() };
            st.verdicts.insert((v.exit.clone(), v.site.clone(), true), (stored, now + v.hold.max(0.0)));
            return Ok(true);
        }
        for set in st.ejected.values_mut() {
            set.retain(|_, until| *until > now);
        }
        let out = |st: &Tables, site: &str| st.ejected.get(site).map_or(0, |s| s.len() as u32);
        let already = st.ejected.get(&v.site).is_some_and(|s| s.contains_key(&v.exit));
        // A verdict about the site itself (an incident, no exit) takes no exit out.
        let ejecting = ejects(v.state) && !v.exit.is_empty();
        if ejecting && !already {
            let scope = out(&st, "") + if v.site.is_empty() { 0 } else { out(&st, &v.site) };
            if scope + 1 > cap {
                return Ok(false);
            }
        }
        let until = now + v.hold;
        let set = st.ejected.entry(v.site.clone()).or_default();
        if ejecting {
            set.insert(v.exit.clone(), if v.hold > 0.0 { until } else { f64::INFINITY });
        } else {
            set.remove(&v.exit);
        }
        st.vseq += 1;
        let mut stored = v.clone();
        stored.seq = st.vseq;
        st.verdicts.insert((v.exit.clone(), v.site.clone(), false), (stored, until));
        Ok(true)
    }

    fn verdicts(&self, since: u64) -> StoreResult<(Vec<Verdict>, u64)> {
        let now = self.clock.now();
        let st = self.state.lock();
        let mut out: Vec<Verdict> = st
            .verdicts
            .values()
            .filter(|(v, _)| v.seq > since)
            .map(|(v, until)| Verdict { hold: if v.hold.is_infinite() { v.hold } else { (until - now).max(0.0) }, ..v.clone() })
            .collect();
        out.sort_by_key(|v| v.seq);
        Ok((out, st.vseq))
    }

    fn counts(&self, exits: &[&str]) -> StoreResult<Vec<ExitCounts>> {
        let now = self.clock.now();
        let st = self.state.lock();
        Ok(exits
            .iter()
            .map(|e| {
                let mut c = st.counts.get(*e).cloned().unwrap_or_default();
                c.active = st.leases.get(*e).map_or(0, |l| l.iter().filter(|x| x.1 > now).count() as u64);
                c
            })
            .collect())
    }
}
