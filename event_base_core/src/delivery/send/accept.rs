//! The send path: admit a message (checks, `Arc`), append it to the WAL, then hand it to the
//! queue of each of its topic's handlers (or the scheduler). A send that is refused, times out
//! or is dropped before its message was queued withdraws the WAL record, so a refused message
//! is never delivered.
//!
//! A topic with one handler (the common case) takes the short path: one queue, no fan-out
//! bookkeeping. With several, the message is one WAL record and a copy per handler; its
//! fan-out is opened before the first copy is queued, so that no copy can finish it early.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::backend::queue::TrySendError;
use crate::backend::wal::{Wal, WalCommit};
use crate::constant::{MAX_WAIT, SHUTDOWN, SYSTEM_PREFIX, TOPIC_DISCOVERY};
use crate::delivery::hub::DeliveryHub;
use crate::delivery::log::log_queue::LogAppender;
use crate::delivery::remote::elsewhere::{
    copy_released, push_all_elsewhere, queue_elsewhere, send_waiting, RemoteSub,
};
use crate::delivery::send::scheduler::{Scheduled, SchedulerHandle};
use crate::delivery::subscription::job::is_plain;
use crate::delivery::subscription::key_order::ordering_key;
use crate::delivery::subscription::topic_table::{Route, TopicEntry};
use crate::error::CoreError;
use crate::message::dead_letter::DeadLetterMessage;
use crate::message::emessage::EMessage;
use crate::message::id::MessageId;
use crate::observe::topic_counters::TopicCounters;

impl DeliveryHub {
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
    ) -> Result<(&Arc<Route>, Arc<EMessage>), CoreError> {
        // Of the system topics, applications may send requests: shutdown and discovery.
        if public
            && topic.starts_with(SYSTEM_PREFIX)
            && topic != SHUTDOWN
            && topic != TOPIC_DISCOVERY
        {
            return Err(CoreError::ReservedTopic(topic.to_owned()));
        }
        let route = match self.route_for(topic) {
            Ok(route) => route,
            // Perhaps handled by another process (a shared backend's registry).
            Err(CoreError::NoHandler { topic }) if self.remote.is_some() => {
                return self.admit_elsewhere(topic, message)
            }
            Err(e) => return Err(e),
        };
        if message.to_worker.is_some() && self.remote.is_some() {
            // Perhaps a worker of another node (`<node id>/<worker>`).
            return self.admit_to_worker(topic, route, message);
        }
        // In a finished message's allocation when the pool has one (`message_pool.rs`).
        Ok((route, prepare_into(route, message, |m| self.pool.wrap(m))?))
    }

    /// The route of a topic a send may go to now: refuses every send once shutdown began,
    /// and topics with no handler.
    #[inline]
    fn route_for(&self, topic: &str) -> Result<&Arc<Route>, CoreError> {
        if !self.accepting.load(Ordering::Acquire) {
            return Err(CoreError::SystemShutdown);
        }
        match self.topics.get(topic) {
            Some(route) => Ok(route),
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
        route: &Route,
        message: Arc<EMessage>,
        try_send: bool,
        timeout: Option<Duration>,
    ) -> Result<MessageId, CoreError> {
        // The send counts as in flight *before* it checks that the bus still accepts, so a
        // shutdown that stops accepting meanwhile either sees it (and waits for it) or is
        // seen by it (and the send is refused): the two cannot both miss each other. (Both
        // sides use sequentially consistent operations for this.) An accepted message then
        // holds its own count; this one is released when the send returns or is dropped.
        self.in_flight.add();
        let _sending = Sending(&self.in_flight);
        // Checked again: the future may run well after it was made.
        if !self.accepting.load(Ordering::SeqCst) {
            return Err(CoreError::SystemShutdown);
        }
        // Before the WAL append: a timeout too long for the clock is none (`MAX_WAIT`).
        let timeout = timeout.filter(|t| *t < MAX_WAIT);
        // Sent by a handler with an outbox, to its own bus: held until the handler acks.
        let message = match self.outboxes {
            false => message,
            true => match crate::message::context::hold(message, self.as_ptr()) {
                Ok(id) => {
                    self.dedup.held(&id);
                    return Ok(id);
                }
                Err(message) => message,
            },
        };
        if route.elsewhere.any() && !route.subs.is_empty() && message.to_worker.is_none() {
            // Handlers only other processes run get their copies before the send answers.
            return Box::pin(self.accept_mixed(route, message, try_send, timeout)).await;
        }
        self.accept_core(route, message, try_send, timeout).await
    }

    /// A send to a topic with handlers here and handlers only other processes run: the WAL
    /// record and the dedup window first (a duplicate goes to no handler), then a copy for
    /// each handler elsewhere and one for each local handler, each waited for as a local copy
    /// is (`delivery/remote/remote_routes.rs`). The copies elsewhere are queued first, so that a local
    /// handler cannot finish the message before they are (on Redis, one writer keeps them
    /// in order) and a `try_send` they do not fit leaves no local copy behind.
    async fn accept_mixed(
        &self,
        route: &Route,
        message: Arc<EMessage>,
        try_send: bool,
        timeout: Option<Duration>,
    ) -> Result<MessageId, CoreError> {
        let targets = targets(route, &message);
        let commit = match self.append_new(&message)? {
            Appended::New(commit) => commit,
            Appended::Duplicate(withdrawal) => {
                return self.duplicate(route, message, withdrawal).await
            }
        };
        self.accepted(route, targets, &message);
        let elsewhere = route.elsewhere.subs();
        self.accept_waiting(
            route, targets, &elsewhere, message, commit, try_send, timeout, None, 0,
        )
        .await
    }

    /// This bus, as the message context compares it (an outbox holds sends to its own bus).
    fn as_ptr(&self) -> *const () {
        self as *const DeliveryHub as *const ()
    }

    pub(crate) async fn accept_core(
        &self,
        route: &Route,
        message: Arc<EMessage>,
        try_send: bool,
        timeout: Option<Duration>,
    ) -> Result<MessageId, CoreError> {
        let Some(entry) = route.single() else {
            return self.accept_copies(route, message, try_send, timeout).await;
        };
        let commit = match self.append_new(&message)? {
            Appended::New(commit) => commit,
            Appended::Duplicate(withdrawal) => {
                return Box::pin(self.duplicate(route, message, withdrawal)).await
            }
        };
        let id = MessageId::from(&message.id);
        // A shared queue's message counts where it is claimed (`TopicEntry::claim_counted`).
        if !entry.claim_counted {
            self.in_flight.add();
        }
        entry.counters.accepted();
        // Should the queue backend panic in `try_send`, the message is withdrawn (not left
        // in the WAL and in flight for ever); `accept_waiting` has a guard of its own.
        let unwinding = WithdrawOnUnwind {
            shared: self,
            route,
            targets: &route.subs,
            id: &id,
        };
        // The common case waits for nothing: the WAL answers at once (in memory, or
        // `SyncPolicy::Never`), the message is due, and its queue has room. It finishes
        // here, without an `.await`, so this future stays small; the waiting path, whose
        // timers and commits make a large state, is boxed and only built when needed.
        let (message, commit) = match commit {
            commit
                if commit.is_durable()
                    && (!due_later(&message) || entry.producer.keeps_delayed()) =>
            {
                let sent = entry.producer.try_send(message);
                unwinding.disarm();
                match sent {
                    Ok(()) if entry.claim_counted => {
                        self.complete_when_confirmed([id.as_str()]);
                        return Ok(id);
                    }
                    Ok(()) => return Ok(id),
                    Err(TrySendError::Full(message)) => (message, commit),
                    Err(TrySendError::Failed(e)) => {
                        return Box::pin(self.refuse(route, &route.subs, id, e.into(), None)).await
                    }
                }
            }
            commit => {
                unwinding.disarm();
                (message, commit)
            }
        };
        Box::pin(self.accept_waiting(
            route,
            &route.subs,
            &[],
            message,
            commit,
            try_send,
            timeout,
            None,
            0,
        ))
        .await
    }

    /// [`accept_core`](Self::accept_core) for a topic with several handlers here (a copy for
    /// each), or none (to the handlers elsewhere, if any).
    async fn accept_copies(
        &self,
        route: &Route,
        message: Arc<EMessage>,
        try_send: bool,
        timeout: Option<Duration>,
    ) -> Result<MessageId, CoreError> {
        if route.subs.is_empty() {
            // No handler in this process: to those elsewhere, if any.
            return Box::pin(self.accept_elsewhere(message, try_send, timeout)).await;
        }
        let targets = targets(route, &message);
        let commit = match self.append_new(&message)? {
            Appended::New(commit) => commit,
            Appended::Duplicate(withdrawal) => {
                return Box::pin(self.duplicate(route, message, withdrawal)).await
            }
        };
        // A plain message due now, for every handler here: one append to the topic log,
        // its copies counted by the log's state words, whose index each copy's job carries,
        // instead of by the fan-out table (`delivery/settle/copy_slab.rs`).
        let counted = commit.is_durable()
            && is_plain(&message)
            // A keyed one enters each handler's key lines through its producer.
            && ordering_key(&message).is_none()
            && targets.len() == route.subs.len()
            && route.log.as_ref().is_some_and(LogAppender::counts_copies);
        self.arrived_counted(route, targets, &message, TopicCounters::accepted, !counted);
        let unwinding = WithdrawOnUnwind {
            shared: self,
            route,
            targets,
            id: &message.id,
        };
        // As for one handler: when the WAL answered at once and the message is due,
        // each copy usually fits its queue now, and the send ends here without building
        // the waiting path. A queue without room leaves the copies from it on to that path.
        let mut queued = 0;
        if commit.is_durable() && !due_later(&message) {
            match route
                .log
                .as_ref()
                .filter(|_| targets.len() == route.subs.len() && ordering_key(&message).is_none())
            {
                // A topic log takes one append for every handler (`delivery/log/`); a keyed
                // message enters each handler's key lines through its producer instead.
                Some(log) => {
                    if log.try_append_all(message.clone(), counted).is_ok() {
                        queued = targets.len();
                    } else if counted {
                        // Not taken (the log is full, or every state word is in use): its
                        // copies go the waiting way, counted by the fan-out table.
                        self.open_fan_out(targets, &message);
                    }
                }
                None => {
                    for entry in targets {
                        if entry.producer.try_send(message.clone()).is_err() {
                            break;
                        }
                        queued += 1;
                    }
                }
            }
            if queued == targets.len() {
                if route.claim_counted {
                    self.copies_queued(targets, &message);
                }
                unwinding.disarm();
                return Ok(MessageId::from(&message.id));
            }
        }
        // A panic from here on is `accept_waiting`'s guard's.
        unwinding.disarm();
        Box::pin(self.accept_waiting(
            route,
            targets,
            &[],
            message,
            commit,
            try_send,
            timeout,
            None,
            queued,
        ))
        .await
    }

    /// Appends `message` to the WAL, unless its id is a duplicate: held by the WAL, or
    /// completed within the dedup window (`delivery/dedup/dedup_window.rs` says why this order has no race).
    #[inline]
    fn append_new(&self, message: &Arc<EMessage>) -> Result<Appended, CoreError> {
        if !self.dedup.enabled() {
            return Ok(Appended::New(self.wal.append(message)?));
        }
        let Some(commit) = self.wal.append_unique(message)? else {
            return Ok(Appended::Duplicate(None));
        };
        if self.dedup.completed_before(&message.id) {
            // Completed a moment ago: take back the record just written.
            return Ok(Appended::Duplicate(self.wal.cancel(&message.id)?));
        }
        Ok(Appended::New(commit))
    }

    /// [`append_new`](Self::append_new) for a batch, with one commit: the messages that are
    /// new, and their commit. Duplicates are counted and dropped from the batch.
    async fn append_batch_new(
        &self,
        route: &Route,
        batch: Vec<Arc<EMessage>>,
    ) -> Result<(WalCommit, Vec<Arc<EMessage>>), CoreError> {
        if !self.dedup.enabled() {
            return Ok((self.wal.append_batch(&batch)?, batch));
        }
        let (commit, appended) = self.wal.append_batch_unique(&batch)?;
        let mut fresh = Vec::with_capacity(batch.len());
        let mut withdrawals = Vec::new();
        for (message, appended) in batch.into_iter().zip(appended) {
            if !appended {
                route.counters().duplicate();
            } else if self.dedup.completed_before(&message.id) {
                route.counters().duplicate();
                withdrawals.extend(self.wal.cancel(&message.id)?);
            } else {
                fresh.push(message);
            }
        }
        for w in withdrawals {
            w.wait().await?;
        }
        Ok((commit, fresh))
    }

    /// A duplicate send: answered with its id, delivered nothing. Waits for the withdrawal
    /// of a record appended meanwhile to be durable, so a crash cannot bring it back.
    async fn duplicate(
        &self,
        route: &Route,
        message: Arc<EMessage>,
        withdrawal: Option<WalCommit>,
    ) -> Result<MessageId, CoreError> {
        route.counters().duplicate();
        tracing::debug!(target: crate::constant::target::DELIVERY, id = %message.id, topic = %route.topic, "duplicate send: the id was sent before (dedup window); not delivered again");
        if let Some(commit) = withdrawal {
            commit.wait().await?;
        }
        Ok(MessageId::from(&message.id))
    }

    /// Queues the messages an outbox released (one ack's), already in the WAL: counted as
    /// accepted, handed to their handlers' queues without ever blocking the releasing worker
    /// (a full queue gets a task that waits for room). Those for topics with no handler here
    /// go to the handlers elsewhere together, as a batch (`delivery/remote/remote_routes.rs`).
    pub(crate) fn queue_released_all(&self, messages: Vec<Arc<EMessage>>) {
        let mut elsewhere = Vec::new();
        for message in messages {
            if self.topics.contains_key(message.topic.as_str()) {
                self.queue_released_here(message);
            } else {
                // Admitted before it was held: the topic exists, here or elsewhere.
                elsewhere.push(message);
            }
        }
        self.release_elsewhere(elsewhere);
    }

    /// One released message for a topic with handlers here.
    fn queue_released_here(&self, message: Arc<EMessage>) {
        let Some(route) = self.topics.get(message.topic.as_str()) else {
            return;
        };
        // Whether every copy is queued by the time this returns (then, on shared queues
        // only, the record completes once the backend confirmed them). Copies for handlers
        // elsewhere may wait for room on a task of their own: the record then waits for the
        // local handlers.
        let mut placed = true;
        if route.elsewhere.any() && message.to_worker.is_none() {
            copy_released(&route.elsewhere.subs(), &message, &self.in_flight);
            placed = false;
        }
        let targets = targets(route, &message);
        self.accepted(route, targets, &message);
        let now = SystemTime::now();
        for entry in targets {
            match place_now(entry, &self.scheduler, message.clone(), now) {
                Ok(None) => {}
                Ok(Some(full)) => {
                    placed = false;
                    let entry = entry.clone();
                    tokio::spawn(async move {
                        if let Err(e) = entry.producer.send(full).await {
                            tracing::warn!(target: crate::constant::target::DELIVERY, error = %e, "a released message was not queued; it stays in the WAL for the next start");
                        }
                    });
                }
                Err(e) => {
                    placed = false;
                    tracing::warn!(target: crate::constant::target::DELIVERY, id = %message.id, error = %e, "a released message was not queued; it stays in the WAL for the next start")
                }
            }
        }
        if placed && route.claim_counted {
            self.copies_queued(targets, &message);
        }
    }

    /// Counts an appended message as accepted (by its topic, and by each handler it goes to)
    /// and, if it goes to several handlers' in-process queues, opens its fan-out.
    pub(crate) fn accepted(&self, route: &Route, targets: &[Arc<TopicEntry>], message: &EMessage) {
        self.arrived(route, targets, message, TopicCounters::accepted);
    }

    /// [`accepted`](Self::accepted), counting the arrival with `count`: an accepted send, or
    /// a message replayed from the WAL at start.
    pub(crate) fn arrived(
        &self,
        route: &Route,
        targets: &[Arc<TopicEntry>],
        message: &EMessage,
        count: fn(&TopicCounters),
    ) {
        self.arrived_counted(route, targets, message, count, true);
    }

    /// [`arrived`](Self::arrived); `fan_out_table`: whether the fan-out table counts the
    /// message's copies (not when the topic log's state words will).
    fn arrived_counted(
        &self,
        route: &Route,
        targets: &[Arc<TopicEntry>],
        message: &EMessage,
        count: fn(&TopicCounters),
        fan_out_table: bool,
    ) {
        if !route.claim_counted {
            self.in_flight.add();
        }
        count(route.counters());
        if route.single().is_none() {
            for t in targets {
                count(&t.counters);
            }
        }
        if fan_out_table {
            self.open_fan_out(targets, message);
        }
    }

    /// Opens `message`'s entry in the fan-out table if it goes to several handlers' queues
    /// in this process.
    fn open_fan_out(&self, targets: &[Arc<TopicEntry>], message: &EMessage) {
        if targets.len() > 1 {
            // Only copies on this process's own queues are waited for: a copy on a shared
            // queue is the backend's once queued, as a copy for a handler elsewhere is, since
            // another node may settle it (`delivery/settle/fan_out.rs` says why nothing is lost).
            let here = targets.iter().filter(|t| !t.claim_counted).count();
            if here > 1 {
                self.fan_outs.open(&message.id, here as u32);
            }
        }
    }

    /// Every copy of `message` went to `targets`' queues: if they are all shared queues, its
    /// WAL record completes on this process once the backend confirmed them, whichever node
    /// handles them (`delivery/settle/sender_completions.rs`). A copy on an in-process queue completes the
    /// record with its handler's ack instead; so does a copy due later that this process's
    /// scheduler keeps.
    pub(crate) fn copies_queued(&self, targets: &[Arc<TopicEntry>], message: &EMessage) {
        let shared = !targets.is_empty() && targets.iter().all(|t| t.claim_counted);
        let kept_here = due_later(message) && targets.iter().any(|t| !t.producer.keeps_delayed());
        if shared && !kept_here {
            self.complete_when_confirmed([message.id.as_str()]);
        }
    }

    /// Completes the records of `ids` (every copy on a shared queue) once the backend
    /// confirmed what it was handed so far; into the dedup window now, so that a send of
    /// one of them meanwhile is no new message either (its record is still held).
    pub(crate) fn complete_when_confirmed<'a, I>(&self, ids: I)
    where
        I: IntoIterator<Item = &'a str> + Clone,
    {
        let Some(remote) = self
            .remote
            .as_ref()
            .filter(|_| self.wal.keeps_own_records())
        else {
            return;
        };
        for id in ids.clone() {
            self.dedup.completed(id, None);
        }
        remote
            .completions
            .queued(ids, &self.wal, &remote.provider, &self.in_flight);
    }

    /// Counts a withdrawn message as refused, and closes its fan-out.
    fn withdrawn(&self, route: &Route, targets: &[Arc<TopicEntry>], id: &str) {
        if !route.claim_counted {
            self.in_flight.done();
        }
        route.counters().refused();
        if route.single().is_none() {
            for t in targets {
                t.counters.refused();
            }
        }
        if targets.len() > 1 {
            self.fan_outs.forget(id);
        }
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
        let (route, message) = self.admit(&topic, message, false)?;
        if self.is_addressed(&message) {
            // For a worker of a node: to that worker again (`delivery/remote/addressed.rs`).
            return self.replay_addressed(dead, message).await;
        }
        if route.subs.is_empty() {
            // Handled only elsewhere: to the handlers there (`delivery/remote/remote_routes.rs`).
            return self.replay_elsewhere(dead, message).await;
        }
        // To the handlers whose copy died, those the bus still has; all, if none is left.
        let named: Vec<Arc<TopicEntry>> = dead
            .handlers
            .iter()
            .filter_map(|h| route.sub(h).cloned())
            .collect();
        let targets = if named.is_empty() || message.to_worker.is_some() {
            targets(route, &message)
        } else {
            &named[..]
        };
        let commit = self.wal.append(&message)?;
        self.accepted(route, targets, &message);
        self.accept_waiting(
            route,
            targets,
            &[],
            message,
            commit,
            false,
            None,
            Some(dead),
            0,
        )
        .await
    }

    /// The rest of an accepted send that has to wait: for durability, for its queue to have
    /// room, or until the deadline. `restore`: the dead letter to put back if the message is
    /// withdrawn (a replay). `already`: how many of `targets`, from the first, have their copy
    /// queued (the fast path queued them before one did not fit). `elsewhere`: the handlers
    /// only other processes run that get a copy too, queued before the local ones.
    #[allow(clippy::too_many_arguments)]
    async fn accept_waiting(
        &self,
        route: &Route,
        targets: &[Arc<TopicEntry>],
        elsewhere: &[RemoteSub],
        message: Arc<EMessage>,
        commit: WalCommit,
        try_send: bool,
        timeout: Option<Duration>,
        restore: Option<&DeadLetterMessage>,
        already: usize,
    ) -> Result<MessageId, CoreError> {
        // If the caller drops this future (or it panics) before the message is queued,
        // withdraw it: the caller never learned that it was accepted. Armed first, so that
        // nothing below can leave the message in the WAL and counted in flight.
        let queued = AtomicUsize::new(already);
        let guard = WithdrawOnDrop {
            shared: self,
            route,
            targets,
            message: message.clone(),
            queued: &queued,
            id: MessageId::from(&message.id),
            restore,
            armed: true,
        };
        // A deadline is a timer, and timers need a runtime.
        if timeout.is_some() && tokio::runtime::Handle::try_current().is_err() {
            let id = guard.disarm();
            return self
                .refuse(route, targets, id, CoreError::NoRuntime, restore)
                .await;
        }
        // Checked: a timeout the clock cannot reach is none (`clock.rs`).
        let deadline =
            timeout.and_then(|t| crate::clock::deadline_after(tokio::time::Instant::now(), t));
        let outcome = self
            .enqueue(
                &targets[already..],
                elsewhere,
                message.clone(),
                commit,
                try_send,
                deadline,
                timeout,
                &queued,
            )
            .await;
        let id = guard.disarm();
        match outcome {
            Ok(()) => {
                if route.claim_counted {
                    self.copies_queued(targets, &message);
                }
                Ok(id)
            }
            Err(e) => {
                let refused = self.refuse(route, targets, id, e, restore).await;
                // A handler already has the message: it is accepted after all, and every
                // handler must get its copy, however long that takes.
                let done = queued.load(Ordering::Acquire);
                if refused.is_ok() && done < targets.len() {
                    queue_copies(&targets[done..], &message).await?;
                }
                if refused.is_ok() && route.claim_counted {
                    self.copies_queued(targets, &message);
                }
                refused
            }
        }
    }

    /// Waits for a batch's WAL commit. Dropped before the commit is durable, the batch is
    /// withdrawn whole (the caller never learned it was accepted), as a single send is; a
    /// failed commit refuses every message of it.
    async fn batch_committed(
        &self,
        route: &Route,
        batch: &[Arc<EMessage>],
        commit: WalCommit,
    ) -> Result<(), CoreError> {
        let guard = BatchWithdraw {
            shared: self,
            route,
            batch,
            armed: true,
        };
        let committed = commit.wait().await;
        guard.disarm();
        if let Err(e) = committed {
            for message in batch {
                let id = MessageId::from(&message.id);
                let targets = targets(route, message);
                let _ = self
                    .refuse(route, targets, id, CoreError::SystemShutdown, None)
                    .await;
            }
            return Err(e.into());
        }
        Ok(())
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
        if self.any_addressed(&messages) {
            // Some for a worker of a node: those go by that node (`delivery/remote/addressed.rs`).
            return Box::pin(self.send_batch_addressed(topic, messages)).await;
        }
        // In flight before the check, as a single send is (see `accept`).
        self.in_flight.add();
        let _sending = Sending(&self.in_flight);
        let route = match self.route_for(topic) {
            Ok(route) => route,
            Err(CoreError::NoHandler { topic }) if self.remote.is_some() => {
                return Box::pin(self.send_batch_elsewhere(topic, messages)).await
            }
            Err(e) => return Err(e),
        };
        if !self.accepting.load(Ordering::SeqCst) {
            return Err(CoreError::SystemShutdown);
        }
        let batch = messages
            .into_iter()
            .map(|m| prepare(route, m))
            .collect::<Result<Vec<_>, _>>()?;
        let ids: Vec<MessageId> = batch.iter().map(|m| MessageId::from(&m.id)).collect();
        if crate::message::context::holds_sends_to(self.as_ptr()) {
            // A handler with an outbox: the whole batch is held until it acks.
            for message in batch {
                let _ = crate::message::context::hold(message, self.as_ptr());
            }
            return Ok(ids);
        }
        let (commit, batch) = self.append_batch_new(route, batch).await?;
        for message in &batch {
            self.accepted(route, targets(route, message), message);
        }
        self.batch_committed(route, &batch, commit).await?;
        // Committed: every message is accepted. The copies for handlers only other processes
        // run first (as for one send), then the local ones. Queue what fits now; the rest
        // goes to a task of its own, which a dropped call does not cancel.
        let elsewhere = if route.elsewhere.any() {
            let copies: Vec<Arc<EMessage>> = batch
                .iter()
                .filter(|m| m.to_worker.is_none())
                .cloned()
                .collect();
            push_all_elsewhere(&route.elsewhere.subs(), copies)?
        } else {
            Vec::new()
        };
        let now = SystemTime::now();
        // Collected, not a lazy iterator: a closure-laden iterator held across the `.await`
        // below makes this future not `Send` for every lifetime (rustc cannot prove it), and
        // then `send_batch` could not be awaited in a spawned task or a tonic/axum handler.
        let copies: Vec<(Arc<TopicEntry>, Arc<EMessage>)> = batch
            .iter()
            .flat_map(|m| {
                targets(route, m)
                    .iter()
                    .map(move |t| (t.clone(), m.clone()))
            })
            .collect();
        let mut copies = copies.into_iter();
        let mut waiting = None;
        for (entry, message) in copies.by_ref() {
            if let Some(full) = place_now(&entry, &self.scheduler, message, now)? {
                waiting = Some((entry, full));
                break;
            }
        }
        if waiting.is_some() || !elsewhere.is_empty() {
            let rest: Vec<(Arc<TopicEntry>, Arc<EMessage>)> =
                waiting.into_iter().chain(copies).collect();
            let scheduler = self.scheduler.clone();
            let rest = async move {
                send_waiting(elsewhere).await?;
                queue_all(scheduler, rest).await
            };
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => runtime.spawn(rest).await.map_err(|e| {
                    CoreError::Internal(format!("batch queueing task failed: {e}"))
                })??,
                // No runtime to hand the rest to: queue it here (dropping the call now leaves
                // the unqueued rest in the WAL, for the next start).
                Err(_) => rest.await?,
            }
        }
        if route.claim_counted {
            for message in &batch {
                self.copies_queued(targets(route, message), message);
            }
        }
        Ok(ids)
    }

    /// Waits for the WAL commit, then hands the message to the queue of each handler
    /// elsewhere and each target's queue (or the scheduler), counting in `queued` the
    /// targets' copies handed over.
    #[allow(clippy::too_many_arguments)]
    async fn enqueue(
        &self,
        targets: &[Arc<TopicEntry>],
        elsewhere: &[RemoteSub],
        message: Arc<EMessage>,
        commit: WalCommit,
        try_send: bool,
        deadline: Option<tokio::time::Instant>,
        timeout: Option<Duration>,
        queued: &AtomicUsize,
    ) -> Result<(), CoreError> {
        let topic = message.topic.as_str();
        match deadline {
            None => commit.wait().await?,
            Some(d) => tokio::time::timeout_at(d, commit.wait())
                .await
                .map_err(|_| timeout_error(topic, timeout))??,
        }
        if !elsewhere.is_empty() {
            let copies = queue_elsewhere(elsewhere, &message, try_send);
            match deadline {
                None => copies.await?,
                Some(d) => tokio::time::timeout_at(d, copies)
                    .await
                    .map_err(|_| timeout_error(topic, timeout))??,
            }
        }
        let later = due_later(&message);
        for entry in targets {
            if later && !entry.producer.keeps_delayed() {
                if let Some(at) = message.deliver_at {
                    self.scheduler.schedule_wall(
                        at,
                        Scheduled::Message {
                            entry: entry.clone(),
                            message: message.clone(),
                        },
                    );
                }
                queued.fetch_add(1, Ordering::Release);
                continue;
            }
            match entry.producer.try_send(message.clone()) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) if try_send => {
                    return Err(CoreError::QueueFull {
                        topic: topic.to_owned(),
                    })
                }
                Err(TrySendError::Full(message)) => match deadline {
                    None => entry.producer.send(message).await?,
                    Some(d) => tokio::time::timeout_at(d, entry.producer.send(message))
                        .await
                        .map_err(|_| timeout_error(topic, timeout))??,
                },
                Err(TrySendError::Failed(e)) => return Err(e.into()),
            }
            queued.fetch_add(1, Ordering::Release);
        }
        Ok(())
    }

    /// Withdraws a message whose send failed. If a handler already has it, the send did
    /// succeed after all, and the caller must be told so.
    async fn refuse(
        &self,
        route: &Route,
        targets: &[Arc<TopicEntry>],
        id: MessageId,
        error: CoreError,
        restore: Option<&DeadLetterMessage>,
    ) -> Result<MessageId, CoreError> {
        match self.wal.cancel(&id) {
            Ok(Some(commit)) => {
                // Refused: it does not count as sent.
                self.withdrawn(route, targets, &id);
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

/// A send in progress, counted in flight until it returns or is dropped.
struct Sending<'a>(&'a crate::delivery::in_flight::InFlight);

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        self.0.done();
    }
}

/// What [`DeliveryHub::append_new`] did.
enum Appended {
    /// Appended: a new message.
    New(WalCommit),
    /// A duplicate, not delivered again; the commit of the withdrawal of a record appended
    /// meanwhile, if there was one.
    Duplicate(Option<WalCommit>),
}

/// Whether the message is to be delivered later than now.
#[inline]
fn due_later(message: &EMessage) -> bool {
    message.deliver_at.is_some_and(|at| at > SystemTime::now())
}

/// Readies a message for its topic: the route's topic, a valid `to_worker`, the first
/// delivery's `attempts`, a `deliver_at` at most [`MAX_WAIT`] ahead, and the provenance of
/// the message being handled, if any.
#[inline]
pub(crate) fn prepare(route: &Route, message: EMessage) -> Result<Arc<EMessage>, CoreError> {
    prepare_into(route, message, Arc::new)
}

/// [`prepare`], putting the message into the `Arc` that `wrap` gives.
#[inline]
pub(crate) fn prepare_into(
    route: &Route,
    mut message: EMessage,
    wrap: impl FnOnce(EMessage) -> Arc<EMessage>,
) -> Result<Arc<EMessage>, CoreError> {
    if message.topic != route.topic {
        message.topic = route.topic.clone();
    }
    if let Some(worker) = &message.to_worker {
        if route.sub_with_worker(worker).is_none() {
            return Err(CoreError::UnknownWorker {
                topic: route.topic.0.clone(),
                worker: worker.clone(),
            });
        }
    }
    crate::delivery::send::stamp::stamp(&mut message)?;
    Ok(wrap(message))
}

/// The handlers a message goes to: every handler of its topic, or, addressed to a worker
/// (`to_worker`), that worker's handler only.
#[inline]
pub(crate) fn targets<'r>(route: &'r Route, message: &EMessage) -> &'r [Arc<TopicEntry>] {
    if route.single().is_none() {
        if let Some(worker) = &message.to_worker {
            if let Some(sub) = route.sub_with_worker(worker) {
                return std::slice::from_ref(sub);
            }
        }
    }
    &route.subs
}

/// Queues one copy of `message` (due now) for each of `targets`, waiting for room.
async fn queue_copies(
    targets: &[Arc<TopicEntry>],
    message: &Arc<EMessage>,
) -> Result<(), CoreError> {
    for entry in targets {
        entry.producer.send(message.clone()).await?;
    }
    Ok(())
}

/// Queues the copies in order, waiting for room; delayed ones go to the scheduler.
async fn queue_all(
    scheduler: SchedulerHandle,
    copies: Vec<(Arc<TopicEntry>, Arc<EMessage>)>,
) -> Result<(), CoreError> {
    let now = SystemTime::now();
    for (entry, message) in copies {
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
        Some(at) if at > now && !entry.producer.keeps_delayed() => {
            scheduler.schedule_wall(
                at,
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
    shared: &'a DeliveryHub,
    route: &'a Route,
    batch: &'a [Arc<EMessage>],
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
        for message in self.batch {
            match self.shared.wal.cancel(&message.id) {
                Ok(Some(_commit)) => {
                    let targets = targets(self.route, message);
                    self.shared.withdrawn(self.route, targets, &message.id);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(target: crate::constant::target::DELIVERY, id = %message.id, error = %e, "could not withdraw a dropped batch")
                }
            }
        }
    }
}

/// Withdraws an appended message, counted as accepted, if the send panics before the message
/// is queued or in the care of [`WithdrawOnDrop`] (a queue backend's `try_send` that panics,
/// say). Without it the WAL would keep a record no queue holds, and `wait_idle` would count
/// it in flight for ever. Acts only while unwinding: a send dropped (cancelled) between two
/// polls is past this guard, which lives between two `.await`s.
struct WithdrawOnUnwind<'a> {
    shared: &'a DeliveryHub,
    route: &'a Route,
    targets: &'a [Arc<TopicEntry>],
    /// Read as text only on a panic: a `MessageId`'s text is checked as it is read.
    id: &'a (dyn AsRef<str> + Sync),
}

impl WithdrawOnUnwind<'_> {
    /// The message is queued, refused, or in another guard's care.
    fn disarm(self) {
        // Holds only references: forgetting it leaks nothing.
        std::mem::forget(self);
    }
}

impl Drop for WithdrawOnUnwind<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let id = self.id.as_ref();
        match self.shared.wal.cancel(id) {
            Ok(Some(_commit)) => {
                tracing::error!(target: crate::constant::target::DELIVERY, id, "a send panicked before its message was queued; the message is withdrawn");
                self.shared.withdrawn(self.route, self.targets, id);
            }
            // A handler has it already: it completes as usual.
            Ok(None) => {}
            Err(e) => {
                tracing::error!(target: crate::constant::target::DELIVERY, id, error = %e, "a send panicked before its message was queued, and its WAL record could not be withdrawn; it is delivered at the next start")
            }
        }
    }
}

/// Withdraws an appended message if the send future is dropped before it finished.
struct WithdrawOnDrop<'a> {
    shared: &'a DeliveryHub,
    route: &'a Route,
    targets: &'a [Arc<TopicEntry>],
    message: Arc<EMessage>,
    /// How many of `targets` have their copy.
    queued: &'a AtomicUsize,
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
                self.shared.withdrawn(self.route, self.targets, &self.id);
                self.shared.restore_dead_letter(self.restore);
            }
            Ok(None) => {
                // A handler already has it: it will be finished normally, once every other
                // handler has its copy too. Those still missing are queued by a task of their
                // own, since this send is gone.
                let done = self.queued.load(Ordering::Acquire);
                if done < self.targets.len() {
                    let rest: Vec<Arc<TopicEntry>> = self.targets[done..].to_vec();
                    let message = self.message.clone();
                    match tokio::runtime::Handle::try_current() {
                        Ok(runtime) => {
                            runtime.spawn(async move {
                                if let Err(e) = queue_copies(&rest, &message).await {
                                    tracing::error!(target: crate::constant::target::DELIVERY, id = %message.id, error = %e, "could not queue a dropped send's remaining copies; they stay in the WAL for the next start");
                                }
                            });
                        }
                        Err(_) => {
                            tracing::error!(target: crate::constant::target::DELIVERY, id = %self.id, "a dropped send's remaining copies cannot be queued without a runtime; they stay in the WAL for the next start")
                        }
                    }
                }
            }
            Err(e) => {
                tracing::error!(target: crate::constant::target::DELIVERY, id = %self.id, error = %e, "could not withdraw a dropped send")
            }
        }
    }
}

impl DeliveryHub {
    /// Puts a dead letter back after its replay was withdrawn, as it was but for its time.
    pub(crate) fn restore_dead_letter(&self, dead: Option<&DeadLetterMessage>) {
        let Some(dead) = dead else { return };
        let message = Arc::new(dead.message.clone());
        if let Err(e) = self.wal.fail(&message, &dead.reason, &dead.handlers) {
            tracing::error!(target: crate::constant::target::DELIVERY, id = %message.id, error = %e, "could not put back a dead letter whose replay was withdrawn");
        }
    }
}

fn timeout_error(topic: &str, timeout: Option<Duration>) -> CoreError {
    CoreError::Timeout {
        operation: format!("send to `{topic}`"),
        after: timeout.unwrap_or_default(),
    }
}
