//! [`IdKeys`]: a message id as a 128-bit key, for the tables that hold ids by the million
//! (the dedup window, the open fan-outs) and only need to know whether an id is there.
//!
//! Two seeded folded-multiply hashes of the id, random per bus, so a sender cannot choose ids
//! that collide. A key stands for its id: two ids with the same key would be taken for one,
//! which, with `n` ids held, happens with a chance of about `n² / 2¹²⁹` (for a billion ids,
//! below 10⁻²⁰). Keys are cheap to compare and to store (16 bytes, no allocation), where a
//! map of the ids' text compares and validates the text on every lookup.

use std::hash::{BuildHasher, Hasher, RandomState};

/// Makes the keys of one bus.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdKeys {
    seeds: (u64, u64),
}

impl IdKeys {
    /// Keys with fresh random seeds.
    pub(crate) fn new() -> Self {
        IdKeys {
            seeds: (
                RandomState::new().hash_one(1u8),
                RandomState::new().hash_one(2u8),
            ),
        }
    }

    /// The key of `id`.
    #[inline]
    pub(crate) fn key(&self, id: &str) -> u128 {
        let (hi, lo) = fold_hash2(id.as_bytes(), self.seeds);
        (u128::from(hi) << 64) | u128::from(lo)
    }
}

/// Keys are already hashes (seeded per bus, so not chosen by a sender): the map uses their
/// low half as it is rather than hash them again.
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u128` is used; fold anything else in all the same.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u128(&mut self, key: u128) {
        self.0 = key as u64;
    }
}

/// The product's two halves folded together: the mixing step of the key hash.
#[inline]
fn fold_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

/// Two seeded folded-multiply hashes of `bytes` (a 128-bit key). A generated id (36 bytes,
/// nearly every id) takes a copy of the loop made for its length: five plain loads, no
/// branches; the same hash as any other length.
#[inline]
fn fold_hash2(bytes: &[u8], seeds: (u64, u64)) -> (u64, u64) {
    match bytes.len() {
        36 => fold_hash2_of(&bytes[..36], seeds),
        _ => fold_hash2_of(bytes, seeds),
    }
}

/// [`fold_hash2`]: eight bytes at a time, in one pass, each word mixed into both halves. A
/// tail shorter than a word is read as the last eight bytes (overlapping the word before; the
/// length is mixed in), so no copy.
#[inline(always)]
fn fold_hash2_of(bytes: &[u8], seeds: (u64, u64)) -> (u64, u64) {
    const K1: u64 = 0x9e37_79b9_7f4a_7c15;
    const K2: u64 = 0xbf58_476d_1ce4_e5b9;
    const K3: u64 = 0x94d0_49bb_1331_11eb;
    let len = (bytes.len() as u64).wrapping_mul(K1);
    let (mut a, mut b) = (seeds.0 ^ len, seeds.1 ^ len);
    let mut mix = |w: u64| {
        a = fold_mul(a ^ w, K2);
        b = fold_mul(b ^ w, K3);
    };
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        mix(word(c));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        match bytes.len().checked_sub(8) {
            Some(from) => mix(word(&bytes[from..])),
            None => {
                let mut w = [0u8; 8];
                w[..rest.len()].copy_from_slice(rest);
                mix(u64::from_le_bytes(w));
            }
        }
    }
    (fold_mul(a, K1), fold_mul(b, K1))
}

/// The first eight bytes of `c` (it has at least eight) as a little-endian word.
#[inline(always)]
fn word(c: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&c[..8]);
    u64::from_le_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_differ_between_ids() {
        let keys = IdKeys::new();
        assert_eq!(keys.key("a"), keys.key("a"));
        assert_ne!(keys.key("a"), keys.key("b"));
        assert_ne!(keys.key(""), keys.key("\0"));
        assert_ne!(IdKeys::new().key("a"), keys.key("a"), "seeded per bus");
        // Tails: the last word overlaps the one before; every byte still counts, in the
        // copy for 36 bytes as in the general one.
        for id in [
            "0123456789abcdef0123",
            "0123456789abcdef-0123456789abcdef-012",
        ] {
            for at in 0..id.len() {
                let mut changed = id.as_bytes().to_vec();
                changed[at] ^= 1;
                let changed = String::from_utf8(changed).expect("ascii");
                assert_ne!(keys.key(id), keys.key(&changed), "{id}: byte {at}");
            }
        }
    }

    #[test]
    fn the_copy_for_36_bytes_is_the_same_hash() {
        let seeds = (0x1234_5678, 0x9abc_def0);
        for id in [
            "5f0c2a4e-93b1-4d7a-8e26-0b9f3c71d845",
            "ffffffff-ffff-4fff-bfff-ffffffffffff",
        ] {
            assert_eq!(
                fold_hash2(id.as_bytes(), seeds),
                fold_hash2_of(std::hint::black_box(id.as_bytes()), seeds)
            );
        }
    }
}
