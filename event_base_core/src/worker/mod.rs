//! [`Worker`]: runs one handler's pipeline for one message at a time.
//!
//! A worker takes jobs from its private inbox (messages addressed to it with `to_worker`, its
//! copy of a broadcast, and their retries) first, then the topic's shared channel (retries and
//! repeated copies), then, for in-memory queues, the topic's queue itself, where all idle
//! workers of the topic compete (see [`ConsumerRouter`]). For every job it moves the WAL record
//! to `Processing`, runs the middleware and the handler (catching panics and enforcing the
//! timeout), and turns the answer into the next state: complete, retry, or dead letter.
//! A panic or a timeout never ends the worker.
//!
//! May import: `message/`, `handler/`, `backend/`, `delivery/` (a worker holds the
//! [`DeliveryHub`](crate::delivery::hub::DeliveryHub)) and `observe/`'s recorders. The bus
//! starts, watches and replaces workers (`bus/tasks.rs`, `bus/monitor.rs`); a worker knows
//! nothing of it.
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | `Worker`: the loop, and one job from WAL `Processing` to its next state |
//! | `batch.rs` | a batch handler's worker: forming batches (linger), one batch to each message's next state |
//! | `deliver.rs` | one delivery: span, message context, panic catching, timeout, latencies |
//! | `lease.rs` | before a handler starts: a claim whose lease may have run out is confirmed, a lost one dropped |
//! | `outcome.rs` | the one place that turns how a delivery ended into what happens next |
//! | `catch_unwind.rs` | a handler's panic as a value |
//! | `registry.rs` | `WorkerRegistry`, `WorkerInfo`, `WorkerStatus`: every worker and its liveness |

mod batch;
pub(crate) mod catch_unwind;
mod deliver;
mod lease;
mod outcome;
pub(crate) mod registry;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::backend::queue::{Claimed, QueuedRetry};
use crate::delivery::hub::DeliveryHub;
use crate::delivery::send::scheduler::Scheduled;
use crate::delivery::subscription::consumer_router::ConsumerRouter;
use crate::delivery::subscription::job::{Job, Target};
use crate::delivery::subscription::job_channel::JobReceiver;
use crate::delivery::subscription::topic_table::TopicEntry;
use crate::error::QueueError;
use crate::handler::pipeline::Pipeline;
use crate::handler::runtime::HandlerRuntime;
use crate::message::delivery_mode::DeliveryMode;
use crate::message::emessage::EMessage;
use crate::message::topic::MessageTopic;
use crate::observe::audit_record::AuditOutcome;
use crate::observe::audit_ring::AuditNames;
use crate::observe::audit_stage::{AuditStage, StartMark};
use crate::observe::topic_counters::TopicCounters;
use crate::worker::outcome::{decide, Decision, RetryPolicy};
use crate::worker::registry::{WorkerState, WorkerStatus};

impl Worker {
    /// About to wait for work: hands the staged audit records over if a publisher (audit
    /// writers, a `_system.audit` subscriber) wants them now; readers take them in anyway.
    #[inline]
    fn idle(&self) {
        if let Some(stage) = &self.audit {
            stage.flush_if_published();
        }
    }

    /// Records how a delivery `mark` started ended (when the bus audits).
    #[inline]
    fn audit_finished(
        &self,
        mark: Option<StartMark>,
        message: &EMessage,
        outcome: impl FnOnce() -> AuditOutcome,
        took: Duration,
    ) {
        if let (Some(stage), Some(mark)) = (&self.audit, mark) {
            stage.finished(mark, &message.id, message.attempts, outcome(), took);
        }
    }
}

/// What woke a worker.
enum Source {
    /// Its bell: a job in its inbox or its topic's work channel, or a stop request.
    Rung,
    /// Its queue: the messages claimed.
    Claimed,
}

/// One worker of a topic: a task that runs its handler's pipeline, one message at a time.
///
/// The bus creates, runs and replaces workers itself; an application never holds one. What
/// it can do with workers goes through the bus: see them with
/// [`EventBus::workers`](crate::EventBus::workers) and
/// [`EventBus::registry`](crate::EventBus::registry) ([`WorkerInfo`](crate::WorkerInfo):
/// status, current message, heartbeat), add some with
/// [`EventBus::add_workers`](crate::EventBus::add_workers), take one out with
/// [`EventBus::remove_worker`](crate::EventBus::remove_worker), address one with
/// `EMessage::to_worker`. The type is public so that these docs, and the design it follows,
/// can name it.
pub struct Worker {
    /// What the send, route and settle paths of its bus share.
    hub: Arc<DeliveryHub>,
    /// Whether it times queue wait and handler time (the bus's `latency_metrics`).
    latency_metrics: bool,
    entry: Arc<TopicEntry>,
    index: usize,
    state: Arc<WorkerState>,
    pipeline: Pipeline,
    timeout: Option<Duration>,
    policy: RetryPolicy,
    /// Whether the handler's sends are held until it acks.
    outbox: bool,
    inbox: JobReceiver,
    /// For a batch handler: what it calls and how it forms batches (`worker/batch.rs`).
    batch: Option<crate::handler::batch::BatchSpec>,
    /// Where this worker stages its audit records (`None`: not audited).
    audit: Option<Arc<AuditStage>>,
    /// The side of the bus's message pool it gives finished messages back to.
    pool_side: usize,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("name", &self.state.name)
            .field("topic", &self.entry.topic)
            .field("status", &self.state.status())
            .finish_non_exhaustive()
    }
}

impl Worker {
    pub(crate) fn new(
        hub: Arc<DeliveryHub>,
        node: &str,
        latency_metrics: bool,
        entry: Arc<TopicEntry>,
        state: Arc<WorkerState>,
        handler: &HandlerRuntime,
        inbox: JobReceiver,
    ) -> Self {
        // Names of its own (not clones of shared ones), so that recording touches no
        // reference count another worker also touches.
        let audit = if entry.topic.is_system() {
            None
        } else {
            hub.audit.stage(AuditNames {
                topic: Arc::from(entry.topic.as_str()),
                worker: Arc::from(state.name.as_str()),
                node: Arc::from(node),
            })
        };
        Worker {
            pool_side: hub.pool.side(),
            index: state.index,
            state,
            pipeline: handler.pipeline.clone(),
            timeout: handler.timeout,
            policy: RetryPolicy {
                retries: handler.retries,
                backoff: handler.backoff,
            },
            audit,
            outbox: handler.outbox,
            batch: handler.batch.clone(),
            inbox,
            hub,
            latency_metrics,
            entry,
        }
    }

    /// The worker's unique name.
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// The topic it serves.
    pub fn topic(&self) -> &MessageTopic {
        &self.entry.topic
    }

    /// Runs until the system stops (the task is aborted).
    ///
    /// Sources, in order of priority: the private inbox, the topic's shared work channel
    /// (retries and repeated copies), and, when `router` is given (in-memory queues), the
    /// topic's queue itself, claimed one message at a time. Each is tried without waiting
    /// first; only when all are empty does the worker park: on its queue (on the queue's
    /// bell when it has one, [`EConsumer::bell`](crate::backend::EConsumer::bell)), and on
    /// its own bell, which its inbox, the work channel and a stop request ring.
    pub(crate) async fn run(self, router: Option<Arc<ConsumerRouter>>) {
        if let Some(spec) = self.batch.clone() {
            return self.run_batch(spec, router).await;
        }
        // One message context for the worker's life; each delivery fills it in turn.
        let retries = self
            .policy
            .retries
            .unwrap_or(crate::constant::DEFAULT_MAX_RETRIES);
        let bus = self.hub.clone();
        let outbox = self.outbox;
        crate::message::context::worker_scope(retries, bus, outbox, self.run_loop(router)).await
    }

    async fn run_loop(self, router: Option<Arc<ConsumerRouter>>) {
        let work = self.entry.work_rx.clone();
        let consumer = self.entry.consumer.clone();
        // A job for this worker (its inbox) or for any of the topic's workers (the work
        // channel) rings the worker's bell, which a stop request rings too: it parks on that
        // one bell and its queue, not on both channels as well (`delivery/subscription/job_channel.rs`).
        self.inbox.ring_on(self.state.bell());
        work.ring_on(self.state.bell());
        let mut claimed: Vec<Claimed> = Vec::with_capacity(1);
        loop {
            if self.entry.pause.is_paused() && !self.wait_resumed().await {
                break;
            }
            if let Some(job) = self.inbox.try_recv() {
                if !self.process(job).await {
                    return;
                }
                continue;
            }
            // Asked to stop: the inbox (work addressed to this worker alone) is empty, the
            // current message is finished; take nothing new.
            if self.state.stop_requested() {
                break;
            }
            if let Some(job) = work.try_recv() {
                if !self.process(job).await {
                    return;
                }
                continue;
            }
            // The bell keeps a ring that came after the looks above: the park then ends at
            // once, and the next turn finds what was sent.
            let got = match &router {
                Some(_) => {
                    claimed.clear();
                    match consumer.try_claim(self.entry.claim_run, &mut claimed) {
                        Ok(n) if n > 0 => Source::Claimed,
                        Err(QueueError::Closed(_)) => break,
                        _ => {
                            self.idle();
                            if let Some(bell) = consumer.bell() {
                                match self.park_on(bell, consumer.as_ref(), &mut claimed).await {
                                    Ok(got) => got,
                                    Err(()) => break,
                                }
                            } else {
                                tokio::select! {
                                biased;
                                _ = self.state.stop_signal() => Source::Rung,
                                r = consumer.claim_batch(1, &mut claimed) => match r {
                                    Ok(_) => Source::Claimed,
                                    Err(QueueError::Closed(_)) => break,
                                    Err(e) => {
                                        self.claim_failed(&e);
                                        Source::Rung
                                    }
                                },
                                }
                            }
                        }
                    }
                }
                None => {
                    self.idle();
                    self.state.stop_signal().await;
                    Source::Rung
                }
            };
            match got {
                // Looked at again on the next turn: the inbox, a stop request, the work
                // channel.
                Source::Rung => {}
                Source::Claimed => {
                    if let Some(router) = &router {
                        if !self.handle_run(router, &mut claimed).await {
                            return;
                        }
                    }
                }
            }
        }
        if let Some(slot) = self.entry.slot(self.index) {
            slot.running
                .store(false, std::sync::atomic::Ordering::Release);
        }
        // Routing stops sending here once `running` is cleared; finish what slipped in.
        while let Some(job) = self.inbox.try_recv() {
            if !self.process(job).await {
                return;
            }
        }
        self.stopped();
    }

    /// Parks on the queue's bell and the worker's own (its inbox, its topic's work channel,
    /// a stop request), without the boxed `claim_batch` future or a channel's waiter hook:
    /// it listens on the queue's bell, looks once more, and waits only if that finds
    /// nothing, so a message sent between the worker's last look and its wait wakes it.
    /// `Err(())`: the queue is closed.
    async fn park_on(
        &self,
        bell: &tokio::sync::Notify,
        consumer: &dyn crate::backend::EConsumer,
        claimed: &mut Vec<Claimed>,
    ) -> Result<Source, ()> {
        let rung = bell.notified();
        tokio::pin!(rung);
        rung.as_mut().enable();
        match consumer.try_claim(self.entry.claim_run, claimed) {
            Ok(n) if n > 0 => return Ok(Source::Claimed),
            Err(QueueError::Closed(_)) => return Err(()),
            Ok(_) => {}
            Err(e) => self.claim_failed(&e),
        }
        tokio::select! {
            biased;
            _ = self.state.stop_signal() => {}
            _ = rung => {}
        }
        // Looked at on the next turn, the queue included.
        Ok(Source::Rung)
    }

    /// Waits for the next start its handler's rate allows (`HandlerSpec::rate`), counting
    /// the wait; `false` if the worker was asked to stop meanwhile.
    pub(super) async fn paced(
        &self,
        gate: &crate::delivery::subscription::rate_gate::RateGate,
    ) -> bool {
        let wait = gate.reserve().await;
        if wait.is_zero() {
            return true;
        }
        self.entry.counters.rate_waited(wait);
        self.unless_stopped(tokio::time::sleep(wait)).await
    }

    /// Waits for `until`: `true` when it came, `false` if the worker was asked to stop
    /// first. The worker's bell also rings for work arriving, so only a stop ends the wait.
    async fn unless_stopped(&self, until: impl std::future::Future<Output = ()>) -> bool {
        tokio::pin!(until);
        loop {
            if self.state.stop_requested() {
                return false;
            }
            tokio::select! {
                biased;
                _ = self.state.stop_signal() => {}
                _ = &mut until => return true,
            }
        }
    }

    /// Handles what it claimed, in order; `false` if the worker must end now (its job was
    /// taken from it). A run claimed from a topic log: what a stopping or paused worker has
    /// not begun goes to its siblings' channel.
    async fn handle_run(&self, router: &ConsumerRouter, claimed: &mut Vec<Claimed>) -> bool {
        let mut run = claimed.drain(..);
        while let Some(c) = run.next() {
            let job = match router.plain_job(c.message, c.receipt) {
                Ok(job) => Some(job),
                Err(message) => router.dispatch(message, Some(self.index), None).await,
            };
            if let Some(job) = job {
                if !self.process(job).await {
                    self.hand_back(router, run).await;
                    return false;
                }
            }
            if run.len() > 0 && (self.state.stop_requested() || self.entry.pause.is_paused()) {
                self.hand_back(router, run).await;
                break;
            }
        }
        true
    }

    /// Hands the rest of a claimed run, not begun, to the subscription's work channel, where
    /// its siblings (or this worker, once resumed) take it; never waits for room.
    async fn hand_back(&self, router: &ConsumerRouter, rest: impl Iterator<Item = Claimed>) {
        for c in rest {
            let job = match router.plain_job(c.message, c.receipt) {
                Ok(job) => Some(job),
                Err(message) => router.dispatch(message, Some(self.index), None).await,
            };
            if let Some(job) = job {
                self.entry.push_detached(job, Target::Any);
            }
        }
    }

    /// The subscription is paused: waits, taking nothing new, until it is resumed (`true`)
    /// or the worker is asked to stop (`false`).
    async fn wait_resumed(&self) -> bool {
        self.idle();
        self.state.set_status(WorkerStatus::Idle);
        self.unless_stopped(self.entry.pause.running()).await
    }

    /// A claim from the queue failed (other than closed): logged, and the worker parks and
    /// looks again.
    fn claim_failed(&self, e: &QueueError) {
        tracing::error!(target: crate::constant::target::QUEUE, topic = %self.entry.topic, error = %e, "claim failed");
    }

    /// The worker's loop has ended: say so (the task that ran it announces it `Left`, seeing
    /// it `Stopped`; `bus/tasks.rs`).
    fn stopped(&self) {
        self.state.set_status(WorkerStatus::Stopped);
    }

    /// Handles one job. Returns `false` if the worker was declared dead meanwhile (the
    /// monitor took the job and delivered it elsewhere): the worker must then end.
    async fn process(&self, job: Job) -> bool {
        // A keyed message whose turn has not come waits in its key's line; it comes back
        // through the work channel when the one ahead of it is done.
        let Some(job) = self.entry.keys.admit(job) else {
            return true;
        };
        if self.claim_lost(&job).await {
            // Another consumer has it now, and its place in the key's order.
            self.entry.keys.leave(&job.message);
            return true;
        }
        if let Some(gate) = &self.entry.rate {
            // Boxed: only rated handlers build this future.
            if !Box::pin(self.paced(gate)).await {
                // Asked to stop while it waited: a sibling (or the next start) takes it.
                self.entry.push_detached(job, Target::Any);
                return true;
            }
        }
        let message = job.message.clone();
        // A copy counted by its topic log's state words: only the first to begin marks the
        // record (the others would find it `Processing` already).
        let begun = if self.entry.begins_record(&job) {
            self.hub.wal.begin(&message.id)
        } else {
            Ok(true)
        };
        match begun {
            // A shared queue's entry is live by its claim: this WAL may hold no record of it
            // (sent by another node, or completed here by a sibling copy: `fan_out.rs`).
            Ok(false) if !self.entry.claim_counted => {
                // Withdrawn by a refused send, or already finished: nothing to deliver, and
                // its queue entry (if the queue needs acks) is done too.
                self.entry.keys.leave(&message);
                self.entry.abandon_copy(&job);
                crate::delivery::subscription::job::ack_claim(&job);
                return true;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::error!(target: crate::constant::target::DELIVERY, id = %message.id, error = %e, "could not mark message processing; delivering anyway");
            }
        }
        self.state.set_current(job);
        self.state.set_status(WorkerStatus::Working);
        self.entry.counters.handled();
        // One clock read serves the audit's start, the queue wait and the handler time.
        let started = (self.audit.is_some() || self.latency_metrics).then(SystemTime::now);
        let mark = match (&self.audit, started) {
            (Some(stage), Some(at)) => Some(stage.started(&message.id, message.attempts, at)),
            _ => None,
        };
        let (outcome, held, end) = self.deliver(&message, started).await;
        // Not kept past the delivery: a completed message's last reference is the job's.
        drop(message);
        self.state.count_processed();
        let Some(job) = self.state.take_current() else {
            // Declared dead while the handler ran; the monitor has delivered the message
            // again and owns its outcome.
            return false;
        };
        self.state.set_status(if self.state.stop_requested() {
            WorkerStatus::Stopping
        } else {
            WorkerStatus::Idle
        });
        let took = end.map_or(Duration::ZERO, |(_, took)| took);
        let decision = decide(outcome, job.message.attempts, self.policy);
        self.log_retry(&job, &decision);
        // When the delivery ended, from the clock read already made (for the dedup window).
        let ended = end.map(|(at, _)| at);
        let audit = (mark, took);
        // The common answer settles without waiting: handled here, so that `apply`'s larger
        // future (retries and dead letters wait) is not built and moved for every message.
        if decision == Decision::Complete {
            if let Some(dead) = self.complete(job, audit, ended, held) {
                self.hub.settle_dead(&self.entry, dead).await;
            }
            return true;
        }
        self.apply(job, decision, audit, ended, held).await;
        true
    }

    /// A delivery answered `Ack`: counters, audit, and the record's completion; gives back
    /// what must still be settled as dead (a delivery group another copy of which failed).
    #[inline]
    fn complete(
        &self,
        job: Job,
        audit: (Option<StartMark>, Duration),
        ended: Option<SystemTime>,
        held: Vec<Arc<EMessage>>,
    ) -> Option<crate::delivery::settle::final_state::Dead> {
        let (mark, took) = audit;
        self.entry.counters.acked();
        TopicCounters::add(&self.state.acked);
        self.audit_finished(mark, &job.message, || AuditOutcome::Acked, took);
        let dead = self.hub.finish_ok(&self.entry, &job, ended, held);
        // The next message of its key, if any, may start.
        self.entry.keys.leave(&job.message);
        match dead {
            Some(dead) => Some(dead),
            None => {
                // Its allocation carries a later send, if this was its last reference.
                self.hub.pool.recycle(job.message, self.pool_side);
                None
            }
        }
    }

    /// A retry is a normal path, logged here; a dead letter is logged once, as a warning,
    /// where it is settled (`delivery/settle/final_state.rs`), with the panic or timeout as its reason.
    #[inline]
    fn log_retry(&self, job: &Job, decision: &Decision) {
        if let Decision::Retry { delay, reason } = decision {
            let (id, worker, attempts) = (&job.message.id, &self.state.name, job.message.attempts);
            match reason {
                Some(reason) => {
                    tracing::info!(target: crate::constant::target::DELIVERY, %id, %worker, attempts, ?delay, %reason, "delivery failed; retrying");
                }
                None => {
                    tracing::debug!(target: crate::constant::target::DELIVERY, %id, %worker, attempts, ?delay, "handler answered NoAck; retrying");
                }
            }
        }
    }

    /// Carries out a [`Decision`]: WAL state, counters, audit, and the next delivery.
    async fn apply(
        &self,
        job: Job,
        decision: Decision,
        audit: (Option<StartMark>, Duration),
        ended: Option<SystemTime>,
        held: Vec<Arc<EMessage>>,
    ) {
        let (mark, took) = audit;
        if !held.is_empty() && decision != Decision::Complete {
            // Only an `Ack` releases what the outbox holds; a retry will send again.
            tracing::debug!(target: crate::constant::target::DELIVERY, id = %job.message.id, discarded = held.len(), "outbox discarded: the delivery did not ack");
        }
        match decision {
            Decision::Complete => {
                if let Some(dead) = self.complete(job, (mark, took), ended, held) {
                    self.hub.settle_dead(&self.entry, dead).await;
                }
            }
            Decision::Retry { delay, reason } => {
                let outcome = || AuditOutcome::Retried {
                    after: delay,
                    reason: reason.clone(),
                };
                self.audit_finished(mark, &job.message, outcome, took);
                self.retry(job, delay).await;
            }
            Decision::Dead(reason) => {
                TopicCounters::add(&self.state.dead);
                let outcome = || AuditOutcome::Dead {
                    reason: reason.clone(),
                };
                self.audit_finished(mark, &job.message, outcome, took);
                self.hub.dead_letter(&self.entry, &job, reason).await;
                self.entry.keys.leave(&job.message);
            }
        }
    }

    async fn retry(&self, job: Job, delay: Duration) {
        // A handler's `retry_after` (or a backoff without a cap) may be anything: no retry
        // waits longer than `MAX_WAIT`, so neither this clock nor a queue's can overflow.
        let delay = delay.min(crate::constant::MAX_WAIT);
        let mut next = (*job.message).clone();
        next.attempts = next.attempts.saturating_add(1);
        next.deliver_at =
            (!delay.is_zero()).then(|| crate::clock::system_after(SystemTime::now(), delay));
        let next = Arc::new(next);
        if let Err(e) = self.hub.wal.retry(&next) {
            tracing::error!(target: crate::constant::target::DELIVERY, id = %next.id, error = %e, "could not record retry in the WAL");
        }
        self.entry.counters.retried();
        TopicCounters::add(&self.state.retried);
        let Some(job) = self.retry_in_queue(job, &next, delay).await else {
            return;
        };
        // Broadcast copies and addressed messages stay with this worker.
        let target = if next.delivery_mode == DeliveryMode::Broadcast || next.to_worker.is_some() {
            Target::Worker(self.index)
        } else {
            Target::Any
        };
        let job = Job {
            message: next,
            group: job.group,
            claim: job.claim,
            copies: job.copies,
        };
        if delay.is_zero() {
            self.entry.push_detached(job, target);
        } else {
            self.hub.scheduler.schedule_after(
                delay,
                Scheduled::Job {
                    entry: self.entry.clone(),
                    job,
                    target,
                },
            );
        }
    }

    /// A delayed retry of a claimed entry that stands for this one delivery (no delivery
    /// group, no addressed worker) goes to a queue that keeps retries (Redis: settled, and
    /// the next attempt put in the subscription's delayed set, in one script), so no lease
    /// is held through the backoff and the retry outlives this process. Hands the job back
    /// when the bus must retry it itself: the queue does not keep retries (in-memory queues
    /// have no claim, so they stop at the first test), or it failed to.
    async fn retry_in_queue(&self, job: Job, next: &Arc<EMessage>, delay: Duration) -> Option<Job> {
        let Some(ticket) = &job.claim else {
            return Some(job);
        };
        // A keyed message's retry stays here, its claim held: in the queue it would take a
        // new place in its key's order, behind messages sent after it.
        if delay.is_zero()
            || job.group.is_some()
            || next.to_worker.is_some()
            || crate::delivery::subscription::key_order::ordering_key(next).is_some()
            || !self.entry.consumer.keeps_retries()
        {
            return Some(job);
        }
        match ticket.retry_later(&*self.entry.consumer, next, delay).await {
            Ok(QueuedRetry::Kept) => None,
            Ok(_fenced) => {
                // Another consumer owns the entry now and decides; here the delivery ends as
                // a fenced ack does (the queue logged it), so the message stops counting.
                self.entry.keys.leave(&job.message);
                if let Some(dead) = self.hub.finish_ok(&self.entry, &job, None, Vec::new()) {
                    self.hub.settle_dead(&self.entry, dead).await;
                }
                None
            }
            Err(e) => {
                tracing::warn!(target: crate::constant::target::DELIVERY, id = %next.id, error = %e, ?delay, "the queue did not take the retry; it waits in this process, its entry still claimed");
                Some(job)
            }
        }
    }
}
