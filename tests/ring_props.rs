//! Properties of the public core ring, `exitpool::Ring`, checked with proptest: the ring's answer
//! depends only on the set of exits, adding an exit moves keys only onto it, removing one moves
//! only its own keys, and no string makes it panic.
//!
//! Case counts and replicas are kept small so that `cargo test` (a debug build) stays fast.

use exitpool::ring::DEFAULT_SALT;
use exitpool::{Error, Ring};
use proptest::prelude::*;

const KEYS: usize = 1000;

/// Exit ids with their capacities, in ring-building order.
type Pool = Vec<(String, u32)>;

fn keys() -> Vec<String> {
    (0..KEYS).map(|i| format!("account-{i}")).collect()
}

/// A pool: unique ids (any Unicode, as the core does not judge ids) with capacities 0..=6.
fn pool() -> impl Strategy<Value = Pool> {
    prop::collection::btree_map(any::<String>(), 0u32..=6, 1..10).prop_map(|m| m.into_iter().collect())
}

/// A pool in some order, the same pool in another order, and a replica count.
fn pool_twice() -> impl Strategy<Value = (Pool, Pool, u32)> {
    pool().prop_flat_map(|p| (Just(p.clone()), Just(p).prop_shuffle(), 1u32..=24))
}

/// Builds a ring whose owner handle is the exit's index in `exits`.
fn build(replicas: u32, exits: &[(String, u32)]) -> Ring {
    Ring::build(replicas, DEFAULT_SALT, exits.iter().enumerate().map(|(i, (id, c))| (id.as_str(), *c, i as u32)))
        .expect("unique ids and replicas >= 1 always build")
}

/// The exit id of every key, translating owner handles through `by_handle`.
fn assignment(ring: &Ring, by_handle: &[&str], keys: &[String]) -> Vec<String> {
    keys.iter()
        .map(|k| by_handle[ring.assign(k).expect("a ring with exits assigns every key") as usize].to_owned())
        .collect()
}

fn handles(exits: &[(String, u32)]) -> Vec<&str> {
    exits.iter().map(|(id, _)| id.as_str()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn any_order_gives_the_same_assignment((exits, shuffled, replicas) in pool_twice()) {
        let keys = keys();
        let expected = assignment(&build(replicas, &exits), &handles(&exits), &keys);
        prop_assert_eq!(&assignment(&build(replicas, &shuffled), &handles(&shuffled), &keys), &expected);

        // One add at a time, in the shuffled order, is the same ring too.
        let mut ring = Ring::new(replicas, DEFAULT_SALT).unwrap();
        for (i, (id, c)) in shuffled.iter().enumerate() {
            ring.add(id, *c, i as u32).unwrap();
        }
        prop_assert_eq!(ring.len(), exits.len());
        prop_assert_eq!(&assignment(&ring, &handles(&shuffled), &keys), &expected);
    }

    #[test]
    fn adding_moves_keys_only_onto_the_new_exit(
        exits in pool(),
        new_id in any::<String>(),
        capacity in 0u32..=6,
        replicas in 1u32..=24,
    ) {
        prop_assume!(exits.iter().all(|(id, _)| *id != new_id));
        let keys = keys();
        let mut by_handle = handles(&exits);
        let mut ring = build(replicas, &exits);
        let before = assignment(&ring, &by_handle, &keys);

        let handle = exits.len() as u32;
        ring.add(&new_id, capacity, handle).unwrap();
        by_handle.push(&new_id);
        prop_assert!(ring.contains(&new_id));
        prop_assert_eq!(ring.node(&new_id), Some((handle, capacity)));
        prop_assert_eq!(ring.point_count(), (exits.iter().map(|(_, c)| (*c).max(1)).sum::<u32>() + capacity.max(1)) as usize * replicas as usize);
        let after = assignment(&ring, &by_handle, &keys);
        for ((k, b), a) in keys.iter().zip(&before).zip(&after) {
            prop_assert!(a == b || *a == new_id, "{:?} moved from {:?} to {:?}, not onto {:?}", k, b, a, new_id);
        }

        // Adding the same id again is refused and changes nothing.
        prop_assert_eq!(ring.add(&new_id, 1, handle + 1), Err(Error::DuplicateExit(new_id.clone())));
        prop_assert_eq!(&assignment(&ring, &by_handle, &keys), &after);

        // Taking it out again restores every key.
        prop_assert_eq!(ring.remove(&new_id), Ok(handle));
        prop_assert_eq!(&assignment(&ring, &by_handle, &keys), &before);
    }

    #[test]
    fn removing_moves_only_the_removed_exits_keys(
        (exits, pick, replicas) in pool().prop_flat_map(|p| { let n = p.len(); (Just(p), 0..n, 1u32..=24) }),
    ) {
        let keys = keys();
        let by_handle = handles(&exits);
        let mut ring = build(replicas, &exits);
        let before = assignment(&ring, &by_handle, &keys);
        let gone = exits[pick].0.clone();

        prop_assert_eq!(ring.remove(&gone), Ok(pick as u32));
        prop_assert!(!ring.contains(&gone));
        prop_assert_eq!(ring.remove(&gone), Err(Error::UnknownExit(gone.clone())));
        if exits.len() == 1 {
            prop_assert!(ring.is_empty());
            prop_assert_eq!(ring.assign("account-0"), None);
            return Ok(());
        }
        let after = assignment(&ring, &by_handle, &keys);
        for ((k, b), a) in keys.iter().zip(&before).zip(&after) {
            if *b == gone {
                prop_assert!(*a != gone, "{:?} still on the removed exit", k);
            } else {
                prop_assert_eq!(a, b, "{:?} moved although its exit stayed", k);
            }
        }
        // And the ring equals one built without that exit.
        let rest: Pool = exits.iter().filter(|(id, _)| *id != gone).cloned().collect();
        prop_assert_eq!(&assignment(&build(replicas, &rest), &handles(&rest), &keys), &after);
    }

    #[test]
    fn no_string_panics(
        exits in pool(),
        replicas in 1u32..=8,
        salt in any::<String>(),
        probes in prop::collection::vec(any::<String>(), 1..32),
    ) {
        let ring = Ring::build(replicas, &salt, exits.iter().enumerate().map(|(i, (id, c))| (id.as_str(), *c, i as u32))).unwrap();
        for key in &probes {
            let owner = ring.assign(key);
            prop_assert!(matches!(owner, Some(h) if (h as usize) < exits.len()));
            let walked: Vec<u32> = ring.walk(key).collect();
            prop_assert_eq!(walked.len(), exits.len());
            prop_assert_eq!(walked.first().copied(), owner);
        }
        let empty = Ring::new(replicas, &salt).unwrap();
        for key in &probes {
            prop_assert_eq!(empty.assign(key), None);
            prop_assert_eq!(empty.walk(key).count(), 0);
        }
    }
}

#[test]
fn edge_keys_do_not_panic() {
    let exits: Pool = vec![("出口-東京".into(), 3), ("".into(), 0), ("🚀".into(), 1)];
    let ring = build(4, &exits);
    let big = "x".repeat(1 << 20);
    for key in ["", "\0", big.as_str(), "\u{10ffff}"] {
        assert!(ring.assign(key).is_some_and(|h| h < 3), "{:?}", key.get(..16));
    }
    // Past the last point the search wraps to the first, which is also the owner of position 0.
    assert!(ring.assign_position(u64::MAX).is_some());
    assert_eq!(ring.assign_position(u64::MAX), ring.assign_position(0));
}
