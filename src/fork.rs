//! Locks a fork can be held across, and holding them.
//!
//! A fork copies only the forking thread: a lock another thread holds at that instant stays
//! held forever in the child. So the forking thread takes every lock that a thread may hold
//! without the GIL (each pool's and each fleet store's, see `pool::before_fork`) just before
//! the fork and lets go of them in the parent and in the child just after, as
//! `pthread_atfork` handlers do.
//!
//! These locks are std's, not parking_lot's: parking_lot queues its waiters in one
//! process-wide table whose bucket locks a thread of the parent may hold at the instant of the
//! fork (it was queueing on one of our locks), and the child's first unlock then waits on
//! that bucket forever. std's futex locks keep all their state in their own word, which the
//! child may simply release.

use std::any::Any;
use std::cell::RefCell;
use std::sync::{self, PoisonError};
use std::time::Instant;

pub(crate) use std::sync::MutexGuard;

/// A mutex whose poisoning is ignored: a panic never crosses into Python, and state a panic
/// left half-changed is no worse than the refusal a poisoned lock would turn every call into.
#[derive(Default)]
pub(crate) struct Mutex<T: ?Sized>(sync::Mutex<T>);

impl<T> Mutex<T> {
    pub(crate) const fn new(value: T) -> Mutex<T> {
        Mutex(sync::Mutex::new(value))
    }
}

impl<T: ?Sized> Mutex<T> {
    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
pub(crate) struct Condvar(sync::Condvar);

impl Condvar {
    pub(crate) const fn new() -> Condvar {
        Condvar(sync::Condvar::new())
    }

    pub(crate) fn notify_one(&self) {
        self.0.notify_one();
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }

    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until notified or `deadline`; says whether the deadline passed.
    pub(crate) fn wait_until<'a, T>(&self, guard: MutexGuard<'a, T>, deadline: Instant) -> (MutexGuard<'a, T>, bool) {
        let left = deadline.saturating_duration_since(Instant::now());
        let (guard, r) = self.0.wait_timeout(guard, left).unwrap_or_else(PoisonError::into_inner);
        (guard, r.timed_out())
    }
}

thread_local! {
    /// What the forking thread holds across a fork, in the order taken.
    static HELD: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

/// Keeps `owner` (whatever keeps the locks about to be held alive) until [`let_go`].
pub(crate) fn keep(owner: Box<dyn Any>) {
    HELD.with(|h| h.borrow_mut().push(owner));
}

/// Holds `guard` until [`let_go`] on this thread.
///
/// # Safety
/// The lock must outlive the hold: a static, or one kept alive by an owner passed to [`keep`]
/// before this call (what is held is let go in the reverse order).
pub(crate) unsafe fn hold<T: ?Sized + 'static>(guard: MutexGuard<'_, T>) {
    // SAFETY: the caller keeps the lock alive until `let_go` drops this guard.
    let guard: MutexGuard<'static, T> = unsafe { std::mem::transmute(guard) };
    keep(Box::new(guard));
}

/// Lets go of everything held on this thread, last taken first; in the parent and in the
/// child alike.
pub(crate) fn let_go() {
    let held = HELD.with(|h| std::mem::take(&mut *h.borrow_mut()));
    for item in held.into_iter().rev() {
        drop(item);
    }
}
