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

/// Two seeded folded-multiply hashes of `bytes` (a 128-bit key), eight bytes at a time, in
/// one pass: each word is read once and mixed into both halves.
#[inline]
fn fold_hash2(bytes: &[u8], seeds: (u64, u64)) -> (u64, u64) {
    const K1: u64 = 0x9e37_79b9_7f4a_7c15;
    const K2: u64 = 0xbf58_476d_1ce4_e5b9;
    const K3: u64 = 0x94d0_49bb_1331_11eb;
    let len = (bytes.len() as u64).wrapping_mul(K1);
    let (mut a, mut b) = (seeds.0 ^ len, seeds.1 ^ len);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let w = u64::from_le_bytes(w);
        a = fold_mul(a ^ w, K2);
        b = fold_mul(b ^ w, K3);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        let w = u64::from_le_bytes(w);
        a = fold_mul(a ^ w, K2);
        b = fold_mul(b ^ w, K3);
    }
    (fold_mul(a, K1), fold_mul(b, K1))
}
