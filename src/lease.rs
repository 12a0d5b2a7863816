//! Live leases: a slab with generations, so a release that arrives after expiry (or twice)
//! finds a different generation and is ignored instead of freeing a slot twice.
//!
//! Expiry needs no timer and no queue: the slab remembers the earliest expiry among live
//! leases and is scanned only when that moment has passed, so a pool whose leases come back
//! in time never scans at all.

/// A lease handle: slot index in the low 32 bits, generation in the high 32.
pub type LeaseId = u64;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseRec {
    pub exit: u32,
    pub site: u32,
    /// The half-open periods in which breakers counted this lease as a trial.
    pub trial: crate::health::Trial,
    /// A hash of the lease's key (0 for keyless), kept only when calibrating capacities.
    pub identity: u64,
    /// The lease's id in the fleet's shared store; 0 for a lease only this pool knows.
    pub remote: u64,
    pub started: f64,
    pub expires: f64,
}

#[derive(Default)]
struct Slot {
    generation: u32,
    rec: Option<LeaseRec>,
}

#[derive(Default)]
pub struct Leases {
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
    earliest: f64,
}

impl Leases {
    pub fn live(&self) -> usize {
        self.live
    }

    pub fn insert(&mut self, rec: LeaseRec) -> LeaseId {
        if self.live == 0 || rec.expires < self.earliest {
            self.earliest = rec.expires;
        }
        self.live += 1;
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.rec = Some(rec);
        ((slot.generation as u64) << 32) | index as u64
    }

    /// Ends a lease; `None` if it already ended (released, expired) or never existed.
    pub fn take(&mut self, id: LeaseId) -> Option<LeaseRec> {
        let (index, generation) = ((id & 0xffff_ffff) as usize, (id >> 32) as u32);
        let slot = self.slots.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        let rec = slot.rec.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index as u32);
        self.live -= 1;
        Some(rec)
    }

    pub fn get(&self, id: LeaseId) -> Option<&LeaseRec> {
        let slot = self.slots.get((id & 0xffff_ffff) as usize)?;
        (slot.generation == (id >> 32) as u32).then_some(slot.rec.as_ref()).flatten()
    }

    /// The exit and start of every live lease: one pass over the slab, for the rare moment
    /// sessions go over their bound, never per lease.
    pub fn starts(&self) -> impl Iterator<Item = (u32, f64)> + '_ {
        self.slots.iter().filter_map(|s| s.rec.as_ref()).map(|r| (r.exit, r.started))
    }

    /// Ends every lease whose time has run out, handing each to `expired`. Every attempt and
    /// release asks, and nearly always nothing is due: that answer is one comparison, inlined,
    /// and the scan is a call of its own.
    #[inline(always)]
    pub fn expire_due(&mut self, now: f64, expired: impl FnMut(LeaseId, LeaseRec)) {
        if self.live == 0 || now < self.earliest {
            return;
        }
        self.expire_scan(now, expired);
    }

    #[inline(never)]
    fn expire_scan(&mut self, now: f64, mut expired: impl FnMut(LeaseId, LeaseRec)) {
        let mut earliest = f64::INFINITY;
        for index in 0..self.slots.len() {
            let slot = &self.slots[index];
            let Some(rec) = slot.rec else { continue };
            if rec.expires <= now {
                let id = ((slot.generation as u64) << 32) | index as u64;
                if let Some(rec) = self.take(id) {
                    expired(id, rec);
                }
            } else {
                earliest = earliest.min(rec.expires);
            }
        }
        self.earliest = earliest;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(expires: f64) -> LeaseRec {
        LeaseRec { exit: 0, site: 0, trial: Default::default(), identity: 0, remote: 0, started: 0.0, expires }
    }

    #[test]
    fn late_and_double_releases_are_ignored() {
        let mut l = Leases::default();
        let a = l.insert(rec(10.0));
        assert!(l.take(a).is_some());
        assert!(l.take(a).is_none());
        let b = l.insert(rec(10.0)); // reuses a's slot with a new generation
        assert_ne!(a, b);
        assert!(l.take(a).is_none());
        assert_eq!(l.live(), 1);
        let mut expired = vec![];
        l.expire_due(9.999, |id, _| expired.push(id));
        assert!(expired.is_empty());
        l.expire_due(10.0, |id, _| expired.push(id));
        assert_eq!(expired, vec![b]);
        assert!(l.take(b).is_none());
        assert_eq!(l.live(), 0);
    }
}
