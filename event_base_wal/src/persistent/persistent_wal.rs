//! [`PersistentWal`]: the file-backed, crash-safe write-ahead log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use event_base_core::backend::{
    PendingWindow, StoredSchedule, Wal, WalCommit, WalCommitter, WalRecord, WalStats,
};
use event_base_core::constant::MAX_WAIT;
use event_base_core::{DeadLetterMessage, DeadReason, EMessage, WalError};

use super::backlog::{read_back, Backlog, Damaged, ReadBack, Slot};
use super::completion_log::CompletionLog;
use super::failure::Failure;
use super::fs::{StdFs, WalFs};
use super::inbox::Inbox;
use super::record_codec::{message_body_bound, Entry};
use super::recovery::{recover, Recovered, RecoveryReport};
use super::segment::{self, io_err};
use super::sync_policy::SyncPolicy;
use super::sync_thread::SyncThread;
use super::wal_writer::{Writer, WriterOp};
use crate::memory_wal::MemoryWal;
use crate::record_id::RecordId;
use crate::schedule_store::ScheduleStore;

/// Default size at which the active segment is sealed and a new one started.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;
/// Default largest record body accepted (on write and on recovery).
pub const DEFAULT_MAX_RECORD_BYTES: usize = 64 << 20;
/// Default of [`PersistentWalBuilder::writer_spin`]: off. On the benchmark machine a spin
/// of 50 µs removed about one futex call a message for a lone sender but no throughput
/// could be told from the shared disk's noise, and it costs CPU (`docs/benchmarks.md`,
/// "Issue 14, sixth round").
pub const DEFAULT_WRITER_SPIN: Duration = Duration::ZERO;
const LOCK_FILE: &str = "LOCK";
/// Most backlog records `pending` reads back at once.
const READ_BACK_WINDOW: usize = 4096;
/// Longest dead-letter reason text written to the log; longer ones are cut.
const MAX_REASON_BYTES: usize = 4096;

/// A write-ahead log in a directory of segment files.
///
/// The live state (every `Pending`, `Processing` and dead record) is kept in memory, and
/// the files are the durable history it is rebuilt from at open, with one exception: the
/// pending messages found at open stay on disk (about 90 bytes of memory each, for their
/// place in the log) and are read back a window at a time as the start-up replay
/// ([`Wal::pending_window`]) takes them, so a backlog larger than memory can be reopened.
/// One writer thread owns the files (see [`SyncPolicy`] for when `send` returns). Only one
/// process may open a directory at a time.
///
/// A failed write or `fdatasync` (a full disk, an I/O error) stops it for good, under every
/// policy: every later record is refused with [`WalError::Failed`] naming the cause,
/// `WalStats::failed` is set and `Wal::failure` says why; nothing it acknowledged is lost,
/// and a restart once the cause is fixed recovers all of it (the persistence guide's "When
/// the disk fails").
///
/// ```
/// use event_base_wal::{PersistentWal, SyncPolicy};
/// use std::time::Duration;
///
/// # fn main() -> Result<(), event_base_core::WalError> {
/// # let dir = std::env::temp_dir().join(format!("ebwal-doc-{}", std::process::id()));
/// let wal = PersistentWal::builder(&dir)
///     .sync_policy(SyncPolicy::Batch { max_records: 256, max_delay: Duration::from_millis(2) })
///     .open()?;
/// // start_system!(wal: wal).await?;
/// # drop(wal);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(()) }
/// ```
pub struct PersistentWal {
    index: Arc<MemoryWal>,
    /// Its recurring schedules, in `schedules.bin` beside the segments
    /// (`schedule_store.rs` says how).
    schedules: ScheduleStore,
    /// The writer's queue; closed when the WAL is dropped.
    inbox: Arc<Inbox<WriterOp>>,
    thread: Option<JoinHandle<()>>,
    policy: SyncPolicy,
    max_record_bytes: usize,
    disk_bytes: Arc<AtomicU64>,
    syncs: Arc<AtomicU64>,
    dir: PathBuf,
    report: RecoveryReport,
    fs: Arc<dyn WalFs>,
    skip_corrupt: bool,
    /// The pending messages found at open and not read back yet (shared with the writer).
    backlog: Arc<Mutex<Backlog>>,
    /// How many the backlog holds: read without its lock, so that a WAL with no backlog
    /// pays one atomic load per call for it.
    backlog_len: AtomicU64,
    /// Backlog records found damaged when read back, and skipped (`skip_corrupt`).
    skipped: AtomicU64,
    /// Set at the first failed write or sync (by the writer or the sync thread): from then
    /// on every new record is refused.
    failure: Arc<Failure>,
}

impl std::fmt::Debug for PersistentWal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentWal")
            .field("dir", &self.dir)
            .field("policy", &self.policy)
            .finish()
    }
}

/// Options of a [`PersistentWal`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `open()`"]
pub struct PersistentWalBuilder {
    dir: PathBuf,
    policy: SyncPolicy,
    segment_bytes: u64,
    max_record_bytes: usize,
    skip_corrupt: bool,
    idle_sync: Duration,
    writer_spin: Duration,
    completion_retention: Duration,
    overlap_syncs: bool,
    fs: Arc<dyn WalFs>,
}

impl PersistentWalBuilder {
    /// When to `fdatasync` (default [`SyncPolicy::Always`]).
    /// Durations of at most [`MAX_WAIT`] (30 years): a longer one is taken as that.
    pub fn sync_policy(mut self, policy: SyncPolicy) -> Self {
        self.policy = match policy {
            SyncPolicy::Batch {
                max_records,
                max_delay,
            } => SyncPolicy::Batch {
                max_records,
                max_delay: max_delay.min(MAX_WAIT),
            },
            other => other,
        };
        self
    }

    /// Size at which a segment is sealed (default 64 MiB). Smaller segments are reclaimed
    /// sooner; larger ones mean fewer files.
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes.max(4096);
        self
    }

    /// Largest record accepted (default 64 MiB); a longer length read from disk is corruption.
    pub fn max_record_bytes(mut self, bytes: usize) -> Self {
        self.max_record_bytes = bytes.max(1024);
        self
    }

    /// Go on past corruption (with a warning) instead of failing to open: skip damaged bytes
    /// and resume at the next valid record, go on without a missing segment, move a sealed
    /// segment with a damaged header aside. The records skipped are lost (counted in
    /// [`PersistentWal::recovery_report`]); use it to recover a damaged directory, not by
    /// default.
    pub fn skip_corrupt(mut self, skip: bool) -> Self {
        self.skip_corrupt = skip;
        self
    }

    /// How long completions stay in the log (default two minutes, the bus's default dedup
    /// window; `Duration::ZERO`: no longer than the log needs them), so that a bus started on
    /// this WAL after a restart still refuses their ids as duplicates
    /// (`EventBusBuilder::dedup_window`). Compaction carries completions younger than this
    /// into the newest segment before deleting an old one; the cost is about 50 bytes of disk
    /// and of memory per message completed within the time.
    pub fn completion_retention(mut self, retention: Duration) -> Self {
        self.completion_retention = retention;
        self
    }

    /// Run the `fdatasync`s that waiting senders need on a second thread, so the writer takes
    /// in and writes the next batch while the disk syncs the last one (default off). Under
    /// [`SyncPolicy::Always`] and `Batch`, with many concurrent senders, it pays off where a
    /// sync takes long against the senders' own work (a slow or shared disk); where syncs
    /// are fast it can split the senders into more, smaller groups, and each sync costs CPU.
    /// In the benchmark, 64 senders sent 0.96–1.83× as many messages per second with it
    /// (`docs/benchmarks.md`); measure on your disk (`throughput --only wal_always`).
    /// Durability is the same either way: a send is answered only after a sync that started
    /// after its record was written. A lone sender syncs on the writer thread in both modes.
    pub fn overlap_syncs(mut self, on: bool) -> Self {
        self.overlap_syncs = on;
        self
    }

    /// How long the writer waits, idle, before writing and syncing state changes that no
    /// sender waited for (default 50 ms). Such a change (a record marked processing,
    /// complete, retried or dead) does not wake the writer: it goes out with the next
    /// append's write, or at this timer when no append comes. A process killed within this
    /// interval of its last handled message may therefore deliver those messages again
    /// after its restart (at least once; nothing a `send` accepted is lost). `flush` and a
    /// clean drop write and sync everything at once.
    /// Durations of at most [`MAX_WAIT`] (30 years): a longer one is taken as that.
    pub fn idle_sync(mut self, interval: Duration) -> Self {
        self.idle_sync = interval.min(MAX_WAIT);
        self
    }

    /// Under [`SyncPolicy::Always`], how long the writer thread keeps looking for the next
    /// append after it answered senders, before it sleeps (default [`DEFAULT_WRITER_SPIN`],
    /// off: it sleeps at once; some tens of microseconds is the range to try). A sender that was just answered and sends again
    /// within this time hands its record over without waking the writer, and the writer
    /// takes it without going to sleep: for one sender at a time that saves a thread
    /// wake-up a message. The price is this much CPU of the writer after each answered
    /// batch; an idle WAL spins once, after its last answer, then sleeps. Durability and
    /// order are the same either way.
    /// Durations of at most [`MAX_WAIT`] (30 years): a longer one is taken as that.
    pub fn writer_spin(mut self, spin: Duration) -> Self {
        self.writer_spin = spin.min(MAX_WAIT);
        self
    }

    /// Puts the WAL on a simulated disk instead of the real file system (feature `sim`,
    /// for tests): `dir` is then a path on that disk. See [`SimFs`](crate::sim::SimFs).
    #[cfg(feature = "sim")]
    pub fn sim_fs(mut self, fs: crate::sim::SimFs) -> Self {
        self.fs = Arc::new(fs);
        self
    }

    /// Opens (creating if needed) the directory, recovers its state, and starts the writer.
    pub fn open(self) -> Result<PersistentWal, WalError> {
        let dir = self.dir;
        let fs = self.fs;
        create_dir(&*fs, &dir)?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = match fs.lock(&lock_path) {
            Ok(lock) => lock,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(WalError::InUse { dir: dir.clone() })
            }
            Err(e) => return Err(io_err(&lock_path, e)),
        };

        let schedules = ScheduleStore::open(&dir)?;
        let index = Arc::new(MemoryWal::new());
        let mut rec = recover(&*fs, &dir, &index, self.max_record_bytes, self.skip_corrupt)?;
        let report = rec.report.clone();
        if report.lost_anything() {
            tracing::warn!(target: event_base_core::constant::target::WAL, dir = %dir.display(), ?report, "WAL recovered, but dropped, skipped or set aside data; see the warnings before this one");
        } else {
            tracing::debug!(target: event_base_core::constant::target::WAL, dir = %dir.display(), ?report, "WAL recovered cleanly");
        }
        let mut sizes = BTreeMap::new();
        for &seq in &rec.segments {
            let path = segment::path_of(&dir, seq);
            let len = fs.len(&path).map_err(|e| io_err(&path, e))?;
            sizes.insert(seq, len);
        }
        // Keep appending to the last segment if it has room; a new segment per open would
        // leave one small file behind per restart.
        let (active, file) = match rec.segments.last().copied() {
            Some(last) if sizes.get(&last).copied().unwrap_or(0) < self.segment_bytes => {
                (last, segment::open_for_append(&*fs, &dir, last)?)
            }
            last => {
                let next = last.unwrap_or(0) + 1;
                sizes.insert(next, segment::HEADER_LEN as u64);
                (next, segment::create(&*fs, &dir, next)?)
            }
        };
        let disk_bytes = Arc::new(AtomicU64::new(sizes.values().sum()));
        let syncs = Arc::new(AtomicU64::new(0));
        let live = live_per_segment(&rec);
        let backlog_len = rec.backlog.len() as u64;
        let backlog = Arc::new(Mutex::new(std::mem::take(&mut rec.backlog)));
        let stats = index.stats();
        tracing::info!(target: event_base_core::constant::target::WAL, dir = %dir.display(), live = stats.live + backlog_len, on_disk = backlog_len, dead = stats.dead, segments = sizes.len(), "WAL opened");

        let mut completions: BTreeMap<u64, Vec<(Box<str>, SystemTime)>> = BTreeMap::new();
        if !self.completion_retention.is_zero() {
            for (id, (seq, at)) in rec.completions {
                completions.entry(seq).or_default().push((id, at));
            }
        }
        let side = CompletionLog::load(&*fs, &dir, self.max_record_bytes)?;
        let failure = Arc::new(Failure::default());
        let writer = Writer {
            completions,
            side,
            retention: self.completion_retention,
            fs: fs.clone(),
            backlog: backlog.clone(),
            dir: dir.clone(),
            policy: self.policy,
            segment_bytes: self.segment_bytes,
            idle_sync: self.idle_sync,
            spin: self.writer_spin,
            index: index.clone(),
            file,
            file_syncer: None,
            active,
            sizes,
            anchors: rec.anchors,
            live,
            written: rec.written,
            disk_bytes: disk_bytes.clone(),
            syncs: syncs.clone(),
            _lock: lock,
            buf: Vec::with_capacity(64 << 10),
            unsynced: false,
            max_body: self.max_record_bytes,
            failure: failure.clone(),
            sync_thread: SyncThread::start(syncs.clone(), self.overlap_syncs, failure.clone())
                .map_err(|e| io_err(&dir, e))?,
        };
        let (inbox, thread) = start_writer(writer, &dir)?;
        Ok(PersistentWal {
            index,
            schedules,
            inbox,
            thread: Some(thread),
            policy: self.policy,
            max_record_bytes: self.max_record_bytes,
            disk_bytes,
            syncs,
            dir,
            report,
            fs,
            skip_corrupt: self.skip_corrupt,
            backlog,
            backlog_len: AtomicU64::new(backlog_len),
            skipped: AtomicU64::new(0),
            failure,
        })
    }
}

/// Starts the writer thread, with the inbox the senders hand it records through.
fn start_writer(
    writer: Writer,
    dir: &Path,
) -> Result<(Arc<Inbox<WriterOp>>, JoinHandle<()>), WalError> {
    let inbox = Arc::new(Inbox::new());
    let rx = inbox.clone();
    let thread = std::thread::Builder::new()
        .name("event_base-wal".into())
        .spawn(move || writer.run(rx))
        .map_err(|e| io_err(dir, e))?;
    Ok((inbox, thread))
}

/// How many messages recovery found anchored in each segment: those held in memory and
/// those of the backlog.
fn live_per_segment(rec: &Recovered) -> BTreeMap<u64, u64> {
    let mut live = BTreeMap::new();
    for seq in rec.anchors.values() {
        *live.entry(*seq).or_insert(0u64) += 1;
    }
    for (seq, n) in rec.backlog.per_segment() {
        *live.entry(seq).or_insert(0u64) += n;
    }
    live
}

/// Creates `dir` if it is missing. A file where the directory (or one of its parents) should
/// be is [`WalError::NotADirectory`], naming the file, not the bare I/O error ("File exists",
/// "Not a directory") `create_dir_all` gives.
fn create_dir(fs: &dyn WalFs, dir: &Path) -> Result<(), WalError> {
    let Err(e) = fs.create_dir_all(dir) else {
        return Ok(());
    };
    // The nearest existing part of the path decides: a file there is in the way. (Asked of
    // the real file system: the simulated one never fails to create a directory.)
    let existing = dir.ancestors().find(|p| p.exists());
    match existing.filter(|p| !p.is_dir()) {
        Some(file) => Err(WalError::NotADirectory {
            path: dir.to_owned(),
            file: file.to_owned(),
        }),
        None => Err(io_err(dir, e)),
    }
}

impl PersistentWal {
    /// Opens `dir` with the defaults: [`SyncPolicy::Always`], 64 MiB segments.
    pub fn open(dir: impl AsRef<Path>) -> Result<PersistentWal, WalError> {
        Self::builder(dir).open()
    }

    /// Options for opening `dir`.
    pub fn builder(dir: impl AsRef<Path>) -> PersistentWalBuilder {
        PersistentWalBuilder {
            dir: dir.as_ref().to_owned(),
            policy: SyncPolicy::Always,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            skip_corrupt: false,
            idle_sync: Duration::from_millis(50),
            writer_spin: DEFAULT_WRITER_SPIN,
            completion_retention: event_base_core::constant::DEFAULT_DEDUP_WINDOW,
            overlap_syncs: false,
            fs: Arc::new(StdFs),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The sync policy.
    pub fn sync_policy(&self) -> SyncPolicy {
        self.policy
    }

    /// What recovery found and did when this WAL was opened: segments read, records
    /// replayed, bytes truncated from a torn tail, damaged records skipped, files moved aside.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// Pending messages found at open whose message is still on disk only: the start-up
    /// replay has not read them back yet ([`Wal::pending_window`]).
    pub fn backlog_on_disk(&self) -> u64 {
        self.backlog_len.load(Ordering::Acquire)
    }

    /// Live (`Pending` or `Processing`) messages held in memory: those sent since open and
    /// those read back from the backlog, until they complete.
    pub fn live_in_memory(&self) -> u64 {
        self.index.stats().live
    }

    /// Backlog records found damaged when read back for delivery and, with
    /// [`skip_corrupt(true)`](PersistentWalBuilder::skip_corrupt), skipped (each one logged
    /// at `warn`, its message lost). Without `skip_corrupt` such a record is an error instead
    /// (see [`Wal::pending_window`]).
    pub fn skipped_at_read_back(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    fn lock_backlog(&self) -> MutexGuard<'_, Backlog> {
        self.backlog.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves `id` from the backlog into the in-memory index if the backlog holds it, so that
    /// every state change goes through the index as for any other message; whether it did.
    fn warm(&self, id: &str) -> Result<bool, WalError> {
        if self.backlog_len.load(Ordering::Acquire) == 0 {
            return Ok(false);
        }
        let mut backlog = self.lock_backlog();
        let Some(slot) = backlog.get(id) else {
            return Ok(false);
        };
        let picks = [(id.to_owned(), slot)];
        let read = read_back(&*self.fs, &self.dir, &picks, self.max_record_bytes)?;
        Ok(!self.take_in(&mut backlog, &picks, read, true)?.is_empty())
    }

    /// Whether the backlog holds `id` (a send with that id is a duplicate).
    fn in_backlog(&self, id: &str) -> bool {
        self.backlog_len.load(Ordering::Acquire) != 0 && self.lock_backlog().contains(id)
    }

    /// The records of `picks`, as `read` back from the segments. With `take`, each message
    /// moves into the in-memory index (the writer told first, see `WriterOp::Adopt`) and
    /// leaves the backlog. A damaged record is an error (and nothing moves), or with
    /// `skip_corrupt` a warning: it is then dropped from the backlog and withdrawn from the
    /// log.
    fn take_in(
        &self,
        backlog: &mut Backlog,
        picks: &[(String, Slot)],
        read: Vec<ReadBack>,
        take: bool,
    ) -> Result<Vec<WalRecord>, WalError> {
        if !self.skip_corrupt {
            // Nothing moves when any of them is damaged: the caller gets the error and the
            // backlog stays as it was.
            if let Some((_, Err(damaged))) = picks.iter().zip(&read).find(|(_, got)| got.is_err()) {
                let err = damaged.to_error();
                tracing::error!(target: event_base_core::constant::target::WAL, error = %err, "WAL: a pending record is damaged");
                return Err(err);
            }
        }
        let mut out = Vec::with_capacity(read.len());
        let mut kept = Vec::with_capacity(read.len());
        for ((id, slot), got) in picks.iter().zip(read) {
            match got {
                Ok((message, at)) => {
                    kept.push((id, slot.loc.seq));
                    out.push(WalRecord {
                        message,
                        state: slot.state(),
                        updated_at: at,
                        dead_reason: None,
                        dead_handlers: Vec::new(),
                    });
                }
                Err(damaged) => self.skip_damaged(backlog, id, slot, &damaged)?,
            }
        }
        if take && !out.is_empty() {
            // The writer learns of them before anyone can change their state.
            let adopted = out
                .iter()
                .zip(&kept)
                .map(|(r, (_, seq))| (r.message.clone(), *seq))
                .collect();
            self.op(WriterOp::Adopt(adopted))?;
            for (record, (id, _)) in out.iter().zip(&kept) {
                self.index.restore(record.clone());
                backlog.remove(id);
            }
        }
        self.backlog_len
            .store(backlog.len() as u64, Ordering::Release);
        Ok(out)
    }

    fn skip_damaged(
        &self,
        backlog: &mut Backlog,
        id: &str,
        slot: &Slot,
        damaged: &Damaged,
    ) -> Result<(), WalError> {
        let err = damaged.to_error();
        tracing::warn!(target: event_base_core::constant::target::WAL, %id, error = %err, "WAL: skipping a damaged pending record (skip_corrupt); its message is lost");
        backlog.remove(id);
        self.skipped.fetch_add(1, Ordering::Relaxed);
        self.op(WriterOp::Forget {
            id: RecordId::Text(id.into()),
            seq: slot.loc.seq,
        })
    }

    /// Hands `op` to the writer, waking it (a request someone waits for, or one the
    /// writer must see before what follows).
    fn op(&self, op: WriterOp) -> Result<(), WalError> {
        self.inbox.send(op, true).map_err(|_| self.refused())
    }

    /// Why the writer takes nothing: it failed ([`WalError::Failed`]), or it is gone.
    fn refused(&self) -> WalError {
        self.failure
            .error()
            .unwrap_or_else(|| WalError::Closed("the WAL writer thread has stopped".into()))
    }

    /// Refuses a new record once the WAL has failed, before anything is recorded for it.
    fn check_working(&self) -> Result<(), WalError> {
        match self.failure.error() {
            Some(failed) => Err(failed),
            None => Ok(()),
        }
    }

    /// Takes back from the in-memory index the messages of a send the writer refused, so
    /// that nothing the caller was told is refused stays live.
    fn withdraw(&self, messages: &[Arc<EMessage>]) {
        for m in messages {
            let _ = self.index.cancel_record(&m.id);
        }
    }

    /// Whether a record nobody waits on should wake the writer: not under `Always`, where it
    /// rides along with the next append's write or the idle sync (see `inbox`); under the
    /// other policies the writer's own batching decides as before.
    fn quiet_wakes(&self) -> bool {
        self.policy != SyncPolicy::Always
    }

    fn send(&self, entry: Entry, waiter: Option<WalCommitter>) -> Result<(), WalError> {
        // A failed writer takes nothing, though its inbox may not be closed yet.
        self.check_working()?;
        let urgent = waiter.is_some() || self.quiet_wakes();
        self.inbox
            .send(WriterOp::Write { entry, waiter }, urgent)
            .map_err(|_| self.refused())
    }

    /// Sends several records that nobody waits on, to be written together.
    fn send_all(&self, entries: Vec<Entry>) -> Result<(), WalError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.check_working()?;
        self.inbox
            .send(WriterOp::WriteAll(entries), self.quiet_wakes())
            .map_err(|_| self.refused())
    }

    /// Sends a record whose durability the caller waits for (per the policy).
    fn send_durable(&self, entry: Entry) -> Result<WalCommit, WalError> {
        if self.policy == SyncPolicy::Never {
            self.send(entry, None)?;
            return Ok(WalCommit::durable());
        }
        let (commit, committer) = WalCommit::pending();
        self.send(entry, Some(committer))?;
        Ok(commit)
    }

    fn check_size(&self, message: &EMessage) -> Result<(), WalError> {
        let bound = message_body_bound(message);
        if bound > self.max_record_bytes {
            return Err(WalError::RecordTooLarge {
                id: message.id.clone(),
                size: bound,
                limit: self.max_record_bytes,
            });
        }
        Ok(())
    }
}

impl Drop for PersistentWal {
    fn drop(&mut self) {
        // Closing the inbox lets the writer finish its queue, sync, and release the lock.
        self.inbox.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[async_trait]
impl Wal for PersistentWal {
    async fn put_schedule(&self, name: &str, definition: &[u8]) -> Result<(), WalError> {
        self.check_working()?;
        self.schedules.put(name, definition)
    }

    async fn remove_schedule(&self, name: &str) -> Result<bool, WalError> {
        self.check_working()?;
        self.schedules.remove(name)
    }

    async fn stored_schedules(&self) -> Result<Vec<StoredSchedule>, WalError> {
        Ok(self.schedules.list())
    }

    async fn claim_slot(&self, name: &str, slot: u64) -> Result<bool, WalError> {
        self.check_working()?;
        self.schedules.claim(name, slot)
    }

    fn append(&self, message: &Arc<EMessage>) -> Result<WalCommit, WalError> {
        self.check_size(message)?;
        self.check_working()?;
        self.warm(&message.id)?;
        // The in-memory index is durable at once; the log decides the commit.
        let _ = self.index.append(message)?;
        self.send_durable(Entry::Append(message.clone()))
            .inspect_err(|_| self.withdraw(std::slice::from_ref(message)))
    }

    /// The whole batch goes to the writer in order, and only the last record carries a
    /// waiter: the sync that covers it covers every record before it.
    fn append_batch(&self, messages: &[Arc<EMessage>]) -> Result<WalCommit, WalError> {
        for m in messages {
            self.check_size(m)?;
        }
        self.check_working()?;
        for m in messages {
            self.warm(&m.id)?;
        }
        let Some((last, rest)) = messages.split_last() else {
            return Ok(WalCommit::durable());
        };
        let sent = || -> Result<WalCommit, WalError> {
            for m in rest {
                let _ = self.index.append(m)?;
                self.send(Entry::Append(m.clone()), None)?;
            }
            let _ = self.index.append(last)?;
            self.send_durable(Entry::Append(last.clone()))
        };
        sent().inspect_err(|_| self.withdraw(messages))
    }

    fn begin(&self, id: &str) -> Result<bool, WalError> {
        let message = match self.index.begin_record(id) {
            // Not in memory: it may be on disk still (a message never replayed).
            None if self.warm(id)? => self.index.begin_record(id),
            held => held,
        };
        match message {
            Some(message) => {
                self.send(Entry::Processing(RecordId::Message(message)), None)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn complete(&self, id: &str) -> Result<(), WalError> {
        let message = match self.index.complete_live_record(id) {
            None if self.warm(id)? => self.index.complete_live_record(id),
            held => held,
        };
        if let Some(message) = message {
            let at = SystemTime::now();
            self.send(Entry::Complete(RecordId::Message(message), at), None)?;
        }
        Ok(())
    }

    /// The batch's `Processing` marks go to the writer as one op: one write.
    fn begin_batch(&self, ids: &[&str]) -> Result<Vec<bool>, WalError> {
        let mut flags = Vec::with_capacity(ids.len());
        let mut entries = Vec::with_capacity(ids.len());
        for id in ids {
            let message = match self.index.begin_record(id) {
                // Not in memory: it may be on disk still (a message never replayed).
                None if self.warm(id)? => self.index.begin_record(id),
                held => held,
            };
            match message {
                Some(message) => {
                    entries.push(Entry::Processing(RecordId::Message(message)));
                    flags.push(true);
                }
                None => flags.push(false),
            }
        }
        self.send_all(entries)?;
        Ok(flags)
    }

    /// The batch's completions go to the writer as one op, with one clock read: one write.
    fn complete_batch(&self, ids: &[&str]) -> Result<(), WalError> {
        let at = SystemTime::now();
        let mut entries = Vec::with_capacity(ids.len());
        for id in ids {
            let message = match self.index.complete_live_record(id) {
                None if self.warm(id)? => self.index.complete_live_record(id),
                held => held,
            };
            if let Some(message) = message {
                entries.push(Entry::Complete(RecordId::Message(message), at));
            }
        }
        self.send_all(entries)
    }

    /// One record (`CompleteWith`) for the completion and the messages: all of it survives a
    /// crash, or none.
    fn complete_with(&self, id: &str, messages: &[Arc<EMessage>]) -> Result<WalCommit, WalError> {
        for m in messages {
            self.check_size(m)?;
            self.warm(&m.id)?;
        }
        self.check_working()?;
        self.warm(id)?;
        let Some(done) = self.index.complete_live_record(id) else {
            // Not live (withdrawn, or finished already): the messages go alone.
            let mut commits = Vec::with_capacity(messages.len());
            for m in messages {
                commits.push(self.append(m)?);
            }
            return Ok(WalCommit::all(commits));
        };
        for m in messages {
            let _ = self.index.append(m)?;
        }
        self.send_durable(Entry::CompleteWith {
            id: RecordId::Message(done),
            at: SystemTime::now(),
            messages: messages.to_vec(),
        })
        .inspect_err(|_| self.withdraw(messages))
    }

    fn append_unique(&self, message: &Arc<EMessage>) -> Result<Option<WalCommit>, WalError> {
        self.check_size(message)?;
        self.check_working()?;
        if self.in_backlog(&message.id) || !self.index.put_new(message) {
            return Ok(None);
        }
        self.send_durable(Entry::Append(message.clone()))
            .inspect_err(|_| self.withdraw(std::slice::from_ref(message)))
            .map(Some)
    }

    /// As `append_batch`: only the last record appended carries a waiter.
    fn append_batch_unique(
        &self,
        messages: &[Arc<EMessage>],
    ) -> Result<(WalCommit, Vec<bool>), WalError> {
        for m in messages {
            self.check_size(m)?;
        }
        self.check_working()?;
        let appended: Vec<bool> = messages
            .iter()
            .map(|m| !self.in_backlog(&m.id) && self.index.put_new(m))
            .collect();
        let last = appended.iter().rposition(|a| *a);
        let mut commit = WalCommit::durable();
        for (i, m) in messages.iter().enumerate() {
            if !appended[i] {
                continue;
            }
            let sent = if Some(i) == last {
                self.send_durable(Entry::Append(m.clone()))
                    .map(|c| commit = c)
            } else {
                self.send(Entry::Append(m.clone()), None)
            };
            if let Err(e) = sent {
                let ours: Vec<Arc<EMessage>> = messages
                    .iter()
                    .zip(&appended)
                    .filter(|(_, a)| **a)
                    .map(|(m, _)| m.clone())
                    .collect();
                self.withdraw(&ours);
                return Err(e);
            }
        }
        Ok((commit, appended))
    }

    async fn recent_completions(
        &self,
        since: SystemTime,
    ) -> Result<Vec<(String, SystemTime)>, WalError> {
        let (reply, answer) = flume::bounded(1);
        self.op(WriterOp::Completions { since, reply })?;
        answer.recv_async().await.map_err(|_| self.refused())
    }

    fn retry(&self, message: &Arc<EMessage>) -> Result<(), WalError> {
        self.check_size(message)?;
        self.warm(&message.id)?;
        self.index.retry(message)?;
        self.send(Entry::Retry(message.clone()), None)
    }

    fn fail(
        &self,
        message: &Arc<EMessage>,
        reason: &DeadReason,
        handlers: &[String],
    ) -> Result<(), WalError> {
        // A reason's text (a panic message, say) is not bounded by anyone; keep the record
        // within the limit the log was promised.
        let names: usize = handlers.iter().map(|h| 4 + h.len()).sum();
        let room = self
            .max_record_bytes
            .saturating_sub(message_body_bound(message) + 8 + names)
            .min(MAX_REASON_BYTES);
        let reason = match reason {
            DeadReason::Other(text) | DeadReason::UnknownWorker(text) if text.len() > room => {
                let mut cut = room;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                let cut_text = format!("{}…", &text[..cut]);
                match reason {
                    DeadReason::UnknownWorker(_) => DeadReason::UnknownWorker(cut_text),
                    _ => DeadReason::Other(cut_text),
                }
            }
            other => other.clone(),
        };
        self.warm(&message.id)?;
        self.index.fail(message, &reason, handlers)?;
        self.send(
            Entry::Failed {
                message: message.clone(),
                reason,
                died_at: SystemTime::now(),
                handlers: handlers.to_vec(),
            },
            None,
        )
    }

    fn cancel(&self, id: &str) -> Result<Option<WalCommit>, WalError> {
        self.warm(id)?;
        match self.index.cancel_record(id) {
            Some(message) => Ok(Some(
                self.send_durable(Entry::Cancel(RecordId::Message(message)))?,
            )),
            None => Ok(None),
        }
    }

    /// The records held in memory, and every one of the backlog read back (all of them at
    /// once: a replay of a large backlog uses [`pending_window`](Self::pending_window)).
    async fn pending(&self) -> Result<Vec<WalRecord>, WalError> {
        let mut records = self.index.pending().await?;
        let mut from = Some(0);
        while let Some(at) = from {
            let mut backlog = self.lock_backlog();
            let (picks, next) = backlog.window(at, READ_BACK_WINDOW);
            let read = read_back(&*self.fs, &self.dir, &picks, self.max_record_bytes)?;
            records.extend(self.take_in(&mut backlog, &picks, read, false)?);
            from = next;
        }
        Ok(records)
    }

    /// The first window holds every record held in memory, then up to `limit` of the
    /// backlog, oldest first; later ones up to `limit` of the backlog each. The backlog's
    /// messages are read back from the segments here and move into memory, where they stay
    /// until they complete. A record found damaged on the way is [`WalError::Corrupt`]
    /// (naming file and offset; the record stays, so a later call meets it again), or with
    /// [`skip_corrupt(true)`](PersistentWalBuilder::skip_corrupt) a warning, the record
    /// dropped and counted in [`PersistentWal::skipped_at_read_back`].
    async fn pending_window(&self, from: u64, limit: usize) -> Result<PendingWindow, WalError> {
        let mut records = if from == 0 {
            self.index.pending().await?
        } else {
            Vec::new()
        };
        if self.backlog_len.load(Ordering::Acquire) == 0 {
            return Ok(PendingWindow {
                records,
                next: None,
            });
        }
        let (picks, next) = self.lock_backlog().window(from, limit.max(1));
        // Read without the lock, so that the workers' state changes (which look at the
        // backlog for ids not in memory) never wait for the disk.
        let first = read_back(&*self.fs, &self.dir, &picks, self.max_record_bytes);
        let mut backlog = self.lock_backlog();
        // Meanwhile compaction may have moved some (and deleted their segment), or a state
        // change taken them in: read those again, under the lock.
        let now: Vec<(String, Slot)> = picks
            .iter()
            .filter_map(|(id, _)| backlog.get(id).map(|slot| (id.clone(), slot)))
            .collect();
        let unchanged =
            now.len() == picks.len() && now.iter().zip(&picks).all(|(a, b)| a.1.loc == b.1.loc);
        let read = match first {
            Ok(read) if unchanged => read,
            _ => read_back(&*self.fs, &self.dir, &now, self.max_record_bytes)?,
        };
        records.extend(self.take_in(&mut backlog, &now, read, true)?);
        Ok(PendingWindow { records, next })
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetterMessage>, WalError> {
        self.index.dead_letters().await
    }

    async fn take_dead_letter(&self, id: &str) -> Result<Option<DeadLetterMessage>, WalError> {
        let taken = self.index.take_dead_letter(id).await?;
        if taken.is_some() {
            self.send(Entry::Purge(RecordId::Text(id.into())), None)?;
        }
        Ok(taken)
    }

    async fn purge_dead_letters(&self) -> Result<usize, WalError> {
        let mut n = 0;
        for dead in self.index.dead_letters().await? {
            if self.take_dead_letter(&dead.message.id).await?.is_some() {
                n += 1;
            }
        }
        Ok(n)
    }

    async fn flush(&self) -> Result<(), WalError> {
        let (commit, done) = WalCommit::pending();
        self.op(WriterOp::Flush(done))?;
        commit.wait().await
    }

    fn stats(&self) -> WalStats {
        let index = self.index.stats();
        WalStats {
            disk_bytes: self.disk_bytes.load(Ordering::Relaxed),
            syncs: self.syncs.load(Ordering::Relaxed),
            live: index.live + self.backlog_len.load(Ordering::Acquire),
            failed: self.failure.is_set(),
            ..index
        }
    }

    /// What failed, once a write or sync has: the operation, the file and the operating
    /// system's reason. From then on every new record is refused ([`WalError::Failed`]).
    fn failure(&self) -> Option<String> {
        self.failure.cause().map(str::to_owned)
    }

    async fn wait_failure(&self) -> String {
        self.failure.wait().await
    }
}
