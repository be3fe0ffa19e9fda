//! The send path: admit a message (checks, `Arc`), append it to the WAL, then hand it to its
//! topic's queue or the scheduler. A send that is refused, times out or is dropped before its
//! message was queued withdraws the WAL record, so a refused message is never delivered.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::backend::queue::TrySendError;
use crate::backend::wal::{Wal, WalCommit};
use crate::bus::shared::BusShared;
use crate::constant::{MAX_ID_BYTES, SHUTDOWN, SYSTEM_PREFIX, TOPIC_DISCOVERY};
use crate::delivery::scheduler::{instant_for, Scheduled, SchedulerHandle};
use crate::delivery::topic_table::TopicEntry;
use crate::error::CoreError;
use crate::message::dead_letter::DeadLetterMessage;
use crate::message::emessage::EMessage;
use crate::message::id::MessageId;

impl BusShared {
    /// Checks a message against the system and readies it for its topic's queue.
    ///
    /// Synchronous on purpose: the message moves into its `Arc` here, before any send
    /// future is built, so the (large) `EMessage` is not copied from one future's state into
    /// the next on its way down. `public` refuses the `_system.` topics applications may not
    /// send to.
    #[inline]
    pub(crate) fn admit(
        &self,
        topic: &str,
        message: EMessage,
        public: bool,
    ) -> Result<(&Arc<TopicEntry>, Arc<EMessage>), CoreError> {
        // Of the system topics, applications may send requests: shutdown and discovery.
        if public
            && topic.starts_with(SYSTEM_PREFIX)
            && topic != SHUTDOWN
            && topic != TOPIC_DISCOVERY
        {
            return Err(CoreError::ReservedTopic(topic.to_owned()));
        }
        let entry = self.entry_for(topic)?;
        Ok((entry, prepare(entry, message)?))
    }

    /// The entry of a topic a send may go to now: refuses every send once shutdown began,
    /// and topics with no handler.
    #[inline]
    fn entry_for(&self, topic: &str) -> Result<&Arc<TopicEntry>, CoreError> {
        if !self.accepting.load(Ordering::Acquire) {
            return Err(CoreError::SystemShutdown);
        }
        match self.topics.get(topic) {
            Some(entry) => Ok(entry),
            None if topic.is_empty() => Err(CoreError::InvalidTopic {
                topic: String::new(),
                reason: "a topic name cannot be empty",
            }),
            None => Err(CoreError::NoHandler {
                topic: topic.to_owned(),
            }),
        }
    }

    /// Sends an admitted message: WAL append, then enqueue. A refused message leaves no
    /// record behind.
    pub(crate) async fn accept(
        &self,
        entry: &Arc<TopicEntry>,
        message: Arc<EMessage>,
        try_send: bool,
        timeout: Option<Duration>,
    ) -> Result<MessageId, CoreError> {
        // Checked again: the future may run well after it was made.
        if !self.accepting.load(Ordering::Acquire) {
            return Err(CoreError::SystemShutdown);
        }
        self.accept_core(entry, message, try_send, timeout).await
    }

    pub(crate) async fn accept_core(
        &self,
        entry: &Arc<TopicEntry>,
        message: Arc<EMessage>,
        try_send: bool,
        timeout: Option<Duration>,
    ) -> Result<MessageId, CoreError> {
        let id = MessageId::from(&message.id);
        let commit = self.wal.append(&message)?;
        self.in_flight.add();
        entry.counters.accepted();
        // The common case waits for nothing: the WAL answers at once (in memory, or
        // `SyncPolicy::Never`), the message is due, and its queue has room. It finishes
        // here, without an `.await`, so this future stays small; the waiting path, whose
        // timers and commits make a large state, is boxed and only built when needed.
        let (message, commit) = match commit {
            commit if commit.is_durable() && !due_later(&message) => {
                match entry.producer.try_send(message) {
                    Ok(()) => return Ok(id),
                    Err(TrySendError::Full(message)) => (message, commit),
                    Err(TrySendError::Failed(e)) => {
                        return Box::pin(self.refuse(entry, id, e.into(), None)).await
                    }
                }
            }
            commit => (message, commit),
        };
        Box::pin(self.accept_waiting(entry, message, commit, try_send, timeout, None)).await
    }

    /// Sends a dead letter again (its record becomes live under the same id). Should the send
    /// be refused, or dropped before the message is queued, the dead letter is put back as it
    /// was, so a replay loses nothing.
    pub(crate) async fn accept_replay(
        &self,
        dead: &DeadLetterMessage,
    ) -> Result<MessageId, CoreError> {
        let mut message = dead.message.clone();
        message.attempts = 0;
        message.deliver_at = None;
        let topic = message.topic.0.clone();
        let (entry, message) = self.admit(&topic, message, false)?;
        let commit = self.wal.append(&message)?;
        self.in_flight.add();
        entry.counters.accepted();
        self.accept_waiting(entry, message, commit, false, None, Some(dead))
            .await
    }

    /// The rest of an accepted send that has to wait: for durability, for its queue to have
    /// room, or until the deadline. `restore`: the dead letter to put back if the message is
    /// withdrawn (a replay).
    async fn accept_waiting(
        &self,
        entry: &Arc<TopicEntry>,
        message: Arc<EMessage>,
        commit: WalCommit,
        try_send: bool,
        timeout: Option<Duration>,
        restore: Option<&DeadLetterMessage>,
    ) -> Result<MessageId, CoreError> {
        let id = MessageId::from(&message.id);
        // A deadline is a timer, and timers need a runtime.
        if timeout.is_some() && tokio::runtime::Handle::try_current().is_err() {
            return self.refuse(entry, id, CoreError::NoRuntime, restore).await;
        }
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        // If the caller drops this future before the message is queued, withdraw it: the
        // caller never learned that it was accepted.
        let guard = WithdrawOnDrop {
            shared: self,
            entry,
            id,
            restore,
            armed: true,
        };
        let outcome = self
            .enqueue(entry, message, commit, try_send, deadline, timeout)
            .await;
        let id = guard.disarm();
        match outcome {
            Ok(()) => Ok(id),
            Err(e) => self.refuse(entry, id, e, restore).await,
        }
    }

    /// Accepts many messages for one topic with a single WAL commit, then queues them in
    /// order, waiting for room. Validation happens first: one invalid message refuses the
    /// whole batch before anything is written.
    pub(crate) async fn send_batch(
        &self,
        topic: &str,
        messages: Vec<EMessage>,
    ) -> Result<Vec<MessageId>, CoreError> {
        if topic.starts_with(SYSTEM_PREFIX) {
            return Err(CoreError::ReservedTopic(topic.to_owned()));
        }
        let entry = self.entry_for(topic)?;
        let batch = messages
            .into_iter()
            .map(|m| prepare(entry, m))
            .collect::<Result<Vec<_>, _>>()?;
        let ids: Vec<MessageId> = batch.iter().map(|m| MessageId::from(&m.id)).collect();
        let commit = self.wal.append_batch(&batch)?;
        for _ in &batch {
            self.in_flight.add();
            entry.counters.accepted();
        }
        // Dropped before the commit is durable, the batch is withdrawn whole (the caller never
        // learned it was accepted), as a single send is.
        let guard = BatchWithdraw {
            shared: self,
            entry,
            ids: &ids,
            armed: true,
        };
        let committed = commit.wait().await;
        guard.disarm();
        if let Err(e) = committed {
            for id in &ids {
                let _ = self
                    .refuse(entry, id.clone(), CoreError::SystemShutdown, None)
                    .await;
            }
            return Err(e.into());
        }
        // Committed: every message is accepted. Queue what fits now; the rest goes to a task
        // of its own, which a dropped call does not cancel.
        let now = SystemTime::now();
        let mut batch = batch.into_iter();
        let mut waiting = None;
        for message in batch.by_ref() {
            if let Some(full) = place_now(entry, &self.scheduler, message, now)? {
                waiting = Some(full);
                break;
            }
        }
        if let Some(first) = waiting {
            let rest: Vec<Arc<EMessage>> = std::iter::once(first).chain(batch).collect();
            let (entry, scheduler) = (entry.clone(), self.scheduler.clone());
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => runtime
                    .spawn(queue_all(entry, scheduler, rest))
                    .await
                    .map_err(|e| {
                        CoreError::Internal(format!("batch queueing task failed: {e}"))
                    })??,
                // No runtime to hand the rest to: queue it here (dropping the call now leaves
                // the unqueued rest in the WAL, for the next start).
                Err(_) => queue_all(entry, scheduler, rest).await?,
            }
        }
        Ok(ids)
    }

    /// Waits for the WAL commit, then hands the message to its queue (or the scheduler).
    async fn enqueue(
        &self,
        entry: &Arc<TopicEntry>,
        message: Arc<EMessage>,
        commit: WalCommit,
        try_send: bool,
        deadline: Option<tokio::time::Instant>,
        timeout: Option<Duration>,
    ) -> Result<(), CoreError> {
        let topic = entry.topic.as_str();
        match deadline {
            None => commit.wait().await?,
            Some(d) => tokio::time::timeout_at(d, commit.wait())
                .await
                .map_err(|_| timeout_error(topic, timeout))??,
        }
        if let Some(at) = message.deliver_at {
            if at > SystemTime::now() {
                self.scheduler.schedule(
                    instant_for(at),
                    Scheduled::Message {
                        entry: entry.clone(),
                        message,
                    },
                );
                return Ok(());
            }
        }
        match entry.producer.try_send(message) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) if try_send => Err(CoreError::QueueFull {
                topic: topic.to_owned(),
            }),
            Err(TrySendError::Full(message)) => match deadline {
                None => Ok(entry.producer.send(message).await?),
                Some(d) => tokio::time::timeout_at(d, entry.producer.send(message))
                    .await
                    .map_err(|_| timeout_error(topic, timeout))?
                    .map_err(CoreError::from),
            },
            Err(TrySendError::Failed(e)) => Err(e.into()),
        }
    }

    /// Withdraws a message whose send failed. If a handler already has it, the send did
    /// succeed after all, and the caller must be told so.
    async fn refuse(
        &self,
        entry: &TopicEntry,
        id: MessageId,
        error: CoreError,
        restore: Option<&DeadLetterMessage>,
    ) -> Result<MessageId, CoreError> {
        match self.wal.cancel(&id) {
            Ok(Some(commit)) => {
                self.in_flight.done();
                // Refused: it does not count as sent.
                entry.counters.refused();
                self.restore_dead_letter(restore);
                if let Err(e) = commit.wait().await {
                    tracing::error!(target: crate::constant::target::DELIVERY, %id, error = %e, "the withdrawal of a refused message is not durable; it may be delivered after a crash");
                }
                Err(error)
            }
            Ok(None) => Ok(id),
            Err(e) => {
                tracing::error!(target: crate::constant::target::DELIVERY, %id, error = %e, "could not withdraw a refused message from the WAL; it may still be delivered");
                Err(error)
            }
        }
    }
}

/// Whether the message is to be delivered later than now.
#[inline]
fn due_later(message: &EMessage) -> bool {
    message.deliver_at.is_some_and(|at| at > SystemTime::now())
}

/// Readies a message for its topic's queue: the route's topic, a valid `to_worker`, the
/// first delivery's `attempts`, and the provenance of the message being handled, if any.
#[inline]
pub(crate) fn prepare(
    entry: &TopicEntry,
    mut message: EMessage,
) -> Result<Arc<EMessage>, CoreError> {
    check_id(&message.id)?;
    if message.topic != entry.topic {
        message.topic = entry.topic.clone();
    }
    if let Some(worker) = &message.to_worker {
        if entry.worker_index(worker).is_none() {
            return Err(CoreError::UnknownWorker {
                topic: entry.topic.0.clone(),
                worker: worker.clone(),
            });
        }
    }
    if message.attempts == 0 {
        message.attempts = 1;
    }
    crate::message::context::inherit(&mut message);
    Ok(Arc::new(message))
}

/// Queues `messages` in order, waiting for room; delayed ones go to the scheduler.
async fn queue_all(
    entry: Arc<TopicEntry>,
    scheduler: SchedulerHandle,
    messages: Vec<Arc<EMessage>>,
) -> Result<(), CoreError> {
    let now = SystemTime::now();
    for message in messages {
        if let Some(full) = place_now(&entry, &scheduler, message, now)? {
            entry.producer.send(full).await?;
        }
    }
    Ok(())
}

/// Hands an accepted message to the scheduler (if it is due after `now`) or its queue,
/// without waiting; gives it back if the queue is full.
fn place_now(
    entry: &Arc<TopicEntry>,
    scheduler: &SchedulerHandle,
    message: Arc<EMessage>,
    now: SystemTime,
) -> Result<Option<Arc<EMessage>>, CoreError> {
    match message.deliver_at {
        Some(at) if at > now => {
            scheduler.schedule(
                instant_for(at),
                Scheduled::Message {
                    entry: entry.clone(),
                    message,
                },
            );
            Ok(None)
        }
        _ => match entry.producer.try_send(message) {
            Ok(()) => Ok(None),
            Err(TrySendError::Full(message)) => Ok(Some(message)),
            Err(TrySendError::Failed(e)) => Err(e.into()),
        },
    }
}

/// Withdraws a batch whose commit the caller stopped waiting for.
struct BatchWithdraw<'a> {
    shared: &'a BusShared,
    entry: &'a TopicEntry,
    ids: &'a [MessageId],
    armed: bool,
}

impl BatchWithdraw<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for BatchWithdraw<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        for id in self.ids {
            match self.shared.wal.cancel(id) {
                Ok(Some(_commit)) => {
                    self.shared.in_flight.done();
                    self.entry.counters.refused();
                }
                Ok(None) => {}
                Err(e) => tracing::error!(%id, error = %e, "could not withdraw a dropped batch"),
            }
        }
    }
}

/// Withdraws an appended message if the send future is dropped before it finished.
struct WithdrawOnDrop<'a> {
    shared: &'a BusShared,
    entry: &'a TopicEntry,
    id: MessageId,
    /// The dead letter a withdrawn replay puts back.
    restore: Option<&'a DeadLetterMessage>,
    armed: bool,
}

impl WithdrawOnDrop<'_> {
    /// The send finished either way: nothing to withdraw on drop. Hands the id back.
    fn disarm(mut self) -> MessageId {
        self.armed = false;
        std::mem::replace(&mut self.id, MessageId::from(""))
    }
}

impl Drop for WithdrawOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        match self.shared.wal.cancel(&self.id) {
            Ok(Some(_commit)) => {
                self.shared.in_flight.done();
                self.entry.counters.refused();
                self.shared.restore_dead_letter(self.restore);
            }
            Ok(None) => {} // a handler already has it: it will be finished normally
            Err(e) => {
                tracing::error!(target: crate::constant::target::DELIVERY, id = %self.id, error = %e, "could not withdraw a dropped send")
            }
        }
    }
}

impl BusShared {
    /// Puts a dead letter back after its replay was withdrawn, as it was but for its time.
    fn restore_dead_letter(&self, dead: Option<&DeadLetterMessage>) {
        let Some(dead) = dead else { return };
        let message = Arc::new(dead.message.clone());
        if let Err(e) = self.wal.fail(&message, &dead.reason) {
            tracing::error!(id = %message.id, error = %e, "could not put back a dead letter whose replay was withdrawn");
        }
    }
}

fn timeout_error(topic: &str, timeout: Option<Duration>) -> CoreError {
    CoreError::Timeout {
        operation: format!("send to `{topic}`"),
        after: timeout.unwrap_or_default(),
    }
}

/// Refuses an empty id, or one longer than [`MAX_ID_BYTES`].
#[inline]
fn check_id(id: &str) -> Result<(), CoreError> {
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
