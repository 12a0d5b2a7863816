//! Session tokens: drawn from (gateway id, slot, generation) by SHA-256, so that every worker
//! of a fleet and every restart use the same token for a slot at the same time without
//! talking to each other, and spelled in the alphabet and length the provider accepts.

use crate::error::{Error, Result};
use sha2::{Digest, Sha256};

/// The characters a provider accepts in a session id. Each one is a subset of the next, so a
/// rule the user asks for is allowed when it is no wider than the provider's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Alphabet {
    /// `0-9`
    Digits,
    /// `a-z0-9`
    Lower,
    /// `A-Za-z0-9`
    Alnum,
    /// `A-Za-z0-9_`
    Word,
}

impl Alphabet {
    pub const ALL: [Alphabet; 4] = [Alphabet::Digits, Alphabet::Lower, Alphabet::Alnum, Alphabet::Word];

    pub fn chars(self) -> &'static [u8] {
        match self {
            Alphabet::Digits => b"0123456789",
            Alphabet::Lower => b"abcdefghijklmnopqrstuvwxyz0123456789",
            Alphabet::Alnum => b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
            Alphabet::Word => b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Alphabet::Digits => "digits",
            Alphabet::Lower => "lower",
            Alphabet::Alnum => "alnum",
            Alphabet::Word => "word",
        }
    }

    pub fn parse(s: &str) -> Result<Alphabet> {
        Alphabet::ALL.into_iter().find(|a| a.name() == s).ok_or_else(|| {
            Error::BadInput(format!(
                "session_alphabet {:?} is not one of 'digits' (0-9), 'lower' (a-z0-9), 'alnum' (A-Za-z0-9), 'word' (A-Za-z0-9_)",
                crate::mask::mask_raw(s)
            ))
        })
    }
}

/// A provider's rule for session ids: which characters, and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRule {
    pub alphabet: Alphabet,
    pub min_len: u32,
    pub max_len: u32,
}

/// Without a preset: any alphanumeric id of 1 to 64 characters (no provider we know of asks
/// for more, and a longer user name is refused by some clients).
pub const ANY_RULE: IdRule = IdRule { alphabet: Alphabet::Alnum, min_len: 1, max_len: 64 };

/// Without a preset, tokens are 12 alphanumeric characters: 71 bits, so that the 100,000
/// slots of the largest gateway meet no collision within a generation in practice.
pub const DEFAULT_LENGTH: u32 = 12;

/// The token of `slot` in `generation`: `length` characters of `alphabet`, each drawn from a
/// SHA-256 stream over the three inputs by rejection sampling (no character is favoured).
pub fn token(gateway: &str, slot: u32, generation: u64, alphabet: Alphabet, length: u32) -> String {
    let chars = alphabet.chars();
    let n = chars.len() as u32;
    // Bytes at or over this would favour the first characters: they are skipped.
    let limit = 256 - 256 % n;
    let mut out = String::with_capacity(length as usize);
    let mut block = 0u64;
    while out.len() < length as usize {
        let digest = Sha256::new()
            .chain_update(b"exitpool-token\0")
            .chain_update(gateway.as_bytes())
            .chain_update([0])
            .chain_update(slot.to_be_bytes())
            .chain_update(generation.to_be_bytes())
            .chain_update(block.to_be_bytes())
            .finalize();
        for &b in digest.iter() {
            if (b as u32) < limit && out.len() < length as usize {
                out.push(chars[(b as u32 % n) as usize] as char);
            }
        }
        block += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_token_is_the_same_for_the_same_inputs_and_obeys_the_rule() {
        for a in Alphabet::ALL {
            for len in [1, 8, 25, 255] {
                let t = token("resi", 7, 3, a, len);
                assert_eq!(t, token("resi", 7, 3, a, len));
                assert_eq!(t.len(), len as usize);
                assert!(t.bytes().all(|c| a.chars().contains(&c)), "{t} outside {}", a.name());
            }
        }
    }

    #[test]
    fn tokens_differ_across_slots_generations_and_gateways() {
        let mut seen = HashSet::new();
        for slot in 0..1000 {
            for generation in 0..5 {
                assert!(seen.insert(token("resi", slot, generation, Alphabet::Alnum, 12)), "slot {slot} gen {generation}");
            }
        }
        assert_ne!(token("resi", 0, 0, Alphabet::Alnum, 12), token("resj", 0, 0, Alphabet::Alnum, 12));
    }

    #[test]
    fn every_character_of_the_alphabet_is_used() {
        let all: String = (0..200).map(|s| token("g", s, 0, Alphabet::Word, 16)).collect();
        for &c in Alphabet::Word.chars() {
            assert!(all.as_bytes().contains(&c), "{} never drawn", c as char);
        }
    }

    #[test]
    fn alphabets_nest_and_parse_by_name() {
        for w in Alphabet::ALL.windows(2) {
            assert!(w[0] < w[1]);
            assert!(w[0].chars().iter().all(|c| w[1].chars().contains(c)));
        }
        assert_eq!(Alphabet::parse("word").unwrap(), Alphabet::Word);
        assert!(Alphabet::parse("hex").unwrap_err().to_string().contains("\"hex\""));
    }
}
