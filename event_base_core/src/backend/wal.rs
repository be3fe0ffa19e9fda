//! The write-ahead log contract: [`Wal`], [`WalRecord`], [`WalRecordState`], [`PendingWindow`].
//!
//! Every accepted message is appended to the WAL *before* it is queued, and its record leaves
//! `Processing` only through the handler's outcome (or through replay after a crash). That
//! ordering is what turns a channel into an at-least-once bus.
//!
//! ```text
//!   send ──append──▶ Pending ──begin──▶ Processing ──complete──▶ Complete (dropped)
//!                       ▲                    │
//!                       └──────retry─────────┤
//!                                            └──fail──▶ Failed (dead letter, kept)
//!   refused send (queue full, timeout): Pending ──cancel──▶ gone
//! ```
//!
//! The per-message methods (`append`, `begin`, `complete`, `retry`, `fail`, `cancel`) are
//! synchronous so the hot path pays no boxed future: backends that need I/O hand the work to
//! their own writer and return at once. Only `append` may need to wait for durability; it
//! returns a [`WalCommit`] that the sender awaits (a backend with `fsync` per append resolves it
//! after the `fsync` that covers the record).

use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::WalError;
use crate::message::ack::DeadReason;
use crate::message::dead_letter::DeadLetterMessage;
use crate::message::emessage::EMessage;

/// Where a message is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WalRecordState {
    /// Accepted, not yet handed to a handler (or waiting for a retry / its `deliver_at`).
    Pending,
    /// A handler has it now. Replayed after a crash: the handler may not have finished.
    Processing,
    /// Done; never delivered again. Backends may drop such records at once.
    Complete,
    /// A dead letter.
    Failed,
}

/// One message and its state, as the WAL holds it.
#[derive(Debug, Clone)]
pub struct WalRecord {
    /// The message as of its latest delivery (its `attempts` is current).
    pub message: Arc<EMessage>,
    /// Its state.
    pub state: WalRecordState,
    /// When the record was last written (append, retry, fail). Moving to `Processing` does
    /// not update it, to keep the clock off the per-message path.
    pub updated_at: SystemTime,
    /// For `Failed` records: why.
    pub dead_reason: Option<DeadReason>,
    /// For `Failed` records: the handlers whose copy died ([`DeadLetterMessage::handlers`]).
    pub dead_handlers: Vec<String>,
}

/// One window of the start-up backlog: what [`Wal::pending_window`] answers.
#[derive(Debug, Clone, Default)]
pub struct PendingWindow {
    /// Records of the window, oldest first (in the order the log holds them).
    pub records: Vec<WalRecord>,
    /// Where the next window starts (pass it as `from`); `None`: this was the last one.
    pub next: Option<u64>,
}

/// A recurring schedule as a WAL keeps it (`EventBus::schedule`): what
/// [`Wal::stored_schedules`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSchedule {
    /// Its name, unique in the WAL.
    pub name: String,
    /// Its definition as the bus wrote it with [`Wal::put_schedule`]: opaque to the WAL.
    pub definition: Vec<u8>,
    /// The latest slot fired ([`Wal::claim_slot`]), in milliseconds since the Unix epoch;
    /// `None` before the first.
    pub last_slot: Option<u64>,
}

/// Counters a WAL reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalStats {
    /// Records appended since open.
    pub appended: u64,
    /// Records completed since open.
    pub completed: u64,
    /// Records currently `Pending` or `Processing`.
    pub live: u64,
    /// Dead letters currently held.
    pub dead: u64,
    /// Bytes on disk (0 for in-memory backends).
    pub disk_bytes: u64,
    /// `fdatasync` calls made since open (0 for in-memory backends): for a file WAL, one
    /// per group commit, plus those of idle syncs, sealed segments, compaction and
    /// `flush`. Fewer syncs than appended records is group commit at work.
    #[serde(default)]
    pub syncs: u64,
    /// Whether the WAL has failed (a write or sync failed) and refuses every new record
    /// ([`WalError::Failed`]); [`Wal::failure`] says why. Restart the process once the
    /// cause is fixed: the files hold everything the WAL acknowledged.
    #[serde(default)]
    pub failed: bool,
}

/// Resolves when an appended record is durable: what [`Wal::append`] answers.
///
/// A backend makes one with [`WalCommit::durable`] (the record is already as durable as the
/// backend makes it), [`WalCommit::pending`] (it becomes durable when the backend answers
/// through the [`WalCommitter`]), or [`WalCommit::all`] (a batch). The bus waits with
/// [`wait`](Self::wait).
///
/// ```
/// # async fn demo() -> Result<(), event_base_core::WalError> {
/// use event_base_core::backend::WalCommit;
/// let (commit, committer) = WalCommit::pending();
/// assert!(!commit.is_durable());
/// committer.answer(Ok(())); // e.g. from the writer thread, after its fsync
/// commit.wait().await?;
/// assert!(WalCommit::durable().is_durable());
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a commit says when the record is durable; wait for it, or drop it to not care"]
pub struct WalCommit(Commit);

#[derive(Debug)]
enum Commit {
    Durable,
    Waiting(tokio::sync::oneshot::Receiver<Result<(), WalError>>),
    All(Vec<WalCommit>),
}

/// Whether every commit of a batch is durable: apart from [`WalCommit::is_durable`], which
/// every send asks and is inlined, because only this part recurses.
fn all_durable(commits: &[WalCommit]) -> bool {
    commits.iter().all(WalCommit::is_durable)
}

/// The backend's end of a [`WalCommit::pending`]: answer once the record is durable (or
/// will never be). Dropped without an answer, the waiting side gets [`WalError::Closed`].
#[derive(Debug)]
pub struct WalCommitter(tokio::sync::oneshot::Sender<Result<(), WalError>>);

impl WalCommitter {
    /// Tells the waiting side how the write ended.
    pub fn answer(self, result: Result<(), WalError>) {
        let _ = self.0.send(result);
    }
}

impl WalCommit {
    /// A record already as durable as the backend makes it.
    pub fn durable() -> WalCommit {
        WalCommit(Commit::Durable)
    }

    /// A record that becomes durable when the returned [`WalCommitter`] answers.
    pub fn pending() -> (WalCommit, WalCommitter) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (WalCommit(Commit::Waiting(rx)), WalCommitter(tx))
    }

    /// Durable once every one of `commits` is.
    pub fn all(commits: Vec<WalCommit>) -> WalCommit {
        WalCommit(Commit::All(commits))
    }

    /// Whether there is nothing to wait for.
    #[inline]
    pub fn is_durable(&self) -> bool {
        match &self.0 {
            Commit::Durable => true,
            Commit::Waiting(_) => false,
            Commit::All(commits) => all_durable(commits),
        }
    }

    /// Waits until the record (or every record of a batch) is durable.
    pub async fn wait(self) -> Result<(), WalError> {
        let mut stack = vec![self];
        while let Some(commit) = stack.pop() {
            match commit.0 {
                Commit::Durable => {}
                Commit::Waiting(rx) => match rx.await {
                    Ok(r) => r?,
                    Err(_) => {
                        return Err(WalError::Closed(
                            "the writer dropped the commit without answering".into(),
                        ))
                    }
                },
                Commit::All(commits) => stack.extend(commits.into_iter().rev()),
            }
        }
        Ok(())
    }
}

/// A write-ahead log backend.
///
/// Implementations: `MemoryWal` and `PersistentWal` in `event_base_wal`. All methods must be
/// safe to call from many tasks at once.
#[async_trait]
pub trait Wal: Send + Sync + 'static {
    /// Records a newly accepted message as `Pending`.
    fn append(&self, message: &Arc<EMessage>) -> Result<WalCommit, WalError>;

    /// Records several newly accepted messages as `Pending` with one commit. Backends with a
    /// single ordered writer override it so the batch costs one durable write; the default
    /// appends one by one and waits for all.
    fn append_batch(&self, messages: &[Arc<EMessage>]) -> Result<WalCommit, WalError> {
        let mut commits = Vec::with_capacity(messages.len());
        for m in messages {
            commits.push(self.append(m)?);
        }
        Ok(WalCommit::all(commits))
    }

    /// Records a newly accepted message as `Pending`, unless the WAL holds a record with its
    /// id (pending, processing, or a dead letter): then nothing is written and the answer is
    /// `Ok(None)`. The check and the append are one step, so of two concurrent calls with one
    /// id exactly one appends. Idempotent sends are built on it.
    fn append_unique(&self, message: &Arc<EMessage>) -> Result<Option<WalCommit>, WalError>;

    /// [`append_unique`](Self::append_unique) for several messages with one commit; the
    /// flags say which were appended. The default calls `append_unique` for each and waits
    /// for all; backends with a single ordered writer override it so the batch costs one
    /// durable write.
    fn append_batch_unique(
        &self,
        messages: &[Arc<EMessage>],
    ) -> Result<(WalCommit, Vec<bool>), WalError> {
        let mut commits = Vec::with_capacity(messages.len());
        let mut appended = Vec::with_capacity(messages.len());
        for m in messages {
            let commit = self.append_unique(m)?;
            appended.push(commit.is_some());
            commits.extend(commit);
        }
        Ok((WalCommit::all(commits), appended))
    }

    /// Messages completed at or after `since`, with their completion times, so that a bus
    /// started on this WAL can go on refusing their ids as duplicates (the dedup window). A
    /// backend that does not keep completions answers none (the default).
    async fn recent_completions(
        &self,
        since: SystemTime,
    ) -> Result<Vec<(String, SystemTime)>, WalError> {
        let _ = since;
        Ok(Vec::new())
    }

    /// Marks the message `Processing` before a handler runs. Returns `false` if the record is
    /// gone or `Complete` (the send was withdrawn, or the message is finished): the caller must
    /// then not deliver it. A dead letter (`Failed`) answers `true` and keeps its state, so the
    /// remaining copies of a broadcast whose other copy died still run.
    fn begin(&self, id: &str) -> Result<bool, WalError>;

    /// Marks the message `Complete`. Need not be durable at once: a lost completion only
    /// causes a redelivery, which at-least-once allows.
    fn complete(&self, id: &str) -> Result<(), WalError>;

    /// [`begin`](Self::begin) for the messages of one batch (a batch handler's call), with one
    /// flag per id, in order. The default calls `begin` for each; a backend with a single
    /// ordered writer overrides it to hand the writer the batch at once.
    fn begin_batch(&self, ids: &[&str]) -> Result<Vec<bool>, WalError> {
        ids.iter().map(|id| self.begin(id)).collect()
    }

    /// [`complete`](Self::complete) for the messages of one batch, recorded together. The
    /// default calls `complete` for each; a backend with a single ordered writer overrides it
    /// so the batch costs one write.
    fn complete_batch(&self, ids: &[&str]) -> Result<(), WalError> {
        for id in ids {
            self.complete(id)?;
        }
        Ok(())
    }

    /// Marks message `id` `Complete` and records `messages` as newly accepted (`Pending`), as
    /// one step: a handler's completion and the messages its outbox held. Backends that can
    /// write both in one durable record override it, so that after a crash either all of it
    /// is in the log or none; the default appends the messages, then completes (a crash
    /// between the two can leave the messages without the completion: the handler then runs
    /// again and sends them again, a duplicate, never a loss).
    fn complete_with(&self, id: &str, messages: &[Arc<EMessage>]) -> Result<WalCommit, WalError> {
        let mut commits = Vec::with_capacity(messages.len());
        for m in messages {
            commits.push(self.append(m)?);
        }
        self.complete(id)?;
        Ok(WalCommit::all(commits))
    }

    /// Puts the message back to `Pending` with its new `attempts` / `deliver_at`.
    fn retry(&self, message: &Arc<EMessage>) -> Result<(), WalError>;

    /// Marks the message `Failed` (a dead letter) with `reason`. `handlers` names the
    /// handlers whose copy died (empty: it reached none); the backend keeps them with the dead
    /// letter ([`DeadLetterMessage::handlers`]), so that a replay goes to those handlers only.
    fn fail(
        &self,
        message: &Arc<EMessage>,
        reason: &DeadReason,
        handlers: &[String],
    ) -> Result<(), WalError>;

    /// Removes a `Pending` record whose send was refused. Returns `None` if the record is no
    /// longer `Pending` (a handler already has it: the send must then report success), else a
    /// commit that resolves once the withdrawal is as durable as an append, so that a crash
    /// cannot bring a refused message back.
    fn cancel(&self, id: &str) -> Result<Option<WalCommit>, WalError>;

    /// Every `Pending` and `Processing` record, for replay at start.
    async fn pending(&self) -> Result<Vec<WalRecord>, WalError>;

    /// The records [`pending`](Self::pending) answers, a window at a time, for a replay
    /// that holds no more than `limit` of them at once: start with `from = 0`, then pass
    /// [`PendingWindow::next`] until it is `None`. Each record is in exactly one window.
    /// A backend that keeps its backlog on disk reads the messages back only here (and in
    /// `pending`), so a backlog larger than memory can be replayed as the queues drain.
    ///
    /// The default answers everything `pending` does in the first window (`limit` is a
    /// hint, not a bound) and nothing after it.
    async fn pending_window(&self, from: u64, limit: usize) -> Result<PendingWindow, WalError> {
        let _ = limit;
        if from != 0 {
            return Ok(PendingWindow::default());
        }
        Ok(PendingWindow {
            records: self.pending().await?,
            next: None,
        })
    }

    /// Every dead letter.
    async fn dead_letters(&self) -> Result<Vec<DeadLetterMessage>, WalError>;

    /// Removes one dead letter and returns it.
    async fn take_dead_letter(&self, id: &str) -> Result<Option<DeadLetterMessage>, WalError>;

    /// Removes every dead letter; returns how many.
    async fn purge_dead_letters(&self) -> Result<usize, WalError>;

    /// Waits until everything written so far is durable.
    async fn flush(&self) -> Result<(), WalError>;

    /// Counters.
    fn stats(&self) -> WalStats;

    /// Why the WAL failed, once a write or sync of it has (then [`WalStats::failed`] is set
    /// and every new record is refused with [`WalError::Failed`]); `None` while it works.
    /// Backends that cannot fail this way answer `None` (the default).
    fn failure(&self) -> Option<String> {
        None
    }

    /// Resolves when the WAL fails (at once if it has), with the cause
    /// [`failure`](Self::failure) then gives: for health checks that must not poll. Backends
    /// that cannot fail this way never resolve (the default).
    async fn wait_failure(&self) -> String {
        std::future::pending().await
    }

    /// Keeps the recurring schedule `name` (its `definition`, opaque bytes the bus writes),
    /// replacing the definition of one of that name and keeping its last slot. Durable when
    /// it returns, in a WAL that outlives the process. The default keeps nothing (a WAL
    /// without a schedule store: schedules last as long as the bus that registered them).
    async fn put_schedule(&self, name: &str, definition: &[u8]) -> Result<(), WalError> {
        let _ = (name, definition);
        Ok(())
    }

    /// Forgets the schedule `name`; `true` if it was kept. The default keeps none.
    async fn remove_schedule(&self, name: &str) -> Result<bool, WalError> {
        let _ = name;
        Ok(false)
    }

    /// Every schedule kept, for a bus to take them up at start. The default keeps none.
    async fn stored_schedules(&self) -> Result<Vec<StoredSchedule>, WalError> {
        Ok(Vec::new())
    }

    /// Claims slot `slot` (milliseconds since the Unix epoch) of schedule `name` for firing:
    /// `true`, and the slot is its last slot now, if it is later than its last slot; `false`
    /// if that slot, or a later one, was claimed already (by this bus before a restart, or by
    /// another bus sharing this store), or if no schedule `name` is kept. Atomic: of several
    /// buses claiming the same slot, one gets `true`. The default (no schedule store) answers
    /// `true`: the dedup window, by the firing's message id, is then the only guard.
    async fn claim_slot(&self, name: &str, slot: u64) -> Result<bool, WalError> {
        let _ = (name, slot);
        Ok(true)
    }

    /// Whether this WAL keeps records of its own (the default), rather than being a view of
    /// the queues' entries (`RedisWal`, whose `complete` does nothing). On shared queues the
    /// sender completes a record of its own once the backend confirmed every copy of its
    /// message; a WAL that answers `false` is spared that.
    fn keeps_own_records(&self) -> bool {
        true
    }
}

#[async_trait]
impl<W: Wal + ?Sized> Wal for Arc<W> {
    fn append(&self, message: &Arc<EMessage>) -> Result<WalCommit, WalError> {
        (**self).append(message)
    }
    fn append_batch(&self, messages: &[Arc<EMessage>]) -> Result<WalCommit, WalError> {
        (**self).append_batch(messages)
    }
    fn append_unique(&self, message: &Arc<EMessage>) -> Result<Option<WalCommit>, WalError> {
        (**self).append_unique(message)
    }
    fn append_batch_unique(
        &self,
        messages: &[Arc<EMessage>],
    ) -> Result<(WalCommit, Vec<bool>), WalError> {
        (**self).append_batch_unique(messages)
    }
    async fn recent_completions(
        &self,
        since: SystemTime,
    ) -> Result<Vec<(String, SystemTime)>, WalError> {
        (**self).recent_completions(since).await
    }
    fn begin(&self, id: &str) -> Result<bool, WalError> {
        (**self).begin(id)
    }
    fn complete(&self, id: &str) -> Result<(), WalError> {
        (**self).complete(id)
    }
    fn begin_batch(&self, ids: &[&str]) -> Result<Vec<bool>, WalError> {
        (**self).begin_batch(ids)
    }
    fn complete_batch(&self, ids: &[&str]) -> Result<(), WalError> {
        (**self).complete_batch(ids)
    }
    fn retry(&self, message: &Arc<EMessage>) -> Result<(), WalError> {
        (**self).retry(message)
    }
    fn complete_with(&self, id: &str, messages: &[Arc<EMessage>]) -> Result<WalCommit, WalError> {
        (**self).complete_with(id, messages)
    }
    fn fail(
        &self,
        message: &Arc<EMessage>,
        reason: &DeadReason,
        handlers: &[String],
    ) -> Result<(), WalError> {
        (**self).fail(message, reason, handlers)
    }
    fn cancel(&self, id: &str) -> Result<Option<WalCommit>, WalError> {
        (**self).cancel(id)
    }
    async fn pending(&self) -> Result<Vec<WalRecord>, WalError> {
        (**self).pending().await
    }
    async fn pending_window(&self, from: u64, limit: usize) -> Result<PendingWindow, WalError> {
        (**self).pending_window(from, limit).await
    }
    async fn dead_letters(&self) -> Result<Vec<DeadLetterMessage>, WalError> {
        (**self).dead_letters().await
    }
    async fn take_dead_letter(&self, id: &str) -> Result<Option<DeadLetterMessage>, WalError> {
        (**self).take_dead_letter(id).await
    }
    async fn purge_dead_letters(&self) -> Result<usize, WalError> {
        (**self).purge_dead_letters().await
    }
    async fn flush(&self) -> Result<(), WalError> {
        (**self).flush().await
    }
    fn stats(&self) -> WalStats {
        (**self).stats()
    }
    fn failure(&self) -> Option<String> {
        (**self).failure()
    }
    async fn wait_failure(&self) -> String {
        (**self).wait_failure().await
    }
    fn keeps_own_records(&self) -> bool {
        (**self).keeps_own_records()
    }
    async fn put_schedule(&self, name: &str, definition: &[u8]) -> Result<(), WalError> {
        (**self).put_schedule(name, definition).await
    }
    async fn remove_schedule(&self, name: &str) -> Result<bool, WalError> {
        (**self).remove_schedule(name).await
    }
    async fn stored_schedules(&self) -> Result<Vec<StoredSchedule>, WalError> {
        (**self).stored_schedules().await
    }
    async fn claim_slot(&self, name: &str, slot: u64) -> Result<bool, WalError> {
        (**self).claim_slot(name, slot).await
    }
}
