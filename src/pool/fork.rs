//! The pools of this process and their locks across a fork (see `crate::fork`).
//!
//! A pool's lock held at the instant of a fork by another thread (one waiting on the fleet's
//! store, taking a snapshot or waiting for a slot, all of which run without the GIL) would
//! stay held in the child, and its first lease there would hang.

use super::Pool;
use crate::fork::{self, Mutex};
use std::sync::{Arc, Weak};

/// Every pool shared between threads (made by [`Pool::into_arc`]).
static LIVE: Mutex<Vec<Weak<Pool>>> = Mutex::new(Vec::new());

impl Pool {
    /// The pool, ready to be shared between threads: a fork then finds none of its locks
    /// held by a thread the child does not have.
    pub fn into_arc(self) -> Arc<Pool> {
        let pool = Arc::new(self);
        let mut live = LIVE.lock();
        live.retain(|p| p.strong_count() > 0);
        live.push(Arc::downgrade(&pool));
        pool
    }
}

/// Takes every lock a child could find held: the registry, each pool's in the order its own
/// code nests them (the fleet link, then the state), then the stores'. Pools come before
/// stores: a pool's code calls its store, never the other way round.
pub fn before_fork() {
    let live = LIVE.lock();
    let pools: Vec<Arc<Pool>> = live.iter().filter_map(Weak::upgrade).collect();
    // SAFETY: the registry is a static; each pool is kept (by `keep`) before its locks are held.
    unsafe { fork::hold(live) };
    for p in pools {
        fork::keep(Box::new(p.clone()));
        unsafe {
            if let Some(fl) = &p.fleet {
                fork::hold(fl.link.lock());
            }
            fork::hold(p.state.lock());
        }
    }
    crate::store::before_fork();
}

/// Undoes [`before_fork`], in the parent and in the child.
pub fn after_fork() {
    fork::let_go();
}
