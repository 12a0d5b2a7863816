//! Ring positions: the first 8 bytes of sha256(utf8(s)), big-endian. This is the article's
//! `_h`, kept bit for bit so that fleets running the reference code agree with us.
//!
//! Hashing is most of the cost of a lookup, and the strings hashed (keys, point names) are
//! short. A string of at most [`MAX_ONE_BLOCK`] bytes fits in one padded block, so it is
//! padded by hand and compressed once, skipping the general hasher's buffering and
//! finalisation. On x86-64 with the SHA extensions, a batch is compressed two blocks at a time
//! (the `x86` module): one block's 64 rounds are a single dependency chain that leaves the SHA
//! unit mostly idle, while independent blocks can share it.

#[cfg(target_arch = "x86_64")]
mod x86;

use sha2::{Digest, Sha256};

/// The longest string that, with its padding, fits in one 64-byte block.
pub const MAX_ONE_BLOCK: usize = 55;

/// SHA-256's initial state, FIPS 180-4 §5.3.3.
const H: [u32; 8] = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

/// The position of one string.
#[inline]
pub fn position(s: &[u8]) -> u64 {
    if s.len() > MAX_ONE_BLOCK {
        return position_long(s);
    }
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        // SAFETY: `available` checked that this CPU has the SHA extensions and SSE4.1.
        return unsafe { x86::positions([s]) }[0];
    }
    let mut state = H;
    sha2::block_api::compress256(&mut state, &[pad(s)]);
    head(&state)
}

/// The positions of many strings at once: `out[i] = position(strings[i])`.
///
/// Faster per string than [`position`] where the CPU can compress blocks side by side.
pub fn positions_into(strings: &[&[u8]], out: &mut [u64]) {
    assert_eq!(strings.len(), out.len(), "one output slot per string");
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        // SAFETY: `available` checked that this CPU has the SHA extensions and SSE4.1.
        unsafe { x86::positions_into(strings, out) };
        return;
    }
    for (s, o) in strings.iter().zip(out.iter_mut()) {
        *o = position(s);
    }
}

/// The general path, for strings longer than one block.
fn position_long(s: &[u8]) -> u64 {
    let digest = Sha256::digest(s);
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(head)
}

/// The single padded block of a string of at most [`MAX_ONE_BLOCK`] bytes: the bytes, `0x80`,
/// zeros, and the length in bits as a big-endian u64 (FIPS 180-4 §5.1.1).
#[inline]
fn pad(s: &[u8]) -> [u8; 64] {
    debug_assert!(s.len() <= MAX_ONE_BLOCK);
    let mut block = [0u8; 64];
    block[..s.len()].copy_from_slice(s);
    block[s.len()] = 0x80;
    block[56..].copy_from_slice(&((s.len() as u64) * 8).to_be_bytes());
    block
}

/// The first 8 bytes of the digest, big-endian, from the final state: words 0 and 1.
#[inline]
fn head(state: &[u32; 8]) -> u64 {
    (u64::from(state[0]) << 32) | u64::from(state[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sha2's own digest, the definition every fast path is checked against.
    fn expected(s: &[u8]) -> u64 {
        let digest = Sha256::digest(s);
        u64::from_be_bytes(digest[..8].try_into().unwrap())
    }

    /// A small deterministic generator (xorshift64*): the inputs are reproducible without a
    /// dependency.
    fn bytes(seed: &mut u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                *seed ^= *seed >> 12;
                *seed ^= *seed << 25;
                *seed ^= *seed >> 27;
                (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
            })
            .collect()
    }

    #[test]
    fn matches_python_reference_values() {
        // int.from_bytes(hashlib.sha256(s).digest()[:8], "big") in Python
        assert_eq!(position(b""), 0xe3b0c44298fc1c14);
        assert_eq!(position(b"abc"), 0xba7816bf8f01cfea);
    }

    #[test]
    fn every_length_matches_sha2_one_at_a_time() {
        let mut seed = 0x9e37_79b9_7f4a_7c15;
        for len in 0..=200 {
            for _ in 0..20 {
                let s = bytes(&mut seed, len);
                assert_eq!(position(&s), expected(&s), "length {len}");
            }
            let all_ff = vec![0xffu8; len];
            assert_eq!(position(&all_ff), expected(&all_ff), "length {len}, all 0xff");
        }
    }

    #[test]
    fn batches_of_every_size_and_mixed_lengths_match_sha2() {
        let mut seed = 0x0123_4567_89ab_cdef;
        for n in 0..=67 {
            // Lengths that cross the one-block limit within a batch, so that the fast path and
            // the fallback interleave.
            let owned: Vec<Vec<u8>> = (0..n).map(|i| bytes(&mut seed, (i * 37 + n) % 201)).collect();
            let strings: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            let mut out = vec![0u64; n];
            positions_into(&strings, &mut out);
            for (s, got) in strings.iter().zip(&out) {
                assert_eq!(*got, expected(s), "batch of {n}, length {}", s.len());
            }
        }
        let mut seed = 42;
        for len in 0..=200 {
            let owned: Vec<Vec<u8>> = (0..9).map(|_| bytes(&mut seed, len)).collect();
            let strings: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            let mut out = vec![0u64; strings.len()];
            positions_into(&strings, &mut out);
            for (s, got) in strings.iter().zip(&out) {
                assert_eq!(*got, expected(s), "length {len}");
            }
        }
    }

    #[test]
    fn the_portable_path_matches_too() {
        // The compress-only path taken where the SHA extensions are missing.
        let mut seed = 7;
        for len in 0..=MAX_ONE_BLOCK {
            let s = bytes(&mut seed, len);
            let mut state = H;
            sha2::block_api::compress256(&mut state, &[pad(&s)]);
            assert_eq!(head(&state), expected(&s), "length {len}");
        }
    }
}
