//! Capacities measured, not guessed: the distinct identities each exit served over the last
//! day without a block or captcha verdict.

use super::Pool;
use crate::error::{Error, Result};
use crate::events::EventKind;
use crate::exit::Exit;

/// One capacity that `recalibrate` changed (0: benched). Serializes (for `recalibrate()`)
/// with the keys of the stub's `Recalibration` TypedDict, in this order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Recalibration {
    pub exit_id: String,
    pub old: u32,
    pub new: u32,
    pub served: u32,
    pub safe: u32,
}

/// A key's identity for capacity measurement: any stable 64-bit hash will do, and 0 is
/// kept for "no key".
pub(super) fn identity_of(key: &str) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish().max(1)
}

/// One day: the horizon of capacity measurement (the ring article's rolling 24 h).
const CALIBRATION_HORIZON: f64 = 86_400.0;

/// Measured capacities are clamped here (the ring article's [1, 6]).
const CALIBRATED_MAX: u32 = 6;

impl Pool {
    /// Sets each exit's capacity from what it carried over the last 24 h: the distinct
    /// identities it served without a block or captcha verdict, clamped to [1, 6]. An exit
    /// that burned every identity it served is benched; one that served none keeps its
    /// capacity. Only changed exits' arcs move. Needs `Config::calibrate`.
    pub fn recalibrate(&self) -> Result<Vec<Recalibration>> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        if !st.cfg.calibrate {
            return Err(Error::BadInput("recalibrate needs a pool made with calibrate=True".into()));
        }
        let mut changes = Vec::new();
        for h in 0..st.exits.len() as u32 {
            let slot = &mut st.exits[h as usize];
            if slot.removed || slot.benched {
                continue;
            }
            slot.identities.retain(|_, (seen, _)| now - *seen <= CALIBRATION_HORIZON);
            let served = slot.identities.len() as u32;
            if served == 0 {
                continue;
            }
            let safe = slot.identities.values().filter(|(_, burned)| !burned).count() as u32;
            let old = slot.exit.capacity;
            let id = slot.exit.id.clone();
            if safe == 0 {
                slot.benched = true;
                st.leave_views(h, now)?;
                st.board.events.push(
                    now,
                    EventKind::Benched,
                    Some(h),
                    None,
                    format!("measured capacity 0: all {served} identities served in 24 h were burned"),
                );
                changes.push(Recalibration { exit_id: id, old, new: 0, served, safe });
                continue;
            }
            let new = safe.min(CALIBRATED_MAX);
            if new != old {
                let resized = Exit { capacity: new, ..(*slot.exit).clone() };
                st.check_room(&resized)?;
                st.leave_views(h, now)?;
                st.exits[h as usize].set_exit(resized);
                st.join_views(h, now)?;
                st.board.events.push(
                    now,
                    EventKind::Recalibrated,
                    Some(h),
                    None,
                    format!("capacity {old} -> {new}: {safe} of {served} identities served in 24 h without a block or captcha"),
                );
                changes.push(Recalibration { exit_id: id, old, new, served, safe });
            }
        }
        Ok(changes)
    }
}
