//! Fresh randomness for seeds (the pool's generator, a store's lease-id salt): a leaf, so that
//! whoever needs one depends on nothing else.

use std::time::Instant;

/// A seed that differs between processes and calls: std's per-process random hash keys over
/// the time since an `Instant`.
pub(crate) fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.finish()
}
