//! One-block SHA-256 with the x86 SHA extensions, `N` independent blocks at a time.
//!
//! Two things cost more than the compression itself and are avoided here:
//! - padding the string in a stack buffer and loading it back as vectors stalls on store
//!   forwarding (the loads span several smaller stores), so the padded block is assembled in
//!   registers straight from the string;
//! - every round of one block waits for the one before, which leaves the SHA unit idle most of
//!   the time; interleaving the rounds of [`LANES`] independent blocks fills it.
//!
//! Only the first two state words are produced (a ring position is the first 8 bytes of the
//! digest), which also saves the final shuffles back to the standard word order.

use super::{position_long, MAX_ONE_BLOCK};
use core::arch::x86_64::*;

/// Blocks compressed side by side in the batch path: measured on Zen 3, 2 gives most of the
/// gain and more only adds register pressure.
const LANES: usize = 2;

/// Round constants, FIPS 180-4 §4.2.2.
const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be,
    0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa,
    0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85,
    0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
    0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
    0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// `loadu(TAIL.as_ptr() + 16 - r)` is the `pshufb` mask that moves the last `r` bytes of a
/// 16-byte load to its front and zeroes the rest.
const TAIL: [u8; 32] = {
    let mut t = [0x80u8; 32];
    let mut i = 0;
    while i < 16 {
        t[i] = i as u8;
        i += 1;
    }
    t
};

/// `loadu(MARK.as_ptr() + 16 - r)` has the padding byte 0x80 at index `r`, zeros elsewhere.
const MARK: [u8; 32] = {
    let mut m = [0u8; 32];
    m[16] = 0x80;
    m
};

/// Whether this CPU has what [`positions`] and [`positions_into`] need. `std` caches the
/// answer, so this is a load and a test.
#[inline]
pub fn available() -> bool {
    std::is_x86_feature_detected!("sha") && std::is_x86_feature_detected!("sse4.1") && std::is_x86_feature_detected!("ssse3")
}

/// A string of fewer than 16 bytes, with the 0x80 that ends it, as the low bytes of a
/// register: read with fixed-size, possibly overlapping loads that stay inside the string.
#[inline]
fn short_chunk(s: &[u8]) -> u128 {
    let n = s.len();
    debug_assert!(n < 16);
    let data: u128 = if n >= 8 {
        let lo = u64::from_le_bytes(s[..8].try_into().unwrap_or_default());
        let hi = u64::from_le_bytes(s[n - 8..].try_into().unwrap_or_default());
        // `hi` holds bytes n-8..n; where it overlaps `lo` the bytes are the same.
        u128::from(lo) | (u128::from(hi) << (8 * (n - 8)))
    } else if n >= 4 {
        let lo = u32::from_le_bytes(s[..4].try_into().unwrap_or_default());
        let hi = u32::from_le_bytes(s[n - 4..].try_into().unwrap_or_default());
        u128::from(lo) | (u128::from(hi) << (8 * (n - 4)))
    } else if n > 0 {
        u128::from(s[0]) | (u128::from(s[n / 2]) << (8 * (n / 2))) | (u128::from(s[n - 1]) << (8 * (n - 1)))
    } else {
        0
    };
    data | (0x80u128 << (8 * n))
}

/// The padded block of a string of at most 55 bytes, as SHA-256 message words W[0..16]
/// (four per register), built without a round trip through memory.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn message(s: &[u8]) -> [__m128i; 4] {
    let n = s.len();
    debug_assert!(n <= MAX_ONE_BLOCK);
    let mut chunks = [_mm_setzero_si128(); 4];
    if n < 16 {
        let v = short_chunk(s);
        chunks[0] = _mm_set_epi64x((v >> 64) as i64, v as i64);
    } else {
        for (c, chunk) in chunks.iter_mut().enumerate() {
            let start = 16 * c;
            if start + 16 <= n {
                // SAFETY: bytes start .. start + 16 are inside `s`; unaligned load.
                *chunk = unsafe { _mm_loadu_si128(s.as_ptr().add(start).cast()) };
            } else if start <= n {
                let r = n - start;
                // SAFETY: n >= 16, so bytes n - 16 .. n are inside `s`; and r <= 15, so
                // 16 - r + 16 <= 32 keeps both mask loads inside their 32-byte tables.
                *chunk = unsafe {
                    let last = _mm_loadu_si128(s.as_ptr().add(n - 16).cast());
                    let tail = _mm_shuffle_epi8(last, _mm_loadu_si128(TAIL.as_ptr().add(16 - r).cast()));
                    _mm_or_si128(tail, _mm_loadu_si128(MARK.as_ptr().add(16 - r).cast()))
                };
            }
        }
    }
    // The length in bits, big-endian, in the block's last 8 bytes.
    chunks[3] = _mm_or_si128(chunks[3], _mm_set_epi64x(((n as u64) * 8).swap_bytes() as i64, 0));
    let swap = _mm_set_epi64x(0x0C0D_0E0F_0809_0A0B, 0x0405_0607_0001_0203);
    chunks.map(|c| _mm_shuffle_epi8(c, swap))
}

/// Four rounds on each of the `N` states, with message words `w` (W[t..t+4] per lane).
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn rounds4<const N: usize>(abef: &mut [__m128i; N], cdgh: &mut [__m128i; N], w: &[__m128i; N], t: usize) {
    // SAFETY: `t` is a multiple of 4 below 64, so K[t..t + 4] is in bounds; unaligned load.
    let k = unsafe { _mm_loadu_si128(K.as_ptr().add(t).cast()) };
    for j in 0..N {
        let wk = _mm_add_epi32(w[j], k);
        cdgh[j] = _mm_sha256rnds2_epu32(cdgh[j], abef[j], wk);
        abef[j] = _mm_sha256rnds2_epu32(abef[j], cdgh[j], _mm_shuffle_epi32(wk, 0x0E));
    }
}

/// The next four message words from the previous sixteen (FIPS 180-4 §6.2.2), in place of the
/// oldest four: `w0` holds W[t-16..t-12], `w1`..`w3` the words after it.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn schedule<const N: usize>(w0: &mut [__m128i; N], w1: &[__m128i; N], w2: &[__m128i; N], w3: &[__m128i; N]) {
    for j in 0..N {
        let t = _mm_add_epi32(_mm_sha256msg1_epu32(w0[j], w1[j]), _mm_alignr_epi8(w3[j], w2[j], 4));
        w0[j] = _mm_sha256msg2_epu32(t, w3[j]);
    }
}

/// The positions of `N` strings of at most [`MAX_ONE_BLOCK`] bytes each.
///
/// Kept out of line: inlined into the batch loop, it was scheduled worse (about 5 ns more per
/// string, measured).
#[inline(never)]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
pub fn positions<const N: usize>(strings: [&[u8]; N]) -> [u64; N] {
    // The state as the SHA instructions want it: ABEF and CDGH, A in the highest lane.
    let [a, b, c, d, e, f, g, h] = super::H.map(|x| x as i32);
    let abef0 = _mm_set_epi32(a, b, e, f);
    let mut abef = [abef0; N];
    let mut cdgh = [_mm_set_epi32(c, d, g, h); N];
    let words = strings.map(|s| message(s));
    let mut w: [[__m128i; N]; 4] = std::array::from_fn(|i| std::array::from_fn(|j| words[j][i]));
    let [w0, w1, w2, w3] = &mut w;
    rounds4(&mut abef, &mut cdgh, w0, 0);
    rounds4(&mut abef, &mut cdgh, w1, 4);
    rounds4(&mut abef, &mut cdgh, w2, 8);
    rounds4(&mut abef, &mut cdgh, w3, 12);
    for t in [16, 32, 48] {
        schedule(w0, w1, w2, w3);
        rounds4(&mut abef, &mut cdgh, w0, t);
        schedule(w1, w2, w3, w0);
        rounds4(&mut abef, &mut cdgh, w1, t + 4);
        schedule(w2, w3, w0, w1);
        rounds4(&mut abef, &mut cdgh, w2, t + 8);
        schedule(w3, w0, w1, w2);
        rounds4(&mut abef, &mut cdgh, w3, t + 12);
    }
    // The high half of ABEF is A:B, which is exactly the digest's first 8 bytes.
    abef.map(|s| _mm_extract_epi64(_mm_add_epi32(s, abef0), 1) as u64)
}

/// [`super::positions_into`] on this CPU: one-block strings go [`LANES`] at a time, longer
/// ones through the general hasher.
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
pub fn positions_into(strings: &[&[u8]], out: &mut [u64]) {
    let mut groups = strings.chunks_exact(LANES);
    let mut outs = out.chunks_exact_mut(LANES);
    for (group, o) in (&mut groups).zip(&mut outs) {
        let group: &[&[u8]; LANES] = group.try_into().unwrap_or_else(|_| unreachable!());
        if group.iter().all(|s| s.len() <= MAX_ONE_BLOCK) {
            o.copy_from_slice(&positions(*group));
        } else {
            for (s, p) in group.iter().zip(o) {
                *p = one(s);
            }
        }
    }
    for (s, p) in groups.remainder().iter().zip(outs.into_remainder()) {
        *p = one(s);
    }
}

/// One string of any length.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn one(s: &[u8]) -> u64 {
    if s.len() <= MAX_ONE_BLOCK {
        positions([s])[0]
    } else {
        position_long(s)
    }
}
