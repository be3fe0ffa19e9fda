//! Fast UUID v4 generation for message ids.
//!
//! `uuid`'s own v4 generator asks the operating system for randomness on every call (one system
//! call per message). Message ids need uniqueness, not secrecy, so each thread keeps a small
//! wyrand generator seeded once from the standard library's randomly keyed hasher; an id then
//! costs a few multiplications. The version and variant bits are set as RFC 9562 requires.
//!
//! [`check_id`] is the length check every send makes of an id, minted here or not.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use crate::constant::MAX_ID_BYTES;
use crate::error::CoreError;

thread_local! {
    /// The generator's state; 0 until this thread's first id seeds it (a constant initial
    /// value, so reading it needs no lazy-initialisation check).
    static STATE: Cell<u64> = const { Cell::new(0) };
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
    let mut s = state.get();
    if s == 0 {
        s = seed();
    }
    // wyrand: one add, one 128-bit multiply, one xor.
    let s = s.wrapping_add(0xa076_1d64_78bd_642f);
    state.set(s);
    let t = u128::from(s) * u128::from(s ^ 0xe703_7ed1_a0b4_28db);
    ((t >> 64) as u64) ^ (t as u64)
}

/// A fast, non-cryptographic random number (for jitter and ids).
pub(crate) fn random_u64() -> u64 {
    STATE.with(next_u64)
}

/// A new random (version 4) UUID in its hyphenated text form (36 characters), the id
/// [`EMessage::new`](crate::EMessage::new) gives every message.
///
/// Unique without coordination: 122 of its 128 bits come from this thread's generator, whose
/// 64-bit state was seeded once from the standard library's randomly keyed hasher (keys drawn
/// from the operating system's randomness per thread and process), so two threads, two
/// processes, or a process and its restart, start at unrelated points of the sequence. Within
/// one thread the generator does not repeat a 64-bit output before 2⁶⁴ calls.
pub fn new_message_id() -> String {
    let (hi, lo) = STATE.with(|s| (next_u64(s), next_u64(s)));
    // RFC 9562: the version (4) is the high nibble of byte 6, the variant (0b10) the top two
    // bits of byte 8, bytes counted from the left of the text.
    let hi = (hi & !0xF000) | 0x4000;
    let lo = (lo & !(0xC0 << 56)) | (0x80 << 56);
    // Filed as minted and not sent: its first send skips the dedup window's lookup.
    crate::message::minted::minted(hi, lo);
    let bytes = (u128::from(hi) << 64 | u128::from(lo)).to_be_bytes();
    // Two digits per byte from one table look-up, into a buffer already holding the dashes.
    let mut text = [b'-'; 36];
    for (byte, at) in bytes.into_iter().zip(DIGIT_AT) {
        let [a, b] = HEX_PAIRS[usize::from(byte)];
        text[at] = a;
        text[at + 1] = b;
    }
    // Hex digits and dashes only: always UTF-8.
    String::from_utf8(text.to_vec()).unwrap_or_default()
}

/// Where each byte's two hex digits go in the 8-4-4-4-12 text (the dashes stay between).
const DIGIT_AT: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];

/// Each byte's two lower-case hex digits.
const HEX_PAIRS: [[u8; 2]; 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut pairs = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        pairs[i] = [HEX[i >> 4], HEX[i & 0xF]];
        i += 1;
    }
    pairs
};

/// Longest id the inline form holds; longer application ids go to the heap.
const INLINE: usize = 47;

/// A message id as `send` returns it: the text of [`EMessage::id`](crate::EMessage::id),
/// kept inline (no allocation) for ids of up to 47 bytes, which every generated UUID is.
///
/// It reads as a `&str` (it derefs to one), compares with `str` and `String`, and prints as
/// the id itself.
///
/// ```
/// use event_base_core::{EMessage, MessageId};
/// let msg = EMessage::standard("orders", b"x".to_vec());
/// let id = MessageId::from(msg.id.as_str());
/// assert_eq!(id, msg.id);
/// assert_eq!(id.len(), 36);
/// let text: String = id.into();
/// assert_eq!(text, msg.id);
/// ```
///
/// Equality, order and hash are those of the text, so a `HashMap<MessageId, _>` is looked up
/// with a `&str`.
#[derive(Clone)]
pub struct MessageId(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<str>),
}

impl MessageId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline { len, bytes } => {
                // Only ever filled from a `&str` cut at its full length, so always UTF-8.
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Repr::Heap(s) => s,
        }
    }
}

impl PartialEq for MessageId {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for MessageId {}

impl PartialOrd for MessageId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MessageId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for MessageId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As `str` hashes: `Borrow<str>` promises it.
        self.as_str().hash(state);
    }
}

impl From<&str> for MessageId {
    fn from(id: &str) -> Self {
        match u8::try_from(id.len()) {
            Ok(len) if id.len() <= INLINE => {
                let mut bytes = [0u8; INLINE];
                bytes[..id.len()].copy_from_slice(id.as_bytes());
                MessageId(Repr::Inline { len, bytes })
            }
            _ => MessageId(Repr::Heap(id.into())),
        }
    }
}

impl From<&String> for MessageId {
    fn from(id: &String) -> Self {
        MessageId::from(id.as_str())
    }
}

impl From<MessageId> for String {
    fn from(id: MessageId) -> Self {
        id.as_str().to_owned()
    }
}

impl std::ops::Deref for MessageId {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for MessageId {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::borrow::Borrow<str> for MessageId {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq<str> for MessageId {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for MessageId {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for MessageId {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<MessageId> for String {
    fn eq(&self, other: &MessageId) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<MessageId> for str {
    fn eq(&self, other: &MessageId) -> bool {
        self == other.as_str()
    }
}

impl serde::Serialize for MessageId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for MessageId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(MessageId::from(&*text))
    }
}

/// Refuses an empty id, or one longer than [`MAX_ID_BYTES`].
#[inline]
pub(crate) fn check_id(id: &str) -> Result<(), CoreError> {
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        let mut cut = id.len().min(MAX_ID_BYTES);
        while !id.is_char_boundary(cut) {
            cut -= 1;
        }
        return Err(CoreError::InvalidId {
            id: id[..cut].to_owned(),
            len: id.len(),
            max: MAX_ID_BYTES,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use uuid::Uuid;

    #[test]
    fn ids_are_hyphenated_v4_text_and_distinct() {
        let ids: HashSet<String> = (0..10_000).map(|_| new_message_id()).collect();
        assert_eq!(ids.len(), 10_000);
        for id in &ids {
            assert_eq!(id.len(), 36);
            let parsed = Uuid::parse_str(id).expect("a UUID");
            assert_eq!(parsed.get_version_num(), 4);
            assert_eq!(
                parsed.hyphenated().to_string(),
                *id,
                "lower-case hyphenated"
            );
        }
    }

    #[test]
    fn a_new_id_is_filed_as_minted_once_a_bus_deduplicates() {
        crate::message::minted::watch();
        // Another test's id minted meanwhile may take the slot: one of a few is claimed.
        let claimed = (0..8)
            .map(|_| new_message_id())
            .any(|id| crate::message::minted::claim(&id));
        assert!(claimed);
    }

    #[test]
    fn message_ids_keep_short_ids_inline_and_long_ones_whole() {
        let uuid = new_message_id();
        let id = MessageId::from(uuid.as_str());
        assert!(matches!(id.0, Repr::Inline { .. }));
        assert_eq!(id, uuid);
        let long = "x".repeat(300);
        let id = MessageId::from(long.as_str());
        assert!(matches!(id.0, Repr::Heap(_)));
        assert_eq!(id.as_str(), long);
        let edge = "é".repeat(23); // 46 bytes of two-byte characters
        assert_eq!(MessageId::from(edge.as_str()).as_str(), edge);
        assert_eq!(MessageId::from("").as_str(), "");
        let json = serde_json::to_string(&MessageId::from("order-42")).unwrap();
        assert_eq!(json, "\"order-42\"");
        let back: MessageId = serde_json::from_str(&json).unwrap();
        assert_eq!(back, "order-42");
        let mut by_id = std::collections::HashMap::new();
        by_id.insert(MessageId::from(uuid.as_str()), 1);
        by_id.insert(MessageId::from(long.as_str()), 2);
        assert_eq!(by_id.get(uuid.as_str()), Some(&1), "looked up by &str");
        assert_eq!(by_id.get(long.as_str()), Some(&2));
    }
}
