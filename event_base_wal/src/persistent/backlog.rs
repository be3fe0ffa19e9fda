//! The backlog: the `Pending` and `Processing` records recovery found, kept as where their
//! message lies in the segments rather than as messages, and read back when they are
//! replayed.
//!
//! A reopened log can hold more pending messages than memory. Recovery therefore records,
//! per pending message, only a [`Slot`] (32 bytes: segment, offset and length of the frame
//! holding the message, its state, where its id text lies) plus the id's bytes in one arena
//! and an entry of the id-hash map (about 20 bytes): some 90 bytes for a UUID id, whatever
//! the payload. The messages are decoded again only when a replay window takes them
//! ([`read_back`]); they then move into the in-memory index (`MemoryWal`) like any message
//! sent since, and leave the backlog for good. Dead letters are not kept here: recovery
//! decodes them and they stay in memory as before.
//!
//! Windows come out in the order the messages were created, as the replay always sent them:
//! the order of the slots (of the log) unless compaction wrote older messages again after
//! younger ones, in which case recovery sorts an index of the slots by creation time. A removed slot stays in place, marked dead, until the backlog is empty
//! (it only shrinks once the WAL is open: new messages go to the in-memory index), then
//! everything is freed.
//!
//! A frame read back is checked as recovery checks it (length, CRC, body) and must hold the
//! slot's id; a damaged one is reported as [`Damaged`] for the WAL to decide (an error, or
//! skipped with `skip_corrupt(true)`).

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use event_base_core::backend::WalRecordState;
use event_base_core::{EMessage, WalError};

use super::fs::WalFs;
use super::record_codec::{read_frame, Entry, Frame};
use super::segment::{io_err, path_of};
use crate::record_id::{hash_id, IdHasher};

/// Slots [`Backlog::push`] gathers before filing them in the id map at once.
const INDEX_BATCH: usize = 1 << 16;

/// Most bytes of a segment read in one go when consecutive slots are read back together.
const MAX_RUN_BYTES: u64 = 4 << 20;

/// Where a message's newest full record lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Loc {
    /// The segment.
    pub(crate) seq: u64,
    /// The frame's offset in it.
    pub(crate) offset: u64,
    /// The frame's length (header included).
    pub(crate) len: u32,
    /// 0: the frame's message; `n`: the `n`-th message of a `CompleteWith` frame.
    pub(crate) sub: u16,
}

impl Loc {
    /// The message of the whole frame at `offset` of segment `seq`, `len` bytes long.
    pub(crate) fn frame(seq: u64, offset: u64, len: usize) -> Loc {
        Loc {
            seq,
            offset,
            // Frames are at most the WAL's record limit, a `u32`.
            len: len as u32,
            sub: 0,
        }
    }
}

/// One pending message of the backlog.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub(crate) loc: Loc,
    id_at: u64,
    id_len: u8,
    /// 0: removed; 1: `Pending`; 2: `Processing`.
    state: u8,
}

impl Slot {
    pub(crate) fn state(&self) -> WalRecordState {
        if self.state == 2 {
            WalRecordState::Processing
        } else {
            WalRecordState::Pending
        }
    }
}

fn state_code(state: WalRecordState) -> u8 {
    if state == WalRecordState::Processing {
        2
    } else {
        1
    }
}

/// The hasher of the id-hash map: its keys are already (the top half of) [`hash_id`]s.
#[derive(Default)]
struct Passthrough(u64);

impl Hasher for Passthrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = Passthrough::spread(v);
    }
}

impl Passthrough {
    /// A key spread over all 64 bits: the table takes its control byte from the top ones.
    fn spread(v: u32) -> u64 {
        u64::from(v).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
}

/// The id text of `slot` in the arena `ids`.
fn id_in<'a>(ids: &'a [u8], slot: &Slot) -> &'a str {
    let from = slot.id_at as usize;
    let bytes = &ids[from..from + usize::from(slot.id_len)];
    // Only ever filled from `&str`s, cut at their ends.
    std::str::from_utf8(bytes).unwrap_or_default()
}

/// The key of `id` in the id-hash map.
fn key(id: &str) -> u32 {
    (hash_id(id) >> 32) as u32
}

/// The pending messages of a reopened log, as locations (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Backlog {
    slots: Vec<Slot>,
    /// The ids' text, one after the other.
    ids: Vec<u8>,
    /// Slot of each id, by the top half of its [`hash_id`] (8 bytes an entry, not 16).
    by_hash: HashMap<u32, u32, BuildHasherDefault<Passthrough>>,
    /// Slots of the (rare: about n²/2³³ of n) ids whose key another id in `by_hash` already
    /// has. With the ids' own hasher, not SipHash: SipHash showed in the profile of an
    /// open, when every new id was looked up here once the map held one.
    collided: HashMap<Box<str>, u32, BuildHasherDefault<IdHasher>>,
    /// The keys of the ids in `collided` (and perhaps of some removed since): a new id
    /// whose key is not here is not in `collided`, found without reading its text.
    collided_keys: HashSet<u32, BuildHasherDefault<Passthrough>>,
    live: usize,
    /// Slots from this one on were added by [`Backlog::push`] and are not in `by_hash`
    /// yet: recovery files them in batches, in the order of their place in the table.
    indexed: usize,
    /// The keys of those slots (computed while their ids were in the cache).
    pushed_keys: Vec<u32>,
    /// While recovery fills it: each slot's `created_at` (ns), to put them in that order.
    created: Vec<u64>,
    /// The replay's order, when it differs from the slots' (compaction rewrote older
    /// messages after younger ones): slot indices by `created_at`.
    order: Option<Vec<u32>>,
}

impl Backlog {
    /// How many messages it holds.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    fn id_of(&self, slot: &Slot) -> &str {
        id_in(&self.ids, slot)
    }

    fn find(&self, id: &str) -> Option<u32> {
        debug_assert_eq!(
            self.indexed,
            self.slots.len(),
            "a lookup before `index_pushed`"
        );
        if let Some(&i) = self.by_hash.get(&key(id)) {
            if self.id_of(&self.slots[i as usize]) == id {
                return Some(i);
            }
        }
        if self.collided.is_empty() {
            None
        } else {
            self.collided.get(id).copied()
        }
    }

    /// Whether it holds `id`.
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.find(id).is_some()
    }

    /// Where `id`'s message lies, if the backlog holds it.
    pub(crate) fn get(&self, id: &str) -> Option<Slot> {
        self.find(id).map(|i| self.slots[i as usize])
    }

    /// Records `id` as pending at `loc` with `state`: a new slot at the end, or, if it is
    /// held already (a retry, a snapshot), the same slot with the new location, so that the
    /// message keeps its place in the order. `false` if the slots are full (2^32 of them):
    /// the caller then keeps the message in memory.
    ///
    /// The id is filed in the id map later, with a batch of others (see
    /// [`Backlog::index_pushed`]; any lookup does it first): the map is then written in the
    /// order of its buckets, not at random, which was most of what reopening a large
    /// backlog cost (a cache and a TLB miss or two per insert).
    pub(crate) fn push(&mut self, id: &str, loc: Loc, state: WalRecordState, created: u64) -> bool {
        let (Ok(_), Ok(id_len)) = (u32::try_from(self.slots.len()), u8::try_from(id.len())) else {
            return false;
        };
        self.slots.push(Slot {
            loc,
            id_at: self.ids.len() as u64,
            id_len,
            state: state_code(state),
        });
        self.ids.extend_from_slice(id.as_bytes());
        self.created.push(created);
        self.pushed_keys.push(key(id));
        self.live += 1;
        if self.slots.len() - self.indexed >= INDEX_BATCH {
            self.index_pushed();
        }
        true
    }

    /// Files the slots added by [`Backlog::push`] in the id map, sorted by where their key
    /// lands in the table. An id pushed again (a retry, a snapshot) keeps its first slot,
    /// which takes the newer record's location and state; the later slot is left dead.
    pub(crate) fn index_pushed(&mut self) {
        let (from, to) = (self.indexed, self.slots.len());
        if from == to {
            return;
        }
        self.by_hash.reserve(to - from);
        // The table's buckets as hashbrown sizes it (7/8 of them usable); only the order of
        // the inserts depends on it, not what they do.
        let buckets = (self.by_hash.capacity() / 7 * 8).next_power_of_two() as u64;
        let keys = std::mem::take(&mut self.pushed_keys);
        let mut order: Vec<u64> = keys
            .iter()
            .enumerate()
            .map(|(n, &k)| {
                let at = Passthrough::spread(k) & (buckets - 1);
                (at << 32) | n as u64
            })
            .collect();
        // Equal keys sort together, the earlier slot first.
        order.sort_unstable();
        for packed in order {
            let n = (packed & u64::from(u32::MAX)) as usize;
            // `from + n` fits: `push` refuses slots past `u32::MAX`.
            self.index_one((from + n) as u32, keys[n]);
        }
        self.pushed_keys = keys;
        self.pushed_keys.clear();
        self.indexed = to;
    }

    /// Files pushed slot `i` in the id map, or merges it into the slot already holding its id.
    fn index_one(&mut self, i: u32, key: u32) {
        let slot = self.slots[i as usize];
        let held = match self.by_hash.entry(key) {
            MapEntry::Occupied(e) => {
                let j = *e.get();
                let id = id_in(&self.ids, &slot);
                if id_in(&self.ids, &self.slots[j as usize]) == id {
                    Some(j)
                } else if let Some(&j) = self.collided.get(id) {
                    Some(j)
                } else {
                    self.collided.insert(id.into(), i);
                    self.collided_keys.insert(key);
                    None
                }
            }
            // The id's text is read only if an id with its key is in `collided`.
            MapEntry::Vacant(e) => match self.collided_keys.contains(&key) {
                true => match self.collided.get(id_in(&self.ids, &slot)) {
                    Some(&j) => Some(j),
                    None => {
                        e.insert(i);
                        None
                    }
                },
                false => {
                    e.insert(i);
                    None
                }
            },
        };
        if let Some(j) = held {
            let kept = &mut self.slots[j as usize];
            kept.loc = slot.loc;
            kept.state = slot.state;
            if let Some(&c) = self.created.get(i as usize) {
                if let Some(k) = self.created.get_mut(j as usize) {
                    *k = c;
                }
            }
            self.slots[i as usize].state = 0;
            self.live -= 1;
        }
    }

    /// Makes room for `more` new messages at once (recovery's estimate from the segments'
    /// sizes), so that the slots and the id map do not grow, copy and rehash step by step.
    pub(crate) fn reserve(&mut self, more: usize) {
        self.slots.reserve(more);
        self.created.reserve(more);
        self.by_hash.reserve(more);
    }

    /// Moves `id`'s slot to `loc` (its record was rewritten by compaction).
    pub(crate) fn relocate(&mut self, id: &str, loc: Loc) {
        self.index_pushed();
        if let Some(i) = self.find(id) {
            self.slots[i as usize].loc = loc;
        }
    }

    /// Sets the state of `id`, if held; whether it was.
    pub(crate) fn set_state(&mut self, id: &str, state: WalRecordState) -> bool {
        self.index_pushed();
        match self.find(id) {
            Some(i) => {
                self.slots[i as usize].state = state_code(state);
                true
            }
            None => false,
        }
    }

    /// Takes `id` out; its slot, if it was held.
    pub(crate) fn remove(&mut self, id: &str) -> Option<Slot> {
        self.index_pushed();
        let i = self.find(id)?;
        let hash = key(id);
        if self.by_hash.get(&hash) == Some(&i) {
            self.by_hash.remove(&hash);
        } else {
            self.collided.remove(id);
        }
        let slot = self.slots[i as usize];
        self.slots[i as usize].state = 0;
        self.live -= 1;
        if self.live == 0 {
            *self = Backlog::default();
        }
        Some(slot)
    }

    /// Ends recovery: puts the messages in the order they were created (the order of the
    /// log unless compaction moved some, so usually nothing to do), and gives back what the
    /// vectors reserved beyond their length.
    pub(crate) fn finish(&mut self) {
        self.index_pushed();
        let live = |i: &usize| self.slots[*i].state != 0;
        let mut last = 0;
        let sorted = (0..self.slots.len()).filter(live).all(|i| {
            let ok = self.created[i] >= last;
            last = self.created[i];
            ok
        });
        if !sorted {
            let mut order: Vec<u32> = (0..self.slots.len())
                .filter(live)
                .map(|i| i as u32)
                .collect();
            // Stable: messages created at the same time keep the order of the log.
            order.sort_by_key(|&i| self.created[i as usize]);
            self.order = Some(order);
        }
        self.created = Vec::new();
        if self.by_hash.len() < self.by_hash.capacity() / 2 {
            // Recovery reserved for more than came: a table of half the size holds them.
            self.by_hash.shrink_to_fit();
        }
        self.slots.shrink_to_fit();
        self.ids.shrink_to_fit();
        self.collided.shrink_to_fit();
        self.pushed_keys = Vec::new();
    }

    /// Up to `limit` messages held, from position `from` on (positions are those of the
    /// order of the log); with the position after the last one looked at, `None` if it is
    /// the end.
    pub(crate) fn window(&self, from: u64, limit: usize) -> (Vec<(String, Slot)>, Option<u64>) {
        let mut out = Vec::new();
        let mut at = usize::try_from(from).unwrap_or(usize::MAX);
        let end = self.order.as_ref().map_or(self.slots.len(), Vec::len);
        while at < end && out.len() < limit {
            let i = self.order.as_ref().map_or(at, |o| o[at] as usize);
            let slot = self.slots[i];
            if slot.state != 0 {
                out.push((self.id_of(&slot).to_owned(), slot));
            }
            at += 1;
        }
        // Only removed slots may follow: the next window is then empty and the last.
        (out, (at < end).then_some(at as u64))
    }

    /// Every message held whose record lies in segment `seq`.
    pub(crate) fn in_segment(&self, seq: u64) -> Vec<(String, Slot)> {
        self.slots
            .iter()
            .filter(|s| s.state != 0 && s.loc.seq == seq)
            .map(|s| (self.id_of(s).to_owned(), *s))
            .collect()
    }

    /// How many messages held lie in each segment.
    pub(crate) fn per_segment(&self) -> HashMap<u64, u64> {
        let mut out = HashMap::new();
        // Slots of one segment mostly follow each other: counted as runs, one map update
        // per run rather than per slot.
        let mut run: Option<(u64, u64)> = None;
        for s in self.slots.iter().filter(|s| s.state != 0) {
            match &mut run {
                Some((seq, n)) if *seq == s.loc.seq => *n += 1,
                _ => {
                    if let Some((seq, n)) = run.replace((s.loc.seq, 1)) {
                        *out.entry(seq).or_default() += n;
                    }
                }
            }
        }
        if let Some((seq, n)) = run {
            *out.entry(seq).or_default() += n;
        }
        out
    }
}

/// A record read back that is not what its slot says: damaged since it was written, or
/// overwritten. Its file and offset, and what is wrong.
#[derive(Debug, Clone)]
pub(crate) struct Damaged {
    pub(crate) file: std::path::PathBuf,
    pub(crate) offset: u64,
    pub(crate) reason: String,
}

impl Damaged {
    /// As the error the WAL answers when it does not skip damage.
    pub(crate) fn to_error(&self) -> WalError {
        WalError::Corrupt {
            file: self.file.clone(),
            offset: self.offset,
            reason: format!(
                "{} (found when reading the pending message back for delivery; the record \
                 stays in the log: reopen with skip_corrupt(true) to go on without it)",
                self.reason
            ),
        }
    }
}

/// A message read back, and when its record was last written.
pub(crate) type ReadBack = Result<(Arc<EMessage>, SystemTime), Damaged>;

/// Reads the messages of `slots` (ids with their slots) back from the segments of `dir`,
/// consecutive frames of one segment in one read. An I/O error is an `Err`; a frame that is
/// not the slot's message is a [`Damaged`] in its place.
pub(crate) fn read_back(
    fs: &dyn WalFs,
    dir: &Path,
    slots: &[(String, Slot)],
    max_body: usize,
) -> Result<Vec<ReadBack>, WalError> {
    let mut out = Vec::with_capacity(slots.len());
    let mut i = 0;
    while i < slots.len() {
        let first = slots[i].1.loc;
        let mut end = i + 1;
        let mut run_end = first.offset + u64::from(first.len);
        while let Some((_, next)) = slots.get(end) {
            let next_end = next.loc.offset + u64::from(next.loc.len);
            if next.loc.seq != first.seq
                || next.loc.offset < first.offset
                || next_end.max(run_end) - first.offset > MAX_RUN_BYTES
            {
                break;
            }
            run_end = run_end.max(next_end);
            end += 1;
        }
        let path = path_of(dir, first.seq);
        let len = usize::try_from(run_end - first.offset).unwrap_or(usize::MAX);
        let bytes = fs
            .read_at(&path, first.offset, len)
            .map_err(|e| io_err(&path, e))?;
        for (id, slot) in &slots[i..end] {
            let from = (slot.loc.offset - first.offset) as usize;
            out.push(
                decode_one(&bytes, from, id, slot, max_body).map_err(|reason| Damaged {
                    file: path.clone(),
                    offset: slot.loc.offset,
                    reason,
                }),
            );
        }
        i = end;
    }
    Ok(out)
}

fn decode_one(
    bytes: &[u8],
    from: usize,
    id: &str,
    slot: &Slot,
    max_body: usize,
) -> Result<(Arc<EMessage>, SystemTime), String> {
    let frame = bytes.get(from..).unwrap_or_default();
    let (entry, len) = match read_frame(frame, max_body) {
        Frame::Record(entry, len) => (entry, len),
        Frame::Torn => return Err("the record is cut short".into()),
        Frame::Corrupt(reason) => return Err(reason),
    };
    if len != slot.loc.len as usize {
        return Err(format!(
            "the record is {len} bytes, {} were written",
            slot.loc.len
        ));
    }
    let found = match (entry, slot.loc.sub) {
        (Entry::Append(m) | Entry::Retry(m), 0) => {
            let at = m.metadata.created_at;
            Some((m, at))
        }
        (Entry::Snapshot { message, at, .. }, 0) => Some((message, at)),
        (Entry::CompleteWith { messages, .. }, n) if n > 0 => {
            messages.into_iter().nth(usize::from(n) - 1).map(|m| {
                let at = m.metadata.created_at;
                (m, at)
            })
        }
        _ => None,
    };
    match found {
        Some((m, at)) if m.id == id => Ok((m, at)),
        Some((m, _)) => Err(format!("the record holds message {}, not {id}", m.id)),
        None => Err(format!("the record holds no message {id}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(offset: u64) -> Loc {
        Loc {
            seq: 1,
            offset,
            len: 10,
            sub: 0,
        }
    }

    #[test]
    fn slots_keep_the_log_order_and_windows_skip_removed_ones() {
        let mut b = Backlog::default();
        for i in 0..10u64 {
            assert!(b.push(&format!("m{i}"), loc(i * 10), WalRecordState::Pending, i));
        }
        // A retry moves the record, not the message's place.
        assert!(b.push("m0", loc(500), WalRecordState::Pending, 0));
        assert!(b.remove("m1").is_some());
        assert!(b.set_state("m2", WalRecordState::Processing));
        assert_eq!(b.len(), 9);
        let (w, next) = b.window(0, 3);
        let ids: Vec<&str> = w.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["m0", "m2", "m3"]);
        assert_eq!(w[0].1.loc.offset, 500);
        assert_eq!(w[1].1.state(), WalRecordState::Processing);
        let (w, next) = b.window(next.unwrap(), 100);
        assert_eq!(w.len(), 6);
        assert_eq!(next, None);
        for i in 0..10 {
            b.remove(&format!("m{i}"));
        }
        assert_eq!(b.len(), 0);
        assert!(b.slots.is_empty() && b.ids.is_empty());
    }

    #[test]
    fn windows_follow_the_creation_order_when_the_log_does_not() {
        let mut b = Backlog::default();
        for (i, created) in [(0u64, 30u64), (1, 10), (2, 20), (3, 10)] {
            assert!(b.push(
                &format!("m{i}"),
                loc(i * 10),
                WalRecordState::Pending,
                created
            ));
        }
        b.finish();
        let (w, _) = b.window(0, 10);
        let ids: Vec<&str> = w.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["m1", "m3", "m2", "m0"]);
    }

    #[test]
    fn ids_with_one_hash_are_told_apart() {
        let mut b = Backlog::default();
        assert!(b.push("a", loc(0), WalRecordState::Pending, 0));
        b.index_pushed();
        // Forge a collision: "b" filed under "a"'s hash.
        let index = b.slots.len() as u32;
        b.slots.push(Slot {
            loc: loc(10),
            id_at: b.ids.len() as u64,
            id_len: 1,
            state: 1,
        });
        b.ids.push(b'b');
        b.created.push(0);
        b.collided.insert("b".into(), index);
        b.collided_keys.insert(key("a"));
        b.indexed = b.slots.len();
        b.live += 1;
        assert_eq!(b.get("a").map(|s| s.loc.offset), Some(0));
        assert_eq!(b.get("b").map(|s| s.loc.offset), Some(10));
        assert!(b.remove("a").is_some());
        assert!(b.contains("b"));
        assert!(!b.contains("a"));
    }

    #[test]
    fn an_id_pushed_again_keeps_its_first_place_within_a_batch_and_across_batches() {
        let mut b = Backlog::default();
        // More than a batch: "m0" and "m5" come again in the next one, "m7" in its own.
        let n = INDEX_BATCH + 10;
        for i in 0..n {
            assert!(b.push(&format!("m{i}"), loc(i as u64), WalRecordState::Pending, 0));
        }
        for (id, at) in [("m0", 1_000_000u64), ("m5", 1_000_005), ("m7", 1_000_007)] {
            assert!(b.push(id, loc(at), WalRecordState::Processing, 0));
        }
        // Pushed twice in one batch: the later record wins, in the first one's place.
        assert!(b.push("m7", loc(2_000_007), WalRecordState::Pending, 0));
        b.finish();
        assert_eq!(b.len(), n);
        let (w, next) = b.window(0, 8);
        assert_eq!(next, Some(8));
        let got: Vec<(&str, u64, WalRecordState)> = w
            .iter()
            .map(|(id, s)| (id.as_str(), s.loc.offset, s.state()))
            .collect();
        assert_eq!(got[0], ("m0", 1_000_000, WalRecordState::Processing));
        assert_eq!(got[5], ("m5", 1_000_005, WalRecordState::Processing));
        assert_eq!(got[7], ("m7", 2_000_007, WalRecordState::Pending));
        assert_eq!(got[6], ("m6", 6, WalRecordState::Pending));
        assert_eq!(
            b.get(&format!("m{}", n - 1)).map(|s| s.loc.offset),
            Some(n as u64 - 1)
        );
        // The whole order: each id once.
        let (all, _) = b.window(0, usize::MAX);
        assert_eq!(all.len(), n);
        let ids: std::collections::HashSet<&str> = all.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids.len(), n);
    }

    #[test]
    fn a_pushed_id_whose_key_is_taken_is_found_in_the_collided_map() {
        let mut b = Backlog::default();
        assert!(b.push("a", loc(0), WalRecordState::Pending, 0));
        b.index_pushed();
        // Forge "b"'s key to be "a"'s, as a real collision would have it.
        assert!(b.push("b", loc(10), WalRecordState::Pending, 0));
        *b.pushed_keys.last_mut().unwrap() = key("a");
        b.index_pushed();
        assert_eq!(b.collided.get("b"), Some(&1));
        // "b" again: merged into its slot through the collided map.
        assert!(b.push("b", loc(20), WalRecordState::Pending, 0));
        *b.pushed_keys.last_mut().unwrap() = key("a");
        b.finish();
        assert_eq!(b.len(), 2);
        assert_eq!(b.get("b").map(|s| s.loc.offset), Some(20));
        assert!(b.remove("a").is_some());
        // "a"'s key is free again, "b" still only in the collided map: pushed once more,
        // it is still found there, not filed anew.
        assert!(b.push("b", loc(30), WalRecordState::Pending, 0));
        *b.pushed_keys.last_mut().unwrap() = key("a");
        b.index_pushed();
        assert_eq!(b.len(), 1);
        assert_eq!(b.get("b").map(|s| s.loc.offset), Some(30));
    }
}
