//! [`TopicHasher`]: the hash of the topic table, which every send looks a topic up in.
//!
//! The standard library's SipHash resists hash flooding, which costs about 150 instructions
//! for a short topic name, more than the rest of the lookup. The topic table cannot be
//! flooded: it is built once from the registered handlers and never grows while the system
//! runs, and a lookup of an unknown name only misses. So a folded-multiply hash over eight
//! bytes at a time does, at a fraction of the cost.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by topic, hashed with [`TopicHasher`].
pub(crate) type TopicMap<K, V> = HashMap<K, V, BuildHasherDefault<TopicHasher>>;

/// Multiplier of the mix (odd, with well spread bits).
const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;
/// Starting state, so that the empty input does not hash to zero.
const START: u64 = 0x243f_6a88_85a3_08d3;

/// A fast, non-cryptographic hasher for the topic names of a built system.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TopicHasher(u64);

impl Default for TopicHasher {
    fn default() -> Self {
        TopicHasher(START)
    }
}

impl TopicHasher {
    /// A folded multiply: the full 128-bit product's halves xor-ed together, so every input
    /// bit reaches every output bit (a plain multiply only carries bits upwards).
    #[inline]
    fn mix(&mut self, word: u64) {
        let product = u128::from(self.0 ^ word) * u128::from(MULTIPLIER);
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }
}

impl Hasher for TopicHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // The length first: the last word is zero-padded, so "a" and "a\0" differ only there.
        self.mix(bytes.len() as u64);
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn hash(s: &str) -> u64 {
        BuildHasherDefault::<TopicHasher>::default().hash_one(s)
    }

    #[test]
    fn distinct_names_hash_apart() {
        // Names alike but for a digit or two: a plain multiply-rotate hash collides on these.
        let names: Vec<String> = (0..100_000).map(|i| format!("topic.{i}")).collect();
        let hashes: std::collections::HashSet<u64> = names.iter().map(|n| hash(n)).collect();
        assert_eq!(hashes.len(), names.len());
        // Names that differ only past the first eight bytes, or only in length.
        assert_ne!(hash("orders.created"), hash("orders.cancelled"));
        assert_ne!(hash("a"), hash("a\0"));
    }

    #[test]
    fn the_map_finds_by_str() {
        let mut m: TopicMap<String, u32> = TopicMap::default();
        m.insert("orders".into(), 1);
        assert_eq!(m.get("orders"), Some(&1));
        assert_eq!(m.get("order"), None);
    }
}
