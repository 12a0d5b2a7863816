//! Asking for a lease, beyond one attempt: who may pass over which exits (`avoid`), and the
//! wait for a slot when every candidate is at `max_leases`.
//!
//! A binding makes its first attempt itself (`Pool::try_acquire_avoiding`, the hot path) and
//! comes here only when that attempt was refused as full, or for pacing with a wait that fits
//! in its timeout ([`waits_for`]).

use crate::error::{Error, Result};
use crate::pool::{Grant, Pool, Refusal};
use std::time::{Duration, Instant};

/// The exits a keyless lease passes over, as given: `None` for an empty list (nearly every
/// lease, and no allocation kept). A key with a non-empty list is bad input: an account goes
/// to its own exit, and a caller who wants it elsewhere ends its session.
pub fn avoid_list(keyed: bool, ids: Vec<Box<str>>) -> Result<Option<Box<[Box<str>]>>> {
    if ids.is_empty() {
        return Ok(None);
    }
    if keyed {
        return Err(Error::BadInput(
            "avoid is for keyless leases: a keyed lease goes to its session's exit (end the session to move it)".into(),
        ));
    }
    Ok(Some(ids.into_boxed_slice()))
}

/// How long one wait lasts at most before the caller's interrupt check runs (for Python, the
/// chance to see Ctrl-C).
pub const INTERRUPT_CHECK: Duration = Duration::from_millis(100);

/// The whole wait a `timeout` in seconds allows. `None` means "as long as it takes": a slot
/// always frees within `lease_ttl` anyway.
pub fn wait_budget(timeout: Option<f64>) -> Duration {
    timeout.and_then(|t| Duration::try_from_secs_f64(t).ok()).unwrap_or(Duration::MAX)
}

/// When a lease first found every slot full. A grant after that counts as one wait of the
/// whole time, however many attempts it took (the sync wait's slices, the async path's polls).
#[derive(Debug, Default, Clone, Copy)]
pub struct WaitStart(Option<Instant>);

impl WaitStart {
    /// Notes a refusal as full; the first one starts the wait.
    pub fn full(&mut self) {
        self.0.get_or_insert_with(Instant::now);
    }

    /// Counts the wait on `pool`, if there was one, when its lease is granted.
    pub fn granted(self, pool: &Pool) {
        if let Some(since) = self.0 {
            pool.record_wait(since.elapsed().as_secs_f64());
        }
    }
}

/// Whether a first refusal is one [`wait_for_slot`] waits out within `timeout`: every exit
/// full, or held back by pacing for less than the timeout (budget frees by time alone).
#[inline]
pub fn waits_for(refusal: &Refusal, timeout: Option<f64>) -> bool {
    match refusal {
        Refusal::Full => true,
        r => r.paced().is_some_and(|w| Duration::try_from_secs_f64(w).is_ok_and(|w| w <= wait_budget(timeout))),
    }
}

/// Waits for a slot after a first attempt was refused as full (or paced, see [`waits_for`]): attempts in slices of at most
/// [`INTERRUPT_CHECK`], calling `interrupted` between them, until granted (the wait counted),
/// refused for a reason waiting cannot fix, or `timeout` passes (`Err(Refusal::Full)`).
/// An error from `interrupted` ends the wait at once and is returned as is.
///
/// A binding calls this without its interpreter lock; `interrupted` takes it back briefly.
pub fn wait_for_slot<E>(
    pool: &Pool,
    view: u32,
    key: Option<&str>,
    site: Option<&str>,
    avoid: &[&str],
    timeout: Option<f64>,
    mut interrupted: impl FnMut() -> std::result::Result<(), E>,
) -> std::result::Result<std::result::Result<Grant, Refusal>, E> {
    let mut start = WaitStart::default();
    start.full();
    let started = Instant::now();
    let budget = wait_budget(timeout);
    loop {
        let left = budget.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Ok(Err(Refusal::Full));
        }
        match pool.acquire_within_avoiding(view, key, site, avoid, left.min(INTERRUPT_CHECK)) {
            Err(Refusal::Full) => interrupted()?,
            // Paced beyond this slice but within the whole wait: sleep a slice and look again.
            Err(r) if r.paced().is_some_and(|w| w < left.as_secs_f64()) => {
                interrupted()?;
                std::thread::sleep(Duration::from_secs_f64(r.paced().unwrap_or(0.0)).min(INTERRUPT_CHECK));
            }
            Ok(grant) => {
                start.granted(pool);
                return Ok(Ok(grant));
            }
            refused => return Ok(refused),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::pool::Config;
    use crate::{Exit, Report};
    use std::sync::Arc;

    fn pool_of_one_slot() -> Pool {
        let exit = Exit::new("a", "http://127.0.0.1:8080", None, 1, vec![]).unwrap();
        let cfg = Config { max_leases: Some(1), ..Config::default() };
        Pool::new(vec![exit], cfg, Arc::new(ManualClock::new(0.0))).unwrap()
    }

    #[test]
    fn avoid_is_for_keyless_leases_only() {
        assert_eq!(avoid_list(true, vec![]), Ok(None));
        assert_eq!(avoid_list(false, vec![]), Ok(None));
        assert_eq!(avoid_list(false, vec!["a".into()]).unwrap().as_deref(), Some(&["a".into()][..]));
        let err = avoid_list(true, vec!["a".into()]).unwrap_err();
        assert!(matches!(&err, Error::BadInput(m) if m.starts_with("avoid is for keyless leases")), "{err}");
    }

    #[test]
    fn budget_of_a_timeout() {
        assert_eq!(wait_budget(None), Duration::MAX);
        assert_eq!(wait_budget(Some(0.0)), Duration::ZERO);
        assert_eq!(wait_budget(Some(1.5)), Duration::from_millis(1500));
        assert_eq!(wait_budget(Some(f64::INFINITY)), Duration::MAX);
    }

    #[test]
    fn a_wait_that_times_out_is_full_and_checks_for_interrupts() {
        let pool = pool_of_one_slot();
        let held = pool.try_acquire(0, None, None).unwrap();
        let mut checks = 0;
        let r = wait_for_slot::<()>(&pool, 0, None, None, &[], Some(0.25), || {
            checks += 1;
            Ok(())
        });
        assert!(matches!(r, Ok(Err(Refusal::Full))));
        assert!(checks >= 2, "a 0.25 s wait runs in slices of at most 0.1 s, got {checks} checks");
        assert!(pool.release(held.id, &Report::SUCCESS));
        assert_eq!(pool.snapshot().counts.waits, 0, "a wait that got nothing is no wait");
    }

    #[test]
    fn an_interrupt_ends_the_wait_with_its_error() {
        let pool = pool_of_one_slot();
        let _held = pool.try_acquire(0, None, None).unwrap();
        let r = wait_for_slot(&pool, 0, None, None, &[], None, || Err("interrupted"));
        assert!(matches!(r, Err("interrupted")));
    }

    #[test]
    fn a_granted_wait_is_counted_once() {
        let pool = Arc::new(pool_of_one_slot());
        let held = pool.try_acquire(0, None, None).unwrap();
        let releaser = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(150));
                pool.release(held.id, &Report::SUCCESS)
            })
        };
        let r = wait_for_slot::<()>(&pool, 0, None, None, &[], Some(30.0), || Ok(()));
        assert!(releaser.join().unwrap());
        assert!(r.unwrap().is_ok());
        assert_eq!(pool.snapshot().counts.waits, 1);
    }
}
