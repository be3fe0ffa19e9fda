//! Message ids as the WALs hash and log them: [`hash_id`], the one hash of an id both WALs
//! use, and [`RecordId`] (feature `persistent`), an id as a record carries it without a copy
//! of its text.
//!
//! Where the WAL holds the message, a `RecordId` is the message's own id (`Arc<EMessage>`,
//! one atomic increment to share); only ids read back from disk without their message own
//! their text. Hashing and comparing go by the text, so a map keyed by `RecordId` is looked
//! up with a plain `&str`.

#[cfg(feature = "persistent")]
use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
#[cfg(feature = "persistent")]
use std::sync::Arc;

#[cfg(feature = "persistent")]
use event_base_core::EMessage;

/// A message id, shared with its message where the WAL has it.
#[cfg(feature = "persistent")]
#[derive(Clone)]
pub(crate) enum RecordId {
    /// The id of this message.
    Message(Arc<EMessage>),
    /// An id on its own (a state record read back from disk).
    Text(Box<str>),
}

#[cfg(feature = "persistent")]
impl RecordId {
    pub(crate) fn as_str(&self) -> &str {
        match self {
            RecordId::Message(m) => &m.id,
            RecordId::Text(t) => t,
        }
    }
}

#[cfg(feature = "persistent")]
impl Borrow<str> for RecordId {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

#[cfg(feature = "persistent")]
impl Hash for RecordId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Exactly as `str` hashes, so that `&str` lookups find it.
        self.as_str().hash(state);
    }
}

#[cfg(feature = "persistent")]
impl PartialEq for RecordId {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

#[cfg(feature = "persistent")]
impl Eq for RecordId {}

#[cfg(feature = "persistent")]
impl std::fmt::Debug for RecordId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// The hasher of ids: message ids are random UUIDs (or application ids), never chosen by an
/// attacker to collide within one process's table, so SipHash's cost buys nothing here. Eight
/// bytes at a time, folded with a rotate and a xor, then one multiply.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.0 = self.0.rotate_left(29) ^ u64::from_le_bytes(word);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            // The tail's length too, so that "abc" and "abc\0" fold to different words.
            let len = (rest.len() as u64) << 59;
            self.0 = self.0.rotate_left(29) ^ u64::from_le_bytes(word) ^ len;
        }
    }

    fn write_u8(&mut self, v: u8) {
        self.0 = self.0.rotate_left(29) ^ u64::from(v);
    }
}

/// The hash [`IdHasher`] gives `id` (as a map keyed by [`RecordId`] computes it).
pub(crate) fn hash_id(id: &str) -> u64 {
    let mut h = IdHasher::default();
    id.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "persistent")]
    #[test]
    fn a_map_keyed_by_record_ids_is_looked_up_by_str() {
        use std::collections::HashMap;
        use std::hash::BuildHasherDefault;
        let msg = Arc::new(EMessage::standard("t", b"x".to_vec()));
        let mut map: HashMap<RecordId, u32, BuildHasherDefault<IdHasher>> = HashMap::default();
        map.insert(RecordId::Message(msg.clone()), 1);
        map.insert(RecordId::Text("order-42".into()), 2);
        assert_eq!(map.get(msg.id.as_str()), Some(&1));
        assert_eq!(map.get("order-42"), Some(&2));
        assert_eq!(map.get("order-43"), None);
        assert_eq!(
            RecordId::Text(msg.id.clone().into()),
            RecordId::Message(msg.clone())
        );
    }

    #[test]
    fn ids_that_differ_anywhere_hash_apart() {
        let a = hash_id("order-42-created");
        assert_ne!(a, hash_id("order-42-createe"));
        assert_ne!(a, hash_id("order-42-created!"));
        assert_ne!(hash_id("abc"), hash_id("abc\0"));
    }
}
