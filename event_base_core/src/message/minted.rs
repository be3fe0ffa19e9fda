//! The ids this process minted ([`new_message_id`](crate::new_message_id)) and no send has
//! taken yet.
//!
//! A send's dedup check (is this id held, or completed within the window?) is a lookup in a
//! table of millions of keys: a cache miss, for an answer that is nearly always "no", since
//! nearly every message is new. For an id this process minted and no send has taken yet the
//! answer is known without the lookup: nothing can have been accepted under an id that was
//! never sent. So minting files a 64-bit key of the id here (a 64 KiB table of atomic slots,
//! one slot per key, a newer key overwriting an older one in its slot), and the dedup check
//! of a send first tries to [`claim`] it: to take the key out of its slot. At most one send
//! can take it (a compare-and-swap), on any thread and any bus of the process; every later
//! send of that id (a clone sent again, the id copied into another message) finds the slot
//! without it and does the full check. A key overwritten by a newer one before its send was
//! made is the same as one never minted: the full check. `delivery/dedup/dedup_window.rs` says when a send
//! claims, and why that is race-free.
//!
//! The key is not a hash: it is 64 of the id's random bits, those of its first and last eight
//! hex digits (bits 127–96 and 31–0 of the UUID; no version or variant bit among them).
//! Minting takes them from the number before it is written out (a few instructions); a send
//! reads them back from the text (two 8-byte loads turned from hex digits into 32 bits each).
//! A text that cannot be a minted id (not 36 bytes, or those 16 characters not lower-case
//! hex digits: most ids set by hand) takes no key.
//!
//! What another text takes: the key of a minted id is 64 uniformly random bits, so a text
//! not minted here reads as the key filed in its slot with a chance of 2⁻⁶⁴; that send then
//! skips the window's lookup (and, were it a resend of a completed id, is delivered again,
//! as without the window), and the minted id's own send does the full check; a new id is
//! never refused by this. A text made *from* a minted id (the same 16 digits, others
//! changed) reads as its key by construction; it matters only if that text was sent and
//! completed while the minted id was still unsent, and is sent again before it: an
//! application that does that with ids it did not send yet could as well send the id itself
//! first, and have its own send refused.
//!
//! Minting only files keys once a bus with a dedup window exists ([`watch`]): a process
//! whose buses all have the window off pays one relaxed load per id.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Slots of the table (a power of two): 64 KiB, small enough to stay in the L2 cache.
const SLOTS: usize = 8192;

/// One key per slot; zero is a free slot.
static TABLE: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

/// Whether some bus of the process deduplicates sends (then minting files keys).
static WATCHED: AtomicBool = AtomicBool::new(false);

/// From now on, minted ids are filed: a bus with a dedup window was built.
pub(crate) fn watch() {
    WATCHED.store(true, Ordering::Relaxed);
}

/// The slot of `key` (its low bits) and what the slot holds for it (never zero).
#[inline]
fn slot(key: u64) -> (&'static AtomicU64, u64) {
    (&TABLE[(key as usize) & (SLOTS - 1)], key.max(1))
}

/// Files a freshly minted id, by the two halves of its 128 bits as it is written out (`hi`
/// first), if some bus deduplicates.
#[inline]
pub(crate) fn minted(hi: u64, lo: u64) {
    if WATCHED.load(Ordering::Relaxed) {
        let (slot, tag) = slot(key_of_bits(hi, lo));
        slot.store(tag, Ordering::Relaxed);
    }
}

/// The key of the id of bits `hi`, `lo`: its first eight hex digits (the top half of `hi`)
/// and its last eight (the bottom half of `lo`).
#[inline]
fn key_of_bits(hi: u64, lo: u64) -> u64 {
    (hi & 0xFFFF_FFFF_0000_0000) | (lo & 0xFFFF_FFFF)
}

/// The key [`key_of_bits`] filed for text `id`, if `id` can be a minted id's text.
#[inline]
fn key_of_text(id: &[u8]) -> Option<u64> {
    let id: &[u8; 36] = id.try_into().ok()?;
    let (head, _) = id.split_first_chunk::<8>()?;
    let (_, tail) = id.split_last_chunk::<8>()?;
    Some((u64::from(hex8(*head)?) << 32) | u64::from(hex8(*tail)?))
}

/// Eight lower-case hex digits as the number they write (the first the most significant);
/// `None` if one is not such a digit. A few word operations, no loop.
#[inline]
fn hex8(digits: [u8; 8]) -> Option<u32> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // The first digit in the top byte.
    let w = u64::from_be_bytes(digits);
    // Per byte `c` below 0x80, `c + (0x80 - x)` has its top bit set iff `c >= x`, with no
    // carry into the next byte.
    let at_least = |x: u64| w.wrapping_add((0x80 - x) * ONES) & HIGH;
    let digit = at_least(b'0'.into()) & !at_least(u64::from(b'9') + 1);
    let letter = at_least(b'a'.into()) & !at_least(u64::from(b'f') + 1);
    if w & HIGH != 0 || (digit | letter) != HIGH {
        return None;
    }
    // '0'..'9' are 0x30..0x39, 'a'..'f' 0x61..0x66: the low four bits, and 9 more for a letter.
    let n = (w & (0x0F * ONES)) + (letter >> 7) * 9;
    // Two digits a byte, then four, then eight.
    let n = (n | (n >> 4)) & 0x00FF_00FF_00FF_00FF;
    let n = (n | (n >> 8)) & 0x0000_FFFF_0000_FFFF;
    Some(((n | (n >> 16)) & 0xFFFF_FFFF) as u32)
}

/// Takes the key of `id` out of the table: `true` for the first send of an id minted here
/// (no send before it took the key), `false` if it is not there (sent before, set by hand,
/// minted elsewhere, or overwritten).
#[inline]
pub(crate) fn claim(id: &str) -> bool {
    let Some(key) = key_of_text(id.as_bytes()) else {
        return false;
    };
    let (slot, tag) = slot(key);
    // A plain load first: a slot that does not hold the key is left alone (no write to a line
    // another thread may be minting into).
    slot.load(Ordering::Relaxed) == tag
        && slot
            .compare_exchange(tag, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, RandomState};

    /// Random bits and their text, as `new_message_id` would write them (`message/id.rs`,
    /// not imported here: it imports this file).
    fn random_id() -> (u64, u64, String) {
        let (hi, lo) = (
            RandomState::new().hash_one(1u8),
            RandomState::new().hash_one(2u8),
        );
        let hex = format!("{:032x}", (u128::from(hi) << 64) | u128::from(lo));
        let text = format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        );
        (hi, lo, text)
    }

    /// A fresh id, minted (filed).
    fn mint() -> String {
        let (hi, lo, text) = random_id();
        minted(hi, lo);
        text
    }

    /// One of a few fresh ids whose first claim succeeds: another test's id minted
    /// meanwhile may take its slot (a newer key overwrites).
    fn minted_and_claimed() -> String {
        watch();
        (0..8)
            .map(|_| mint())
            .find(|id| claim(id))
            .expect("minted here, never sent: claimed")
    }

    #[test]
    fn a_minted_id_is_claimed_once_and_other_ids_never() {
        let id = minted_and_claimed();
        assert!(!claim(&id), "the second send of it does the full check");
        assert!(!claim("order-42"), "an id set by hand");
        // A fresh id beginning with a letter, so that its upper case is another text.
        let fresh = (0..200)
            .map(|_| mint())
            .find(|id| id.as_bytes()[0].is_ascii_alphabetic())
            .expect("one in about three ids begins with a letter");
        assert!(
            !claim(&fresh.to_uppercase()),
            "upper case: not a minted text"
        );
        let mut other = fresh.clone().into_bytes();
        other[35] = if other[35] == b'0' { b'1' } else { b'0' };
        let other = String::from_utf8(other).expect("ascii");
        assert!(!claim(&other), "another id");
    }

    #[test]
    fn a_claim_on_another_thread_takes_the_key_for_every_thread() {
        let id = std::thread::spawn(minted_and_claimed)
            .join()
            .expect("thread");
        assert!(!claim(&id), "claimed on the other thread");
        // Minted here, claimed there: still one claim.
        let id = mint();
        let copy = id.clone();
        let there = std::thread::spawn(move || claim(&copy))
            .join()
            .expect("thread");
        assert!(!(there && claim(&id)), "claimed twice");
    }

    #[test]
    fn the_key_read_from_the_text_is_the_one_filed_from_the_bits() {
        for _ in 0..1000 {
            let (hi, lo, text) = random_id();
            assert_eq!(key_of_text(text.as_bytes()), Some(key_of_bits(hi, lo)));
        }
    }

    #[test]
    fn only_lower_case_hex_digits_read_as_a_number() {
        assert_eq!(hex8(*b"0123abcd"), Some(0x0123_abcd));
        assert_eq!(hex8(*b"ffffffff"), Some(u32::MAX));
        assert_eq!(hex8(*b"90000009"), Some(0x9000_0009));
        for bad in [
            b'/', b':', b'`', b'g', b'A', b'F', b'-', b' ', 0, 0x7f, 0x80, 0xe0, 0xff,
        ] {
            for at in 0..8 {
                let mut digits = *b"01234567";
                digits[at] = bad;
                assert_eq!(hex8(digits), None, "{bad:#x} at {at}");
            }
        }
        assert_eq!(
            key_of_text(b"0123abcd-0000-4000-8000-00000000ffff"),
            Some(0x0123_abcd_0000_ffff)
        );
        assert_eq!(key_of_text(b"0123abcd-0000-4000-8000-00000000fff"), None);
    }
}
