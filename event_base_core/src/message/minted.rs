//! The ids this process minted ([`new_message_id`](crate::new_message_id)) and has not sent
//! yet, and the 128-bit key of an id that the dedup window holds ids by.
//!
//! A send's dedup check (is this id held, or completed within the window?) is a lookup in a
//! table of millions of keys: a cache miss, for an answer that is nearly always "no", since
//! nearly every message is new. For an id this process minted and no send has taken yet the
//! answer is known without the lookup: nothing can have been accepted under an id that was
//! never sent. So minting files the id's key here (a 64 KiB table of atomic slots, one slot
//! per key, a newer key overwriting an older one in its slot), and the dedup check of a send
//! first tries to [`claim`] it: to take the key out of its slot. At most one send can take it
//! (a compare-and-swap), on any thread and any bus of the process; every later send of that
//! id (a clone sent again, the id copied into another message) finds the slot without it and
//! does the full check. A key overwritten by a newer one before its send was made is the same
//! as one never minted: the full check. `delivery/dedup.rs` says when a send claims, and why
//! that is race-free.
//!
//! A slot holds 64 bits of the key (the slot's index comes from other bits of it), so a send
//! of an id that is *not* in the table takes another id's slot with a chance of 2⁻⁶⁴: that
//! send then skips the window's lookup, and, if it was a resend of a completed id, is
//! delivered again (what a bus without the window does); a new id is never refused by it.
//!
//! Minting only files keys once a bus with a dedup window exists ([`watch`]): a process
//! whose buses all have the window off pays one relaxed load per id.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Slots of the table (a power of two): 64 KiB, small enough to stay in the L2 cache.
const SLOTS: usize = 8192;

/// One key's 64 bits per slot; zero is a free slot.
static TABLE: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

/// Whether some bus of the process deduplicates sends (then minting files keys).
static WATCHED: AtomicBool = AtomicBool::new(false);

/// The process's seeds of [`key`], drawn on first use.
static SEEDS: OnceLock<(u64, u64)> = OnceLock::new();

/// From now on, minted ids are filed: a bus with a dedup window was built.
pub(crate) fn watch() {
    WATCHED.store(true, Ordering::Relaxed);
}

/// The 128-bit key of `id`: two seeded folded-multiply hashes of its text, the seeds random
/// per process (a sender cannot choose ids whose keys collide). Two ids with one key are
/// taken for one: with `n` ids held, a chance of about `n² / 2¹²⁹`.
#[inline]
pub(crate) fn key(id: &str) -> u128 {
    key_of(id.as_bytes())
}

#[inline]
fn key_of(id: &[u8]) -> u128 {
    let seeds = *SEEDS.get_or_init(|| {
        (
            RandomState::new().hash_one(1u8),
            RandomState::new().hash_one(2u8),
        )
    });
    let (hi, lo) = fold_hash2(id, seeds);
    (u128::from(hi) << 64) | u128::from(lo)
}

/// The slot of `key` (from its top bits) and what the slot holds for it (its low half, never
/// zero).
#[inline]
fn slot(key: u128) -> (&'static AtomicU64, u64) {
    let index = ((key >> 96) as usize) & (SLOTS - 1);
    (&TABLE[index], (key as u64).max(1))
}

/// Files a freshly minted id, its text (see the module's text), if some bus deduplicates.
#[inline]
pub(crate) fn minted(id: &[u8]) {
    if WATCHED.load(Ordering::Relaxed) {
        let (slot, tag) = slot(key_of(id));
        slot.store(tag, Ordering::Relaxed);
    }
}

/// Takes `key` out of the table: `true` for the first send of an id minted here (no send
/// before it took the key), `false` if it is not there (sent before, set by hand, minted
/// elsewhere, or overwritten).
#[inline]
pub(crate) fn claim(key: u128) -> bool {
    let (slot, tag) = slot(key);
    // A plain load first: a slot that does not hold the key is left alone (no write to a line
    // another thread may be minting into).
    slot.load(Ordering::Relaxed) == tag
        && slot
            .compare_exchange(tag, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
}

/// The product's two halves folded together: the mixing step of the key hash.
#[inline]
fn fold_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

/// Two seeded folded-multiply hashes of `bytes` (a 128-bit key), eight bytes at a time, in
/// one pass: each word is read once and mixed into both halves. A tail shorter than a word is
/// read as the last eight bytes (overlapping the word before; the length is mixed in), so an
/// id of 36 bytes is five plain loads, no copy.
#[inline]
pub(crate) fn fold_hash2(bytes: &[u8], seeds: (u64, u64)) -> (u64, u64) {
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
#[inline]
fn word(c: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&c[..8]);
    u64::from_le_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// An id minted (filed) now, distinct from every other of the process.
    fn mint() -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let id = format!("minted-test-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        minted(id.as_bytes());
        id
    }

    /// One of a few fresh ids whose first claim succeeds: another test's id minted
    /// meanwhile may take its slot (a newer key overwrites).
    fn minted_and_claimed() -> String {
        (0..8)
            .map(|_| mint())
            .find(|id| claim(key(id)))
            .expect("minted here, never sent: claimed")
    }

    #[test]
    fn a_minted_id_is_claimed_once_and_other_ids_never() {
        watch();
        let id = minted_and_claimed();
        assert!(
            !claim(key(&id)),
            "the second send of it does the full check"
        );
        assert!(!claim(key("order-42")), "an id set by hand");
        assert!(!claim(key(&id.to_uppercase())), "another id");
    }

    #[test]
    fn a_claim_on_another_thread_takes_the_key_for_every_thread() {
        watch();
        let id = std::thread::spawn(minted_and_claimed)
            .join()
            .expect("thread");
        assert!(!claim(key(&id)), "claimed on the other thread");
        // Minted here, claimed there: still one claim.
        let id = mint();
        let copy = id.clone();
        let there = std::thread::spawn(move || claim(key(&copy)))
            .join()
            .expect("thread");
        assert!(!(there && claim(key(&id))), "claimed twice");
    }

    #[test]
    fn keys_are_stable_and_differ_between_ids() {
        assert_eq!(key("a"), key("a"));
        assert_ne!(key("a"), key("b"));
        assert_ne!(key(""), key("\0"));
        // Tails: the last word overlaps the one before; every byte still counts.
        let id = "0123456789abcdef0123";
        for at in 0..id.len() {
            let mut changed = id.as_bytes().to_vec();
            changed[at] ^= 1;
            let changed = String::from_utf8(changed).expect("ascii");
            assert_ne!(key(id), key(&changed), "byte {at}");
        }
    }
}
