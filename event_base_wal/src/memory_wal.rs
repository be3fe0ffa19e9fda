//! [`MemoryWal`]: the in-memory write-ahead log.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use async_trait::async_trait;
use event_base_core::{
    DeadLetterMessage, DeadReason, EMessage, Wal, WalCommit, WalError, WalRecord, WalRecordState,
    WalStats,
};
use uuid::Uuid;

/// Number of independently locked shards; a power of two.
const SHARDS: usize = 32;

/// Message ids are random UUIDs, so one multiply of their folded halves spreads them well
/// over every bit the hash table uses; SipHash would cost several times more on the hot path.
/// (Which shard an id lives in is taken from other bits, see [`MemoryWal::shard`].)
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(29) ^ u64::from_le_bytes(word);
        }
    }

    fn write_u128(&mut self, v: u128) {
        self.0 = self.0.rotate_left(29) ^ (v as u64) ^ ((v >> 64) as u64).rotate_left(17);
    }
}

/// Keyed by the id as one `u128`: compared in two instructions instead of a `memcmp` call.
type IdMap = HashMap<u128, Slot, BuildHasherDefault<IdHasher>>;

#[inline]
fn key(id: &Uuid) -> u128 {
    id.as_u128()
}

/// One record. Kept small (40 bytes) because the hot path touches it three times.
#[derive(Debug)]
struct Slot {
    message: Arc<EMessage>,
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
}

impl Slot {
    fn live(message: Arc<EMessage>, updated_at: Option<SystemTime>) -> Slot {
        Slot {
            message,
            state: WalRecordState::Pending,
            updated_at,
            dead: None,
        }
    }

    fn updated_at(&self) -> SystemTime {
        match (&self.dead, self.updated_at) {
            (Some(d), _) => d.died_at,
            (None, Some(t)) => t,
            (None, None) => self.message.metadata.created_at,
        }
    }

    fn dead_letter(&self) -> DeadLetterMessage {
        DeadLetterMessage {
            message: (*self.message).clone(),
            reason: self
                .dead
                .as_ref()
                .map_or(DeadReason::Explicit, |d| d.reason.clone()),
            attempts: self.message.attempts,
            died_at: self.updated_at(),
        }
    }
}

/// An in-memory [`Wal`].
///
/// Fast (one short, sharded lock per state change, no copy of the message) and bounded:
/// completed records are removed at once. Clone an `Arc<MemoryWal>` into a second system to
/// have it replay what the first left unfinished.
///
/// ```
/// use event_base_wal::MemoryWal;
/// use event_base_core::{EMessage, Wal};
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
    shards: Box<[Mutex<IdMap>]>,
    appended: AtomicU64,
    completed: AtomicU64,
    live: AtomicU64,
    dead: AtomicU64,
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
            shards: (0..SHARDS).map(|_| Mutex::new(IdMap::default())).collect(),
            appended: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            live: AtomicU64::new(0),
            dead: AtomicU64::new(0),
        }
    }

    fn shard(&self, id: &Uuid) -> MutexGuard<'_, IdMap> {
        // Byte 0 of the id: random in a v4 UUID, and not among the bits the table hash keeps.
        let idx = usize::from(id.as_bytes()[0]) & (SHARDS - 1);
        // A poisoned shard only means a panic elsewhere while holding it; the map itself is
        // still consistent (every update is a single insert/remove/assignment).
        match self.shards[idx].lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn all(&self) -> impl Iterator<Item = MutexGuard<'_, IdMap>> {
        self.shards.iter().map(|s| match s.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        })
    }

    /// The record of one message, if the WAL holds it (live or dead).
    pub fn record(&self, id: &Uuid) -> Option<WalRecord> {
        self.shard(id).get(&key(id)).map(|s| WalRecord {
            message: s.message.clone(),
            state: s.state,
            updated_at: s.updated_at(),
            dead_reason: s.dead.as_ref().map(|d| d.reason.clone()),
        })
    }

    /// Puts a record back as it was (used by recovery of a persistent log). `Complete`
    /// records are dropped, as the WAL would have dropped them.
    pub fn restore(&self, record: WalRecord) {
        let id = record.message.id;
        if record.state == WalRecordState::Complete {
            if let Some(old) = self.shard(&id).remove(&key(&id)) {
                self.forget(&old);
            }
            return;
        }
        let state = record.state;
        let slot = Slot {
            message: record.message,
            state,
            updated_at: Some(record.updated_at),
            dead: (state == WalRecordState::Failed).then(|| {
                Box::new(DeadInfo {
                    reason: record.dead_reason.unwrap_or(DeadReason::Explicit),
                    died_at: record.updated_at,
                })
            }),
        };
        let old = self.shard(&id).insert(key(&id), slot);
        if let Some(old) = old {
            self.forget(&old);
        }
        if state == WalRecordState::Failed {
            self.dead.fetch_add(1, Ordering::Relaxed);
        } else {
            self.live.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Completes a live record; `false` if there was none (already complete, or a dead letter,
    /// which completion must not erase).
    pub fn complete_live(&self, id: &Uuid) -> bool {
        let mut shard = self.shard(id);
        if shard
            .get(&key(id))
            .is_some_and(|s| s.state != WalRecordState::Failed)
        {
            if let Some(old) = shard.remove(&key(id)) {
                drop(shard);
                self.forget(&old);
                self.completed.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// Removes a record whatever its state (used by recovery of a persistent log).
    pub fn forget_record(&self, id: &Uuid) {
        if let Some(old) = self.shard(id).remove(&key(id)) {
            self.forget(&old);
        }
    }

    fn is_live(state: WalRecordState) -> bool {
        matches!(state, WalRecordState::Pending | WalRecordState::Processing)
    }

    fn forget(&self, old: &Slot) {
        if Self::is_live(old.state) {
            self.live.fetch_sub(1, Ordering::Relaxed);
        } else if old.state == WalRecordState::Failed {
            self.dead.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[async_trait]
impl Wal for MemoryWal {
    fn append(&self, message: &Arc<EMessage>) -> Result<WalCommit, WalError> {
        let slot = Slot::live(message.clone(), None);
        let old = self.shard(&message.id).insert(key(&message.id), slot);
        if let Some(old) = old {
            self.forget(&old);
        }
        self.appended.fetch_add(1, Ordering::Relaxed);
        self.live.fetch_add(1, Ordering::Relaxed);
        Ok(WalCommit::Durable)
    }

    fn begin(&self, id: &Uuid) -> Result<bool, WalError> {
        let mut shard = self.shard(id);
        match shard.get_mut(&key(id)) {
            None => Ok(false),
            Some(slot) => {
                if Self::is_live(slot.state) {
                    slot.state = WalRecordState::Processing;
                }
                Ok(slot.state != WalRecordState::Complete)
            }
        }
    }

    fn complete(&self, id: &Uuid) -> Result<(), WalError> {
        self.complete_live(id);
        Ok(())
    }

    fn retry(&self, message: &Arc<EMessage>) -> Result<(), WalError> {
        let mut shard = self.shard(&message.id);
        match shard.get_mut(&key(&message.id)) {
            Some(slot) => {
                if slot.state == WalRecordState::Failed {
                    self.dead.fetch_sub(1, Ordering::Relaxed);
                    self.live.fetch_add(1, Ordering::Relaxed);
                }
                slot.message = message.clone();
                slot.state = WalRecordState::Pending;
                slot.updated_at = Some(SystemTime::now());
                slot.dead = None;
            }
            None => {
                shard.insert(
                    key(&message.id),
                    Slot::live(message.clone(), Some(SystemTime::now())),
                );
                self.live.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    fn fail(&self, message: &Arc<EMessage>, reason: &DeadReason) -> Result<(), WalError> {
        let now = SystemTime::now();
        let slot = Slot {
            message: message.clone(),
            state: WalRecordState::Failed,
            updated_at: Some(now),
            dead: Some(Box::new(DeadInfo {
                reason: reason.clone(),
                died_at: now,
            })),
        };
        let old = self.shard(&message.id).insert(key(&message.id), slot);
        if let Some(old) = old {
            self.forget(&old);
        }
        self.dead.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn cancel(&self, id: &Uuid) -> Result<Option<WalCommit>, WalError> {
        let mut shard = self.shard(id);
        if shard
            .get(&key(id))
            .is_some_and(|s| s.state == WalRecordState::Pending)
        {
            if let Some(old) = shard.remove(&key(id)) {
                drop(shard);
                self.forget(&old);
                return Ok(Some(WalCommit::Durable));
            }
        }
        Ok(None)
    }

    async fn pending(&self) -> Result<Vec<WalRecord>, WalError> {
        let mut out = Vec::new();
        for shard in self.all() {
            out.extend(
                shard
                    .values()
                    .filter(|s| Self::is_live(s.state))
                    .map(|s| WalRecord {
                        message: s.message.clone(),
                        state: s.state,
                        updated_at: s.updated_at(),
                        dead_reason: None,
                    }),
            );
        }
        Ok(out)
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetterMessage>, WalError> {
        let mut out = Vec::new();
        for shard in self.all() {
            out.extend(
                shard
                    .values()
                    .filter(|s| s.state == WalRecordState::Failed)
                    .map(Slot::dead_letter),
            );
        }
        out.sort_by_key(|d| d.died_at);
        Ok(out)
    }

    async fn take_dead_letter(&self, id: &Uuid) -> Result<Option<DeadLetterMessage>, WalError> {
        let mut shard = self.shard(id);
        if !shard
            .get(&key(id))
            .is_some_and(|s| s.state == WalRecordState::Failed)
        {
            return Ok(None);
        }
        let Some(s) = shard.remove(&key(id)) else {
            return Ok(None);
        };
        drop(shard);
        self.forget(&s);
        Ok(Some(s.dead_letter()))
    }

    async fn purge_dead_letters(&self) -> Result<usize, WalError> {
        let mut n = 0;
        for mut shard in self.all() {
            let before = shard.len();
            shard.retain(|_, s| s.state != WalRecordState::Failed);
            n += before - shard.len();
        }
        self.dead.fetch_sub(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    async fn flush(&self) -> Result<(), WalError> {
        Ok(())
    }

    fn stats(&self) -> WalStats {
        WalStats {
            appended: self.appended.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            live: self.live.load(Ordering::Relaxed),
            dead: self.dead.load(Ordering::Relaxed),
            disk_bytes: 0,
        }
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
        wal.append(&a).unwrap();
        assert!(wal.cancel(&a.id).unwrap().is_some());
        assert!(
            !wal.begin(&a.id).unwrap(),
            "a withdrawn record must not be delivered"
        );

        let b = msg();
        wal.append(&b).unwrap();
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
        wal.append(&a).unwrap();
        wal.begin(&a.id).unwrap();
        wal.fail(&a, &DeadReason::Explicit).unwrap();
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
            wal.append(m).unwrap();
        }
        wal.begin(&b.id).unwrap();
        wal.begin(&c.id).unwrap();
        wal.complete(&c.id).unwrap();
        let mut ids: Vec<Uuid> = wal
            .pending()
            .await
            .unwrap()
            .iter()
            .map(|r| r.message.id)
            .collect();
        ids.sort();
        let mut want = vec![a.id, b.id];
        want.sort();
        assert_eq!(ids, want);
        assert_eq!(wal.stats().live, 2);
    }
}
