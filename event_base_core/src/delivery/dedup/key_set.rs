//! [`KeySet`]: a set of 128-bit id keys ([`IdKeys`](super::id_key::IdKeys)) for the dedup
//! window, which holds them by the million and asks one thing of each: is it there.
//!
//! Open addressing on the key itself (already a seeded hash: no hashing again), four keys to
//! a 64-byte bucket, buckets probed in order. A lookup of a key that is not there, the
//! common case (every new send), stops at the first bucket with a free place: one cache line
//! at the load kept here (at most three quarters). An insert writes into the same line. Keys
//! are never removed one by one: the window drops a generation whole ([`clear`](KeySet::clear)),
//! which keeps the buckets for the next generation, so a window in a steady state allocates
//! nothing and never rehashes. Growing (doubling) moves keys without hashing them.
//!
//! Compared with `hashbrown` (its control bytes in one array, the keys in another), a lookup
//! or an insert touches one line instead of two, and growing costs a few instructions a key.

/// Four keys: one cache line. A zero key is a free place.
#[derive(Clone, Copy, Default)]
#[repr(align(64))]
struct Bucket([u128; 4]);

/// Buckets of a set's first allocation (4 KiB).
const MIN_BUCKETS: usize = 64;

/// A set of non-zero 128-bit keys (a zero key is stored as 1: two ids whose keys are 0 and 1
/// are taken for one, a chance of 2⁻¹²⁷ per pair).
#[derive(Default)]
pub(crate) struct KeySet {
    /// A power of two of them, or none before the first insert.
    buckets: Vec<Bucket>,
    len: usize,
}

impl KeySet {
    /// The key as stored: never zero.
    #[inline]
    fn stored(key: u128) -> u128 {
        key.max(1)
    }

    /// The bucket a key's probe starts at (the low bits; the window takes its shard from the
    /// high half).
    #[inline]
    fn home(&self, key: u128) -> usize {
        (key as usize) & (self.buckets.len() - 1)
    }

    /// Whether `key` is in the set.
    #[inline]
    pub(crate) fn contains(&self, key: u128) -> bool {
        if self.len == 0 {
            return false;
        }
        let key = Self::stored(key);
        let mask = self.buckets.len() - 1;
        let mut i = self.home(key);
        // Terminates: the load stays below one, so some bucket has a free place.
        loop {
            for &k in &self.buckets[i].0 {
                if k == key {
                    return true;
                }
                if k == 0 {
                    return false;
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds `key` (nothing if it is there already).
    #[inline]
    pub(crate) fn insert(&mut self, key: u128) {
        // At most three quarters full, counting the key about to come in.
        if (self.len + 1) * 4 > self.buckets.len() * 3 * 4 {
            self.grow();
        }
        if self.place(Self::stored(key)) {
            self.len += 1;
        }
    }

    /// Adds `keys`, reading the bucket of every one before writing any: their cache misses
    /// overlap instead of following one another. Unlike [`insert`](Self::insert) it does not
    /// look for them first: a key put in twice is held twice (and counted twice), which
    /// changes no answer of [`contains`](Self::contains). For the window's completions: an id
    /// completes once per send accepted, so nearly never twice in a window.
    pub(crate) fn insert_all(&mut self, keys: &[u128]) {
        while (self.len + keys.len()) * 4 > self.buckets.len() * 3 * 4 {
            self.grow();
        }
        let mut touched = 0u128;
        for &key in keys {
            touched ^= self.buckets[self.home(Self::stored(key))].0[0];
        }
        // The loads have to be made: their values are used (by nothing that matters).
        std::hint::black_box(touched);
        for &key in keys {
            self.place_new(Self::stored(key));
        }
        self.len += keys.len();
    }

    /// Puts a stored key in its first free place unless it is there; whether it was put.
    #[inline]
    fn place(&mut self, key: u128) -> bool {
        let mask = self.buckets.len() - 1;
        let mut i = self.home(key);
        loop {
            for k in &mut self.buckets[i].0 {
                if *k == key {
                    return false;
                }
                if *k == 0 {
                    *k = key;
                    return true;
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Puts a stored key in its first free place, without looking for it.
    #[inline]
    fn place_new(&mut self, key: u128) {
        let mask = self.buckets.len() - 1;
        let mut i = self.home(key);
        loop {
            for k in &mut self.buckets[i].0 {
                if *k == 0 {
                    *k = key;
                    return;
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Twice the buckets (or the first ones), the keys moved over.
    #[cold]
    fn grow(&mut self) {
        let n = (self.buckets.len() * 2).max(MIN_BUCKETS);
        let old = std::mem::replace(&mut self.buckets, vec![Bucket::default(); n]);
        for bucket in &old {
            for &k in &bucket.0 {
                if k != 0 {
                    self.place_new(k);
                }
            }
        }
    }

    /// Empties the set, keeping its buckets for the keys to come.
    pub(crate) fn clear(&mut self) {
        if self.len != 0 {
            self.buckets.fill(Bucket::default());
            self.len = 0;
        }
    }

    /// Whether the set holds no key.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keys held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Places for keys, used or not (memory: 16 bytes each).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.buckets.len() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys spread like the real ones (a multiplicative hash of a counter).
    fn key(i: u64) -> u128 {
        let x =
            u128::from(i.wrapping_add(1)).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
        x ^ (x >> 61)
    }

    #[test]
    fn holds_what_was_inserted_and_nothing_else() {
        let mut s = KeySet::default();
        assert!(!s.contains(key(0)));
        for i in 0..10_000 {
            s.insert(key(i));
        }
        s.insert(key(5)); // again: still one
        assert_eq!(s.len(), 10_000);
        assert!((0..10_000).all(|i| s.contains(key(i))));
        assert!(!(10_000..20_000).any(|i| s.contains(key(i))));
        assert!(
            s.capacity() * 3 >= s.len() * 4,
            "at most three quarters full"
        );
    }

    #[test]
    fn keys_that_share_a_bucket_or_are_zero_are_kept_apart() {
        let mut s = KeySet::default();
        // All on bucket 0 (same low bits): they spill over into the buckets after it.
        for i in 1..=9u128 {
            s.insert(i << 64);
        }
        assert!((1..=9u128).all(|i| s.contains(i << 64)));
        assert!(!s.contains(10 << 64));
        s.insert(0);
        assert!(s.contains(0));
    }

    #[test]
    fn keys_put_in_together_are_held_like_keys_put_in_one_by_one() {
        let mut s = KeySet::default();
        let keys: Vec<u128> = (0..10_000).map(key).collect();
        for chunk in keys.chunks(16) {
            s.insert_all(chunk);
        }
        s.insert_all(&[key(3), key(3), 0, 0]); // again, and twice in one call: held twice
        assert_eq!(s.len(), 10_004);
        assert!(keys.iter().all(|&k| s.contains(k)));
        assert!(s.contains(0));
        assert!(!(10_000..20_000).any(|i| s.contains(key(i))));
        assert!(s.capacity() * 3 >= s.len() * 4);
    }

    #[test]
    fn clear_forgets_the_keys_and_keeps_the_room() {
        let mut s = KeySet::default();
        for i in 0..1000 {
            s.insert(key(i));
        }
        let room = s.capacity();
        s.clear();
        assert!(s.is_empty());
        assert!(!s.contains(key(1)));
        for i in 1000..2000 {
            s.insert(key(i));
        }
        assert_eq!(
            s.capacity(),
            room,
            "the same number of keys fits without growing"
        );
    }
}
