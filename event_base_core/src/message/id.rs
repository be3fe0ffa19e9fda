//! Fast UUID v4 generation for message ids.
//!
//! `uuid`'s own v4 generator asks the operating system for randomness on every call (one system
//! call per message). Message ids need uniqueness, not secrecy, so each thread keeps a small
//! wyrand generator seeded once from the standard library's randomly keyed hasher; an id then
//! costs a few multiplications. The version and variant bits are set as RFC 9562 requires.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use uuid::{Builder, Uuid};

thread_local! {
    static STATE: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    let ptr = &h as *const _ as u64;
    h.write_u64(ptr);
    h.finish() | 1
}

fn next_u64(state: &Cell<u64>) -> u64 {
    // wyrand: one add, one 128-bit multiply, one xor.
    let s = state.get().wrapping_add(0xa076_1d64_78bd_642f);
    state.set(s);
    let t = u128::from(s) * u128::from(s ^ 0xe703_7ed1_a0b4_28db);
    ((t >> 64) as u64) ^ (t as u64)
}

/// A fast, non-cryptographic random number (for jitter and ids).
pub(crate) fn random_u64() -> u64 {
    STATE.with(next_u64)
}

/// A new random (version 4) UUID.
pub fn new_message_id() -> Uuid {
    STATE.with(|s| {
        let hi = next_u64(s);
        let lo = next_u64(s);
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&hi.to_le_bytes());
        bytes[8..].copy_from_slice(&lo.to_le_bytes());
        Builder::from_random_bytes(bytes).into_uuid()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_are_v4_and_distinct() {
        let ids: HashSet<Uuid> = (0..10_000).map(|_| new_message_id()).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids.iter().all(|id| id.get_version_num() == 4));
    }
}
