//! The single writer of a `PersistentWal`: a dedicated thread that owns the active segment.
//!
//! Senders hand it records through an [`Inbox`]. It takes every record waiting (so concurrent
//! senders share one write and one `fdatasync`), encodes them into one reusable buffer, writes
//! them with one `write`, syncs when the [`SyncPolicy`] asks for it, and only then answers the
//! senders waiting for durability. With `overlap_syncs` those syncs run on the [`SyncThread`]
//! (a lone sender's on this thread): while one runs, the writer waits for it and takes in what
//! arrives, and writes all of it as the next batch when it returns. State changes need no
//! answer and never force a sync; under `Always` they do not even wake the writer (they
//! ride along in the next append's write). When the writer goes idle with state changes
//! queued or unsynced data, it writes and syncs them after a short pause (`idle_sync`).
//!
//! It also keeps the disk bounded. Every live or dead message has an *anchor*: the segment
//! holding its newest full record. A sealed segment is deleted once it is the oldest and no
//! message is anchored in it; deleting only from the oldest end keeps every `Complete` record
//! that could still matter. When the oldest segment holds only a few anchors (a quarter or
//! less of what it was written with), or the whole log has grown past twice its live data plus
//! two segments, the survivors' current state is written again as `Snapshot` records in the
//! active segment, synced, and the old segment deleted; the same happens whenever there are
//! more than 16 segment files and the oldest one's survivors fill at most half a segment. Disk use so stays within about twice the live data (pending
//! messages and dead letters) plus a few segments.
//!
//! A failed write or `fdatasync` (compaction's, a sealed segment's and the idle sync's
//! included) stops the writer for good ([`Failure`]): the request that met it and every one
//! queued or sent after it fail with `WalError::Failed`, and nothing more is written, so the
//! files end in whole synced records and at most a torn tail, which reopening truncates.
//! After a failed sync the kernel may have dropped the data, so going on could acknowledge
//! records that never reached the disk; reopening recovers from what did. A compaction that
//! fails puts its bookkeeping back first, so that no segment is ever deleted for records
//! whose copies did not reach the disk.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use event_base_core::backend::WalCommitter;
use event_base_core::{EMessage, WalError};

use super::backlog::{read_back, Backlog, Loc};
use super::completion_log::CompletionLog;
use super::failure::Failure;
use super::fs::{DirLock, WalFile, WalFs, WalSyncer};
use super::inbox::{Inbox, Woke};
use super::record_codec::{encode, Entry, FRAME_HEADER};
use super::segment::{self, io_err, path_of, HEADER_LEN};
use super::sync_policy::SyncPolicy;
use super::sync_thread::SyncThread;
use crate::memory_wal::MemoryWal;
use crate::record_id::RecordId;

/// Past this many requests in hand the writer stops gathering more for the batch.
const MAX_BATCH: usize = 4096;
/// Past this many segment files the oldest is rewritten if its live records fill at most
/// half a segment, so that small segments holding a few long-lived records cannot pile up.
/// (Not whatever it holds: a backlog of more than this many full segments, all live, would
/// be copied again after every batch, with nothing gained.)
const MAX_SEGMENTS: usize = 16;

pub(crate) type Waiter = WalCommitter;

/// A request to the writer.
pub(crate) enum WriterOp {
    /// Append a record; answer `waiter` once it is as durable as the policy makes it.
    Write {
        entry: Entry,
        waiter: Option<Waiter>,
    },
    /// Append several records in one write (a batch's state changes); nobody waits on them.
    WriteAll(Vec<Entry>),
    /// Sync everything written so far, then answer.
    Flush(Waiter),
    /// Messages of the backlog now held in memory: anchor each in its segment as the
    /// backlog's slot did (it is counted in `live` already). Sent before the messages enter
    /// the in-memory index, so that every later record of them comes after.
    Adopt(Vec<(Arc<EMessage>, u64)>),
    /// A message of the backlog found damaged and skipped: withdraw it from the log (a
    /// `Cancel` record) and release its anchor in `seq`.
    Forget { id: RecordId, seq: u64 },
    /// Answer the completions kept (see `Writer::completions`) at or after `since`.
    Completions {
        since: SystemTime,
        reply: flume::Sender<Vec<(String, SystemTime)>>,
    },
}

pub(crate) struct Writer {
    pub(crate) fs: Arc<dyn WalFs>,
    pub(crate) dir: PathBuf,
    pub(crate) policy: SyncPolicy,
    pub(crate) segment_bytes: u64,
    pub(crate) idle_sync: Duration,
    /// Under `Always`, how long the writer spins after answering senders before it sleeps
    /// (see `Inbox::wait`): the answered sender's next append then needs no wake-up.
    pub(crate) spin: Duration,
    pub(crate) index: Arc<MemoryWal>,
    /// The pending messages recovery left on disk (shared with the `PersistentWal`, which
    /// reads them back). Their slots are their anchors: counted in `live`, not in `anchors`.
    pub(crate) backlog: Arc<Mutex<Backlog>>,
    pub(crate) file: Box<dyn WalFile>,
    /// The sync thread's handle on `file`, made at its first hand-over.
    pub(crate) file_syncer: Option<Arc<dyn WalSyncer>>,
    pub(crate) active: u64,
    /// Size of every segment on disk, oldest first (includes the active one).
    pub(crate) sizes: BTreeMap<u64, u64>,
    pub(crate) anchors: HashMap<RecordId, u64>,
    /// Anchors per segment now.
    pub(crate) live: BTreeMap<u64, u64>,
    /// Anchor records written per segment in all.
    pub(crate) written: BTreeMap<u64, u64>,
    pub(crate) disk_bytes: Arc<AtomicU64>,
    /// `fdatasync` calls made on the active segment (what `WalStats::syncs` reports).
    pub(crate) syncs: Arc<AtomicU64>,
    /// Runs the syncs waiting senders need while the writer writes the next batch (declared
    /// before `_lock`: dropped first, so its last syncs end before the directory is free).
    pub(crate) sync_thread: SyncThread,
    /// Held for the writer's lifetime: one process per WAL directory.
    pub(crate) _lock: DirLock,
    pub(crate) buf: Vec<u8>,
    pub(crate) unsynced: bool,
    /// Largest record body the log may hold (recovery treats longer ones as corruption).
    pub(crate) max_body: usize,
    /// Set at the first failed write or sync (here or on the sync thread). From then on
    /// nothing more is written and every request fails: after a failed `fdatasync` the
    /// kernel may have dropped the data, so carrying on could acknowledge records that are
    /// not on disk. Reopening the WAL recovers from what is. Shared with the `PersistentWal`,
    /// which refuses new records once it is set.
    pub(crate) failure: Arc<Failure>,
    /// How long completions are kept in the log, for a bus's dedup window after a restart
    /// (zero: not kept past their segment).
    pub(crate) retention: Duration,
    /// Per segment, the completions written into it (id, time), while `retention` is set.
    /// Compaction moves the recent ones into `side` before deleting their segment.
    pub(crate) completions: BTreeMap<u64, Vec<(Box<str>, SystemTime)>>,
    /// The completion log: recent completions of segments already deleted.
    pub(crate) side: CompletionLog,
}

impl Writer {
    pub(crate) fn run(mut self, inbox: Arc<Inbox<WriterOp>>) {
        /// Refuses later sends once the writer is gone, however it ends.
        struct Stop<'a>(&'a Inbox<WriterOp>);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.stop();
            }
        }
        let _stop = Stop(&inbox);
        self.compact();
        // Whether the inbox was stopped after a failure (once; the thread then sleeps until
        // the WAL is dropped, holding the directory's lock).
        let mut stopped = false;
        let mut ops: Vec<WriterOp> = Vec::with_capacity(64);
        // Under `Never` nothing is synced when idle, so nothing waits for the timer either.
        let idle = (self.policy != SyncPolicy::Never).then_some(self.idle_sync);
        // Whether the last batch answered a sender under `Always`: its next append is likely
        // close, so the writer spins for it before sleeping. Only then: an idle writer (woken
        // by its timer, or by state changes alone) sleeps at once.
        let mut answered = false;
        loop {
            if !stopped && self.failure.is_set() {
                stopped = true;
                self.unsynced = false;
                // Sends from now on are refused by the inbox; those queued are answered.
                let mut left = inbox.stop();
                self.process(&mut left);
            }
            let spin = if answered { self.spin } else { Duration::ZERO };
            answered = false;
            match inbox.wait(&mut ops, idle, self.unsynced, spin) {
                Woke::Closed => break,
                Woke::Timeout => {
                    // Idle: write the state changes that came quietly, and sync.
                    if !ops.is_empty() {
                        self.process(&mut ops);
                    }
                    if self.unsynced {
                        self.sync_quietly();
                    }
                    continue;
                }
                Woke::Taken => {}
            }
            if self.policy == SyncPolicy::Always {
                // Gather the group the last sync answered, so many senders share one sync.
                let mut have = waiting(&ops);
                if let Some((target, until)) = self.sync_thread.wait_for(have) {
                    // Yield rather than block on the channel: a blocked receiver makes every
                    // sender pay a wake-up syscall, one per record, for records that only
                    // need gathering, and a sleep oversleeps by the timer slack (50 us),
                    // longer than the whole wait. The wait is bounded by one sync's time.
                    loop {
                        if ops.len() < MAX_BATCH {
                            let from = ops.len();
                            inbox.take(&mut ops);
                            have += waiting(&ops[from..]);
                        }
                        let now = Instant::now();
                        if have >= target || ops.len() >= MAX_BATCH || now >= until {
                            break;
                        }
                        std::thread::yield_now();
                    }
                }
            } else if let SyncPolicy::Batch {
                max_records,
                max_delay,
            } = self.policy
            {
                // Wait for company while it keeps arriving: up to `max_delay` in all, but stop
                // as soon as no append came for an eighth of it (more would probably not come,
                // and every waiting sender pays for the wait).
                let deadline = Instant::now() + max_delay;
                let gap = (max_delay / 8).max(Duration::from_micros(50));
                while waiting(&ops) < max_records && ops.len() < MAX_BATCH {
                    let next = (Instant::now() + gap).min(deadline);
                    if !inbox.wait_until(&mut ops, next) {
                        break;
                    }
                }
            }
            if self.policy != SyncPolicy::Never && self.sync_thread.busy() && waiting(&ops) > 0 {
                // A sync runs: this batch would only wait for it. Wait here instead and take
                // in what arrives meanwhile (the senders wake nobody while the writer is not
                // blocked on the channel), so the next write holds all of it and goes to the
                // disk the moment the disk is free.
                self.sync_thread.wait_idle();
                inbox.take(&mut ops);
            }
            answered = self.policy == SyncPolicy::Always && waiting(&ops) > 0;
            self.process(&mut ops);
        }
        self.sync_thread.wait_idle();
        self.sync_quietly();
    }

    /// Records a failed write or sync of `what`: the writer stops for good.
    fn fail(&mut self, what: &str, error: &WalError) {
        self.failure.set(what, error);
    }

    /// What a request gets once the writer has failed.
    fn refusal(&self) -> WalError {
        self.failure
            .error()
            .unwrap_or_else(|| WalError::Closed("the WAL writer has stopped".into()))
    }

    fn process(&mut self, ops: &mut Vec<WriterOp>) {
        if self.failure.is_set() {
            for op in ops.drain(..) {
                let waiter = match op {
                    WriterOp::Write { waiter, .. } => waiter,
                    WriterOp::WriteAll(_) => None,
                    WriterOp::Adopt(_) | WriterOp::Forget { .. } => None,
                    WriterOp::Flush(w) => Some(w),
                    WriterOp::Completions { since, reply } => {
                        let _ = reply.send(self.completions_since(since));
                        None
                    }
                };
                if let Some(w) = waiter {
                    w.answer(Err(self.refusal()));
                }
            }
            return;
        }
        self.buf.clear();
        let mut waiters = Vec::new();
        let mut need_sync = false;
        let mut result = Ok(());
        for op in ops.drain(..) {
            match op {
                WriterOp::Completions { since, reply } => {
                    let _ = reply.send(self.completions_since(since));
                }
                WriterOp::Adopt(adopted) => {
                    for (message, seq) in adopted {
                        self.anchors.insert(RecordId::Message(message), seq);
                    }
                }
                WriterOp::Forget { id, seq } => {
                    let entry = Entry::Cancel(id);
                    encode(&entry, &mut self.buf);
                    self.account(&entry);
                    self.release(seq);
                }
                WriterOp::Write { entry, waiter } => {
                    self.stage(&entry, waiter, &mut waiters, &mut need_sync);
                }
                WriterOp::WriteAll(entries) => {
                    for entry in &entries {
                        self.stage(entry, None, &mut waiters, &mut need_sync);
                        self.seal_if_full(&mut result);
                    }
                }
                WriterOp::Flush(w) => {
                    waiters.push(w);
                    need_sync = true;
                }
            }
            self.seal_if_full(&mut result);
        }
        if result.is_ok() {
            result = self.write_buf().and_then(|()| {
                if !need_sync {
                    self.unsynced |= !self.buf.is_empty();
                    Ok(())
                } else if self.sync_thread.inline(waiters.len()) {
                    let started = Instant::now();
                    self.sync()?;
                    self.sync_thread
                        .synced_inline(waiters.len(), started.elapsed());
                    Ok(())
                } else {
                    // Written: the sync thread's next sync covers it, and answers them.
                    let syncer = self.syncer()?;
                    let path = path_of(&self.dir, self.active);
                    self.sync_thread
                        .submit(syncer, path, std::mem::take(&mut waiters));
                    self.unsynced = false;
                    Ok(())
                }
            });
        }
        if let Err(e) = &result {
            self.fail("writing the log", e);
        }
        let failed = self.failure.is_set();
        for w in waiters {
            w.answer(if failed { Err(self.refusal()) } else { Ok(()) });
        }
        if !failed {
            self.compact();
        }
    }

    /// Encodes `entry` into the buffer and accounts for it; a record over the size limit is
    /// not written, and its waiter (if any) told why.
    fn stage(
        &mut self,
        entry: &Entry,
        waiter: Option<Waiter>,
        waiters: &mut Vec<Waiter>,
        need_sync: &mut bool,
    ) {
        let start = self.buf.len();
        encode(entry, &mut self.buf);
        if self.buf.len() - start - FRAME_HEADER > self.max_body {
            // Never write what recovery would call corrupt.
            let size = self.buf.len() - start - FRAME_HEADER;
            self.buf.truncate(start);
            tracing::error!(target: event_base_core::constant::target::WAL, id = %entry.id(), limit = self.max_body, "WAL record over the size limit was not written");
            if let Some(w) = waiter {
                w.answer(Err(WalError::RecordTooLarge {
                    id: entry.id().to_owned(),
                    size,
                    limit: self.max_body,
                }));
            }
            return;
        }
        self.account(entry);
        if let Some(w) = waiter {
            waiters.push(w);
            *need_sync |= self.policy != SyncPolicy::Never;
        }
    }

    /// Seals the segment as soon as it is full, even in the middle of a batch, so segments
    /// stay close to their configured size.
    fn seal_if_full(&mut self, result: &mut Result<(), WalError>) {
        let active_len = self.sizes.get(&self.active).copied().unwrap_or(0);
        if result.is_ok() && active_len + self.buf.len() as u64 >= self.segment_bytes {
            *result = self.write_buf().and_then(|()| self.rotate());
            self.buf.clear();
        }
    }

    fn write_buf(&mut self) -> Result<(), WalError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let path = path_of(&self.dir, self.active);
        self.file
            .write_all(&self.buf)
            .map_err(|e| io_err(&path, e))?;
        let n = self.buf.len() as u64;
        *self.sizes.entry(self.active).or_default() += n;
        self.disk_bytes.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// The sync thread's handle on the active segment.
    fn syncer(&mut self) -> Result<Arc<dyn WalSyncer>, WalError> {
        if let Some(s) = &self.file_syncer {
            return Ok(s.clone());
        }
        let s = self
            .file
            .syncer()
            .map_err(|e| io_err(&path_of(&self.dir, self.active), e))?;
        self.file_syncer = Some(s.clone());
        Ok(s)
    }

    fn sync(&mut self) -> Result<(), WalError> {
        self.file
            .sync_data()
            .map_err(|e| io_err(&path_of(&self.dir, self.active), e))?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.unsynced = false;
        Ok(())
    }

    /// The idle sync (and the last one at close): nobody waits on it, but a failure is a
    /// failure all the same (the pages it could not write are gone).
    fn sync_quietly(&mut self) {
        if self.failure.is_set() {
            return;
        }
        if let Err(e) = self.sync() {
            self.fail("syncing the log", &e);
        }
    }

    fn account(&mut self, entry: &Entry) {
        if let Entry::CompleteWith { id, at, messages } = entry {
            // One record, accounted as its parts: the completion, then each new message.
            self.account(&Entry::Complete(id.clone(), *at));
            for m in messages {
                self.account(&Entry::Append(m.clone()));
            }
            return;
        }
        if let Entry::Complete(id, at) = entry {
            if !self.retention.is_zero() {
                self.completions
                    .entry(self.active)
                    .or_default()
                    .push((id.as_str().into(), *at));
            }
        }
        let finished = match entry {
            Entry::Complete(..) | Entry::Cancel(_) | Entry::Purge(_) => true,
            Entry::Snapshot { state, .. } => {
                *state == event_base_core::backend::WalRecordState::Complete
            }
            _ => false,
        };
        if finished {
            if let Some(old) = self.anchors.remove(entry.id()) {
                self.release(old);
            }
        } else if entry.is_anchor() {
            // Removed first so that the key is this record's message, not an older copy.
            let old = self.anchors.remove(entry.id());
            self.anchors.insert(entry.record_id(), self.active);
            if let Some(old) = old {
                self.release(old);
            }
            *self.live.entry(self.active).or_default() += 1;
            *self.written.entry(self.active).or_default() += 1;
        }
    }

    fn release(&mut self, seq: u64) {
        if let Some(n) = self.live.get_mut(&seq) {
            *n = n.saturating_sub(1);
        }
    }

    fn rotate(&mut self) -> Result<(), WalError> {
        self.sync()?;
        let next = self.active + 1;
        self.file = segment::create(&*self.fs, &self.dir, next)?;
        self.file_syncer = None;
        self.active = next;
        self.sizes.insert(next, HEADER_LEN as u64);
        self.disk_bytes
            .fetch_add(HEADER_LEN as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Deletes (or first rewrites the few survivors of) the oldest sealed segments.
    fn compact(&mut self) {
        loop {
            let Some((&oldest, &size)) = self.sizes.iter().next() else {
                return;
            };
            if oldest == self.active {
                return;
            }
            let live = self.live.get(&oldest).copied().unwrap_or(0);
            if self.failure.is_set() {
                return;
            }
            if live == 0 {
                if !self.carry_completions(oldest) {
                    return;
                }
                let path = path_of(&self.dir, oldest);
                if let Err(e) = self.fs.remove(&path) {
                    tracing::error!(target: event_base_core::constant::target::WAL, file = %path.display(), error = %e, "could not delete a finished WAL segment");
                    return;
                }
                if let Err(e) = segment::sync_dir(&*self.fs, &self.dir) {
                    tracing::warn!(target: event_base_core::constant::target::WAL, error = %e, "could not sync the WAL directory");
                }
                self.sizes.remove(&oldest);
                self.live.remove(&oldest);
                self.written.remove(&oldest);
                self.disk_bytes.fetch_sub(size, Ordering::Relaxed);
                continue;
            }
            // Rewrite the survivors when they are few, or when the log as a whole holds more
            // than twice its live data plus two segments of slack. Either way the log is
            // reclaimed oldest first, which keeps every `Complete` record that could still
            // matter, and disk use stays within a small multiple of the live data.
            let written = self.written.get(&oldest).copied().unwrap_or(live).max(1);
            let total: u64 = self.sizes.values().sum();
            let live_bytes: u64 = self
                .sizes
                .iter()
                .map(|(seq, len)| {
                    let w = self.written.get(seq).copied().unwrap_or(0).max(1);
                    let l = self.live.get(seq).copied().unwrap_or(0).min(w);
                    len.saturating_mul(l) / w
                })
                .sum();
            let worth_it = live.saturating_mul(4) <= written
                || total > live_bytes.saturating_mul(2) + self.segment_bytes.saturating_mul(2)
                || (self.sizes.len() > MAX_SEGMENTS
                    && size.saturating_mul(live) / written <= self.segment_bytes / 2);
            if !worth_it || !self.carry_completions(oldest) || !self.snapshot(oldest) {
                return;
            }
        }
    }

    /// Moves the completions of segment `seq` younger than the retention into the completion
    /// log (synced), so deleting `seq` keeps them; skips ids that are live or dead again.
    /// Returns whether `seq` may go.
    fn carry_completions(&mut self, seq: u64) -> bool {
        let Some(list) = self.completions.remove(&seq) else {
            return true;
        };
        let oldest = SystemTime::now()
            .checked_sub(self.retention)
            .unwrap_or(UNIX_EPOCH);
        let recent: Vec<(Box<str>, SystemTime)> = list
            .into_iter()
            .filter(|(id, at)| *at >= oldest && !self.is_held(id))
            .collect();
        match self.side.append(&*self.fs, recent, self.retention) {
            Ok(()) => true,
            Err(e) => {
                // Only dedup information is at stake, but a failed write or sync is final
                // all the same; the segment is kept.
                self.fail("writing the completion log", &e);
                false
            }
        }
    }

    /// The completions kept, at or after `since`, of messages not live or dead again.
    fn completions_since(&self, since: SystemTime) -> Vec<(String, SystemTime)> {
        self.side
            .entries
            .iter()
            .chain(self.completions.values().flatten())
            .filter(|(id, at)| *at >= since && !self.is_held(id))
            .map(|(id, at)| (id.to_string(), *at))
            .collect()
    }

    /// Writes the current state of every message anchored in `seq` into the active segment.
    /// Returns whether anything was moved.
    fn snapshot(&mut self, seq: u64) -> bool {
        // Held through the write: a reader of the backlog must find the new records written
        // when it finds their new places.
        let backlog = self.backlog.clone();
        let mut backlog = backlog.lock().unwrap_or_else(PoisonError::into_inner);
        let ids: Vec<RecordId> = self
            .anchors
            .iter()
            .filter(|(_, s)| **s == seq)
            .map(|(id, _)| id.clone())
            .collect();
        self.buf.clear();
        let mut moved = 0;
        // The messages whose anchor moves to the active segment, to move back if the write
        // fails: until their copies are on disk, `seq` is where they are.
        let mut anchored = Vec::new();
        for id in ids {
            if let Some(rec) = self.index.record(id.as_str()) {
                let entry = Entry::Snapshot {
                    message: rec.message,
                    state: rec.state,
                    reason: rec.dead_reason,
                    at: rec.updated_at,
                    handlers: rec.dead_handlers,
                };
                encode(&entry, &mut self.buf);
                self.account(&entry);
                anchored.push(id);
                moved += 1;
            }
        }
        let relocated = self.snapshot_backlog(&mut backlog, seq);
        moved += relocated.len();
        if moved == 0 {
            return false;
        }
        match self.write_buf().and_then(|()| self.sync()) {
            Ok(()) => true,
            Err(e) => {
                // Undo the move, so that nothing counts `seq` as empty: the copies written
                // (in part, or not synced) are not where these messages are.
                for (id, old) in relocated {
                    backlog.relocate(&id, old);
                    self.unmove(seq);
                }
                for id in anchored {
                    if let Some(now) = self.anchors.insert(id, seq) {
                        self.unmove_from(now, seq);
                    }
                }
                self.fail("compacting the log", &e);
                false
            }
        }
    }

    /// Undoes one anchor's move from `seq` to the active segment.
    fn unmove(&mut self, seq: u64) {
        let active = self.active;
        self.unmove_from(active, seq);
    }

    /// Undoes one anchor's move from `seq` to `to`.
    fn unmove_from(&mut self, to: u64, seq: u64) {
        for counts in [&mut self.live, &mut self.written] {
            if let Some(n) = counts.get_mut(&to) {
                *n = n.saturating_sub(1);
            }
        }
        *self.live.entry(seq).or_default() += 1;
    }
}

impl Writer {
    /// Whether `id` is live or dead: anchored in memory, or in the backlog.
    fn is_held(&self, id: &str) -> bool {
        self.anchors.contains_key(id)
            || self
                .backlog
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(id)
    }

    /// Reads the backlog's messages of segment `seq` back and encodes them again as
    /// `Snapshot` records into `buf`, moving their slots to where they will be written;
    /// returns the ids moved with their old places. A damaged one stays where it is (and so
    /// does its segment): it is reported when the replay reaches it.
    fn snapshot_backlog(&mut self, backlog: &mut Backlog, seq: u64) -> Vec<(String, Loc)> {
        let base = self.sizes.get(&self.active).copied().unwrap_or(0);
        let mut moved = Vec::new();
        // A window at a time: the messages decoded at once stay few.
        for slots in backlog.in_segment(seq).chunks(4096) {
            let read = match read_back(&*self.fs, &self.dir, slots, self.max_body) {
                Ok(read) => read,
                Err(e) => {
                    tracing::error!(target: event_base_core::constant::target::WAL, error = %e, "could not read pending messages back for compaction; the segment is kept");
                    break;
                }
            };
            for ((id, slot), got) in slots.iter().zip(read) {
                let (message, at) = match got {
                    Ok(found) => found,
                    Err(damaged) => {
                        tracing::warn!(target: event_base_core::constant::target::WAL, file = %damaged.file.display(), offset = damaged.offset, reason = %damaged.reason, "a pending record is damaged; compaction leaves it (and its segment) in place");
                        continue;
                    }
                };
                let start = self.buf.len();
                encode(
                    &Entry::Snapshot {
                        message,
                        state: slot.state(),
                        reason: None,
                        at,
                        handlers: Vec::new(),
                    },
                    &mut self.buf,
                );
                let to = Loc {
                    seq: self.active,
                    offset: base + start as u64,
                    len: (self.buf.len() - start) as u32,
                    sub: 0,
                };
                backlog.relocate(id, to);
                self.release(seq);
                *self.live.entry(self.active).or_default() += 1;
                *self.written.entry(self.active).or_default() += 1;
                moved.push((id.clone(), slot.loc));
            }
        }
        moved
    }
}

fn waiting(ops: &[WriterOp]) -> usize {
    ops.iter().filter(|op| is_waiter(op)).count()
}

/// Whether someone waits on this op's durability.
fn is_waiter(op: &WriterOp) -> bool {
    matches!(
        op,
        WriterOp::Write {
            waiter: Some(_),
            ..
        } | WriterOp::Flush(_)
    )
}
