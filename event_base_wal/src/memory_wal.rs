//! [`MemoryWal`]: the in-memory write-ahead log.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use async_trait::async_trait;
use event_base_core::backend::{
    StoredSchedule, Wal, WalCommit, WalRecord, WalRecordState, WalStats,
};
use event_base_core::{DeadLetterMessage, DeadReason, EMessage, WalError};

use hashbrown::hash_table::{Entry, HashTable};

use crate::record_id::hash_id;
use crate::schedule_store::ScheduleStore;

/// Number of independently locked shards; a power of two.
const SHARDS: usize = 32;

/// One shard: its records, found by the hash of their id, and its share of the counters.
///
/// The counters live under the shard's lock, which every change takes anyway, rather than in
/// atomics of the whole WAL: those were written by the sender and by every worker, and the
/// cache line they shared moved between the cores on every message.
#[derive(Debug, Default)]
struct Shard {
    table: HashTable<Record>,
    appended: u64,
    completed: u64,
    /// Records of the table that are dead letters (the rest are live).
    dead: u64,
}

impl Shard {
    /// Counts `slot` going out of the table (replaced or removed).
    fn forget(&mut self, slot: &Slot) {
        if slot.state == WalRecordState::Failed {
            self.dead -= 1;
        }
    }
}

/// One record: the message (its id is the key), the hash of that id, and its state.
#[derive(Debug)]
struct Record {
    message: Arc<EMessage>,
    hash: u64,
    slot: Slot,
}

/// What the WAL knows of a record besides its message. Kept small because the hot path
/// touches it three times.
#[derive(Debug)]
struct Slot {
    state: WalRecordState,
    /// `None` until the record is rewritten: reading the clock on every append costs more
    /// than the rest of the append, and the message's `created_at` says the same.
    updated_at: Option<SystemTime>,
    dead: Option<Box<DeadInfo>>,
}

#[derive(Debug)]
struct DeadInfo {
    reason: DeadReason,
    died_at: SystemTime,
    handlers: Vec<String>,
}

impl Slot {
    fn live(updated_at: Option<SystemTime>) -> Slot {
        Slot {
            state: WalRecordState::Pending,
            updated_at,
            dead: None,
        }
    }

    fn failed(reason: DeadReason, at: SystemTime, handlers: Vec<String>) -> Slot {
        Slot {
            state: WalRecordState::Failed,
            updated_at: Some(at),
            dead: Some(Box::new(DeadInfo {
                reason,
                died_at: at,
                handlers,
            })),
        }
    }
}

impl Record {
    fn updated_at(&self) -> SystemTime {
        match (&self.slot.dead, self.slot.updated_at) {
            (Some(d), _) => d.died_at,
            (None, Some(t)) => t,
            (None, None) => self.message.metadata.created_at,
        }
    }

    fn dead_letter(&self) -> DeadLetterMessage {
        DeadLetterMessage {
            message: (*self.message).clone(),
            reason: self
                .slot
                .dead
                .as_ref()
                .map_or(DeadReason::Explicit, |d| d.reason.clone()),
            attempts: self.message.attempts,
            died_at: self.updated_at(),
            handlers: self
                .slot
                .dead
                .as_ref()
                .map_or_else(Vec::new, |d| d.handlers.clone()),
        }
    }

    fn to_wal_record(&self) -> WalRecord {
        WalRecord {
            message: self.message.clone(),
            state: self.slot.state,
            updated_at: self.updated_at(),
            dead_reason: self.slot.dead.as_ref().map(|d| d.reason.clone()),
            dead_handlers: self
                .slot
                .dead
                .as_ref()
                .map_or_else(Vec::new, |d| d.handlers.clone()),
        }
    }
}

/// Whether `record` is the one of `id`. The id passed in is usually the record's own string
/// (the worker holds the same `Arc<EMessage>`), so the pointers are compared first.
#[inline]
fn is(id: &str) -> impl Fn(&Record) -> bool + '_ {
    move |r| {
        let own = r.message.id.as_str();
        (own.as_ptr() == id.as_ptr() && own.len() == id.len()) || own == id
    }
}

/// The hash a record keeps, for the table to grow by.
fn rehash(r: &Record) -> u64 {
    r.hash
}

/// An in-memory [`Wal`].
///
/// Fast (one short, sharded lock per state change, no copy of the message) and bounded:
/// completed records are removed at once. Clone an `Arc<MemoryWal>` into a second system to
/// have it replay what the first left unfinished.
///
/// ```
/// use event_base_wal::MemoryWal;
/// use event_base_core::backend::Wal;
/// use event_base_core::EMessage;
/// use std::sync::Arc;
///
/// let wal = MemoryWal::new();
/// let msg = Arc::new(EMessage::standard("orders", b"x".to_vec()));
/// let _commit = wal.append(&msg).unwrap();
/// assert_eq!(wal.stats().live, 1);
/// wal.complete(&msg.id).unwrap();
/// assert_eq!(wal.stats().live, 0);
/// ```
#[derive(Debug)]
pub struct MemoryWal {
    shards: Box<[Mutex<Shard>]>,
    /// Its recurring schedules (`Wal::put_schedule`); a `PersistentWal` keeps its own.
    schedules: ScheduleStore,
}

impl Default for MemoryWal {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryWal {
    /// An empty WAL.
    pub fn new() -> Self {
        MemoryWal {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            schedules: ScheduleStore::default(),
        }
    }

    /// The shard of an id with that hash, locked.
    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard> {
        // Bits the table itself does not use (it takes the low bits for the bucket and the
        // top seven for its control bytes).
        let idx = (hash >> 32) as usize & (SHARDS - 1);
        // A poisoned shard only means a panic elsewhere while holding it; the table itself
        // is still consistent (every update is a single insert/remove/assignment).
        match self.shards[idx].lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn all(&self) -> impl Iterator<Item = MutexGuard<'_, Shard>> {
        self.shards.iter().map(|s| match s.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        })
    }

    /// Puts a new live record in under `message`'s id unless there is a record with that id
    /// already (live or dead); whether it did.
    pub(crate) fn put_new(&self, message: &Arc<EMessage>) -> bool {
        let hash = hash_id(&message.id);
        let mut shard = self.shard(hash);
        match shard.table.entry(hash, is(&message.id), rehash) {
            Entry::Occupied(_) => false,
            Entry::Vacant(v) => {
                v.insert(Record {
                    message: message.clone(),
                    hash,
                    slot: Slot::live(None),
                });
                shard.appended += 1;
                true
            }
        }
    }

    /// Puts `slot` in under `message`'s id, replacing (and un-counting) what was there; the
    /// record's message becomes `message`. `appended`: count it as a new append.
    fn put(&self, message: &Arc<EMessage>, slot: Slot, appended: bool) -> Option<Slot> {
        let hash = hash_id(&message.id);
        let dead = slot.state == WalRecordState::Failed;
        let record = Record {
            message: message.clone(),
            hash,
            slot,
        };
        let mut shard = self.shard(hash);
        let old = match shard.table.entry(hash, is(&message.id), rehash) {
            Entry::Occupied(mut e) => Some(std::mem::replace(e.get_mut(), record).slot),
            Entry::Vacant(v) => {
                v.insert(record);
                None
            }
        };
        if let Some(old) = &old {
            shard.forget(old);
        }
        shard.dead += u64::from(dead);
        shard.appended += u64::from(appended);
        drop(shard);
        old
    }

    /// Takes the record of `id` out if `keep` says so of its state.
    fn take_if(&self, id: &str, take: impl Fn(WalRecordState) -> bool) -> Option<Record> {
        let hash = hash_id(id);
        let mut shard = self.shard(hash);
        let entry = shard.table.find_entry(hash, is(id)).ok()?;
        if !take(entry.get().slot.state) {
            return None;
        }
        let (record, _) = entry.remove();
        shard.forget(&record.slot);
        drop(shard);
        Some(record)
    }

    /// The record of one message, if the WAL holds it (live or dead).
    pub fn record(&self, id: &str) -> Option<WalRecord> {
        let hash = hash_id(id);
        self.shard(hash)
            .table
            .find(hash, is(id))
            .map(Record::to_wal_record)
    }

    /// Puts a record back as it was (used by recovery of a persistent log). `Complete`
    /// records are dropped, as the WAL would have dropped them.
    pub fn restore(&self, record: WalRecord) {
        if record.state == WalRecordState::Complete {
            self.forget_record(&record.message.id);
            return;
        }
        let state = record.state;
        let slot = Slot {
            state,
            updated_at: Some(record.updated_at),
            dead: (state == WalRecordState::Failed).then(|| {
                Box::new(DeadInfo {
                    reason: record.dead_reason.unwrap_or(DeadReason::Explicit),
                    died_at: record.updated_at,
                    handlers: record.dead_handlers,
                })
            }),
        };
        self.put(&record.message, slot, false);
    }

    /// Completes a live record; `false` if there was none (already complete, or a dead letter,
    /// which completion must not erase).
    pub fn complete_live(&self, id: &str) -> bool {
        self.complete_live_record(id).is_some()
    }

    /// [`complete_live`](Self::complete_live), handing back the completed record's message.
    pub(crate) fn complete_live_record(&self, id: &str) -> Option<Arc<EMessage>> {
        let hash = hash_id(id);
        let mut shard = self.shard(hash);
        let entry = shard.table.find_entry(hash, is(id)).ok()?;
        if entry.get().slot.state == WalRecordState::Failed {
            return None;
        }
        let (record, _) = entry.remove();
        shard.completed += 1;
        drop(shard);
        Some(record.message)
    }

    /// Removes a record whatever its state (used by recovery of a persistent log).
    pub fn forget_record(&self, id: &str) {
        self.take_if(id, |_| true);
    }

    /// [`Wal::begin`], handing back the record's message when the answer is `true`.
    #[cfg_attr(not(feature = "persistent"), allow(dead_code))]
    pub(crate) fn begin_record(&self, id: &str) -> Option<Arc<EMessage>> {
        let hash = hash_id(id);
        let mut shard = self.shard(hash);
        let record = shard.table.find_mut(hash, is(id))?;
        match record.slot.state {
            WalRecordState::Complete => None,
            WalRecordState::Failed => Some(record.message.clone()),
            WalRecordState::Pending | WalRecordState::Processing => {
                record.slot.state = WalRecordState::Processing;
                Some(record.message.clone())
            }
        }
    }

    /// [`Wal::cancel`], handing back the withdrawn record's message.
    pub(crate) fn cancel_record(&self, id: &str) -> Option<Arc<EMessage>> {
        self.take_if(id, |s| s == WalRecordState::Pending)
            .map(|r| r.message)
    }

    fn is_live(state: WalRecordState) -> bool {
        matches!(state, WalRecordState::Pending | WalRecordState::Processing)
    }

    /// Every record whose state passes `keep`, as `f` makes it.
    fn collect<T>(
        &self,
        keep: impl Fn(WalRecordState) -> bool,
        f: impl Fn(&Record) -> T,
    ) -> Vec<T> {
        let mut out = Vec::new();
        for shard in self.all() {
            out.extend(shard.table.iter().filter(|r| keep(r.slot.state)).map(&f));
        }
        out
    }
}

#[async_trait]
impl Wal for MemoryWal {
    async fn put_schedule(&self, name: &str, definition: &[u8]) -> Result<(), WalError> {
        self.schedules.put(name, definition)
    }

    async fn remove_schedule(&self, name: &str) -> Result<bool, WalError> {
        self.schedules.remove(name)
    }

    async fn stored_schedules(&self) -> Result<Vec<StoredSchedule>, WalError> {
        Ok(self.schedules.list())
    }

    async fn claim_slot(&self, name: &str, slot: u64) -> Result<bool, WalError> {
        self.schedules.claim(name, slot)
    }

    fn append(&self, message: &Arc<EMessage>) -> Result<WalCommit, WalError> {
        self.put(message, Slot::live(None), true);
        Ok(WalCommit::durable())
    }

    fn append_unique(&self, message: &Arc<EMessage>) -> Result<Option<WalCommit>, WalError> {
        Ok(self.put_new(message).then(WalCommit::durable))
    }

    fn begin(&self, id: &str) -> Result<bool, WalError> {
        let hash = hash_id(id);
        let mut shard = self.shard(hash);
        Ok(match shard.table.find_mut(hash, is(id)) {
            None => false,
            Some(record) => {
                if Self::is_live(record.slot.state) {
                    record.slot.state = WalRecordState::Processing;
                }
                record.slot.state != WalRecordState::Complete
            }
        })
    }

    fn complete(&self, id: &str) -> Result<(), WalError> {
        self.complete_live(id);
        Ok(())
    }

    fn retry(&self, message: &Arc<EMessage>) -> Result<(), WalError> {
        // The record's message becomes the new one (its attempts and deliver_at changed).
        self.put(message, Slot::live(Some(SystemTime::now())), false);
        Ok(())
    }

    fn fail(
        &self,
        message: &Arc<EMessage>,
        reason: &DeadReason,
        handlers: &[String],
    ) -> Result<(), WalError> {
        self.put(
            message,
            Slot::failed(reason.clone(), SystemTime::now(), handlers.to_vec()),
            false,
        );
        Ok(())
    }

    fn cancel(&self, id: &str) -> Result<Option<WalCommit>, WalError> {
        Ok(self.cancel_record(id).map(|_| WalCommit::durable()))
    }

    async fn pending(&self) -> Result<Vec<WalRecord>, WalError> {
        Ok(self.collect(Self::is_live, |r| WalRecord {
            dead_reason: None,
            dead_handlers: Vec::new(),
            ..r.to_wal_record()
        }))
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetterMessage>, WalError> {
        let mut out = self.collect(|s| s == WalRecordState::Failed, Record::dead_letter);
        out.sort_by_key(|d| d.died_at);
        Ok(out)
    }

    async fn take_dead_letter(&self, id: &str) -> Result<Option<DeadLetterMessage>, WalError> {
        Ok(self
            .take_if(id, |s| s == WalRecordState::Failed)
            .map(|r| r.dead_letter()))
    }

    async fn purge_dead_letters(&self) -> Result<usize, WalError> {
        let mut n = 0;
        for mut shard in self.all() {
            let before = shard.table.len();
            shard
                .table
                .retain(|r| r.slot.state != WalRecordState::Failed);
            let purged = before - shard.table.len();
            shard.dead -= purged as u64;
            n += purged;
        }
        Ok(n)
    }

    async fn flush(&self) -> Result<(), WalError> {
        Ok(())
    }

    fn stats(&self) -> WalStats {
        let mut stats = WalStats::default();
        for shard in self.all() {
            stats.appended += shard.appended;
            stats.completed += shard.completed;
            stats.dead += shard.dead;
            stats.live += shard.table.len() as u64 - shard.dead;
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg() -> Arc<EMessage> {
        Arc::new(EMessage::standard("t", b"x".to_vec()))
    }

    #[test]
    fn cancel_only_withdraws_pending_records() {
        let wal = MemoryWal::new();
        let a = msg();
        let _ = wal.append(&a).unwrap();
        assert!(wal.cancel(&a.id).unwrap().is_some());
        assert!(
            !wal.begin(&a.id).unwrap(),
            "a withdrawn record must not be delivered"
        );

        let b = msg();
        let _ = wal.append(&b).unwrap();
        assert!(wal.begin(&b.id).unwrap());
        assert!(
            wal.cancel(&b.id).unwrap().is_none(),
            "a record a handler holds cannot be withdrawn"
        );
    }

    #[tokio::test]
    async fn failed_records_are_dead_letters_until_purged() {
        let wal = MemoryWal::new();
        let a = msg();
        let _ = wal.append(&a).unwrap();
        wal.begin(&a.id).unwrap();
        wal.fail(&a, &DeadReason::Explicit, &[]).unwrap();
        wal.complete(&a.id).unwrap(); // must not erase the dead letter
        let dead = wal.dead_letters().await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].reason, DeadReason::Explicit);
        assert!(wal.pending().await.unwrap().is_empty());
        assert_eq!(wal.purge_dead_letters().await.unwrap(), 1);
        assert_eq!(wal.stats().dead, 0);
    }

    #[tokio::test]
    async fn pending_and_processing_are_replayed() {
        let wal = MemoryWal::new();
        let (a, b, c) = (msg(), msg(), msg());
        for m in [&a, &b, &c] {
            let _ = wal.append(m).unwrap();
        }
        wal.begin(&b.id).unwrap();
        wal.begin(&c.id).unwrap();
        wal.complete(&c.id).unwrap();
        let mut ids: Vec<String> = wal
            .pending()
            .await
            .unwrap()
            .iter()
            .map(|r| r.message.id.clone())
            .collect();
        ids.sort();
        let mut want = vec![a.id.clone(), b.id.clone()];
        want.sort();
        assert_eq!(ids, want);
        assert_eq!(wal.stats().live, 2);
    }
}
