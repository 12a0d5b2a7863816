//! Properties of ending a lease, over any status (any i64) and any latency and retry_after
//! (any f64: NaN, infinities, negatives, huge): a report is either recorded or refused as bad
//! input, never a panic; the slot is free afterwards either way (a refused report ends the
//! lease unused, as the bindings do); and whatever a 429 asked, the exit serves its site again
//! within the backoff ceiling.

use exitpool::{Config, Error, Exit, ManualClock, Outcome, Pool, Report, BLOCK_STATUSES};
use proptest::prelude::*;
use std::sync::Arc;

fn seconds() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![Just(None), any::<f64>().prop_map(Some), prop::num::f64::ANY.prop_map(Some), (0.0..1e13f64).prop_map(Some)]
}

fn status() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        Just(None),
        any::<i64>().prop_map(Some),
        (-5i64..70_000).prop_map(Some),
        prop::sample::select(vec![429i64, 999, 0, 600]).prop_map(Some)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_report_is_recorded_or_refused_and_the_slot_is_always_freed(
        status in status(), latency in seconds(), retry_after in seconds(), captcha in any::<bool>(),
    ) {
        let clock = ManualClock::new(0.0);
        let cfg = Config { max_leases: Some(1), seed: Some(1), ..Config::default() };
        let exits = vec![Exit::new("e0", "http://u:pw@e0.example:8000", None, 1, vec![]).unwrap()];
        let pool = Pool::new(exits, cfg, Arc::new(clock.clone())).unwrap();
        let g = pool.try_acquire(0, None, Some("site")).unwrap();
        let ok_seconds = |v: Option<f64>| v.is_none_or(|v| v.is_finite() && v >= 0.0);
        let valid = status.is_none_or(|s| (0..=65535).contains(&s)) && ok_seconds(latency) && ok_seconds(retry_after);
        match Report::new(status, latency, captcha, None, retry_after) {
            Ok(report) => {
                prop_assert!(valid);
                if let (false, Some(s)) = (captcha, status) {
                    prop_assert_eq!(report.outcome == Outcome::Block, BLOCK_STATUSES.contains(&(s as u16)));
                }
                prop_assert!(pool.release(g.id, &report));
            }
            Err(e) => {
                prop_assert!(!valid);
                prop_assert!(matches!(e, Error::BadInput(_)));
                prop_assert!(pool.release_unused(g.id));
            }
        }
        prop_assert_eq!(pool.snapshot().live_leases, 0);
        prop_assert!(!pool.is_live(g.id));
        clock.advance(pool.config().health.max_ejection).unwrap();
        let again = pool.try_acquire(0, None, Some("site"));
        prop_assert!(again.is_ok(), "{:?}", again.err());
    }
}
