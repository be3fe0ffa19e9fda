//! [`IdKeys`]: a message id as a 128-bit key, for the tables that hold ids by the million
//! (the open fan-outs) and only need to know whether an id is there. (The dedup window keys
//! ids with the same hash seeded once per process, `message/minted.rs`, so that a send's key
//! also finds the id among those minted and not yet sent.)
//!
//! Two seeded folded-multiply hashes of the id (`message/minted.rs`), random per bus, so a sender cannot choose ids
//! that collide. A key stands for its id: two ids with the same key would be taken for one,
//! which, with `n` ids held, happens with a chance of about `n² / 2¹²⁹` (for a billion ids,
//! below 10⁻²⁰). Keys are cheap to compare and to store (16 bytes, no allocation), where a
//! map of the ids' text compares and validates the text on every lookup.

use crate::message::minted::fold_hash2;
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
