//! Ring positions: the first 8 bytes of sha256(utf8(s)), big-endian. This is the article's
//! `_h`, kept bit for bit so that fleets running the reference code agree with us.

use sha2::{Digest, Sha256};

#[inline]
pub fn position(s: &[u8]) -> u64 {
    let digest = Sha256::digest(s);
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_python_reference_values() {
        // int.from_bytes(hashlib.sha256(s).digest()[:8], "big") in Python
        assert_eq!(position(b""), 0xe3b0c44298fc1c14);
        assert_eq!(position(b"abc"), 0xba7816bf8f01cfea);
    }
}
