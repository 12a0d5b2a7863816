//! A hint to the CPU: start loading this, the program will want it soon. Lookups at random
//! places in a large pool (the ring's points, the exits p2c draws) overlap their cache misses
//! instead of waiting for each in turn.

/// Asks the CPU to start loading `item` into the cache, without waiting for it.
#[inline(always)]
pub(crate) fn prefetch<T>(item: &T) {
    prefetch_addr(std::ptr::from_ref(item) as usize);
}

/// Asks the CPU to start loading the line at `addr`, which may no longer hold what it held
/// (a hint kept beside other data): a prefetch never faults, whatever the address.
#[inline(always)]
pub(crate) fn prefetch_addr(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults, even at an address that is not
    // mapped, and changes no state that the program can observe.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}
