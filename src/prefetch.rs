//! A hint to the CPU: start loading this, the program will want it soon. Lookups at random
//! places in a large pool (the ring's points, the exits p2c draws) overlap their cache misses
//! instead of waiting for each in turn.

/// Asks the CPU to start loading `item` into the cache, without waiting for it.
#[inline(always)]
pub(crate) fn prefetch<T>(item: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults and changes no state that the program
    // can observe; the address is that of a live reference anyway.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(std::ptr::from_ref(item).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = item;
}
