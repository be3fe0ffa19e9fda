//! A batch handler's worker: the loop that forms batches, and one batch from WAL `Processing`
//! to each message's next state.
//!
//! The worker takes what is ready without waiting, from the same sources and in the same order
//! as a single-message worker (its inbox, the topic's work channel, the topic's queue), up to
//! the batch size. Holding fewer, it waits up to the handler's linger for more, parked on all
//! sources and a timer at once (no polling), and not at all once the bus shuts down or the
//! worker is asked to stop. With nothing ready it parks as a single-message worker does.
//!
//! The batch's `Processing` marks go to the WAL together (`Wal::begin_batch`), and so do the
//! completions of its acked messages (`Wal::complete_batch`); retries and dead letters are
//! recorded message by message, each with its own attempt count and delay.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tracing::Instrument;

use crate::backend::queue::Claimed;
use crate::constant::DEFAULT_MAX_RETRIES;
use crate::delivery::subscription::consumer_router::ConsumerRouter;
use crate::delivery::subscription::job::{ack_claim, Job};
use crate::error::QueueError;
use crate::handler::batch::{wrong_length, BatchAck, BatchSpec};
use crate::message::ack::Ack;
use crate::message::context::{take_failure, with_current_batch};
use crate::message::emessage::EMessage;
use crate::observe::audit_record::AuditOutcome;
use crate::observe::audit_stage::StartMark;
use crate::observe::topic_counters::TopicCounters;
use crate::worker::catch_unwind::CatchUnwind;
use crate::worker::outcome::{decide, Decision, Outcome};
use crate::worker::registry::WorkerStatus;
use crate::worker::Worker;

/// What ended a wait for work.
enum Woke {
    /// Something may have arrived (or a source answered nothing): look again.
    Work,
    /// The queue is closed: no more work will come.
    Closed,
    /// The linger ran out, the bus began shutting down, or the worker was asked to stop.
    Done,
}

impl Worker {
    /// Runs a batch handler's worker until the system stops (see the module docs).
    pub(super) async fn run_batch(self, spec: BatchSpec, router: Option<Arc<ConsumerRouter>>) {
        let max = spec.max.max(1);
        let mut jobs: Vec<Job> = Vec::with_capacity(max);
        let mut claimed: Vec<Claimed> = Vec::with_capacity(max);
        loop {
            if self.entry.pause.is_paused() && !self.wait_resumed().await {
                break;
            }
            self.take_ready(&mut jobs, max, router.as_deref(), &mut claimed)
                .await;
            if jobs.is_empty() {
                if self.state.stop_requested() {
                    break;
                }
                self.idle();
                match self
                    .wait(&mut jobs, max, router.as_deref(), &mut claimed, None)
                    .await
                {
                    Woke::Closed => break,
                    Woke::Work | Woke::Done => continue,
                }
            }
            if jobs.len() < max && !spec.linger.is_zero() {
                self.linger(&mut jobs, max, spec.linger, router.as_deref(), &mut claimed)
                    .await;
            }
            if !self.process_batch(&spec, &mut jobs).await {
                return;
            }
        }
        if let Some(slot) = self.entry.slot(self.index) {
            slot.running
                .store(false, std::sync::atomic::Ordering::Release);
        }
        // Routing stops sending here once `running` is cleared; finish what slipped in.
        loop {
            while jobs.len() < max {
                match self.inbox.try_recv() {
                    Some(job) => jobs.push(job),
                    None => break,
                }
            }
            if jobs.is_empty() {
                break;
            }
            if !self.process_batch(&spec, &mut jobs).await {
                return;
            }
        }
        self.stopped();
    }

    /// Adds to `jobs`, up to `max`, what is ready now: the inbox first, then (unless the
    /// worker is asked to stop) the work channel and the topic's queue.
    async fn take_ready(
        &self,
        jobs: &mut Vec<Job>,
        max: usize,
        router: Option<&ConsumerRouter>,
        claimed: &mut Vec<Claimed>,
    ) {
        while jobs.len() < max {
            match self.inbox.try_recv() {
                Some(job) => jobs.push(job),
                None => break,
            }
        }
        if self.state.stop_requested() {
            return;
        }
        while jobs.len() < max {
            match self.entry.work_rx.try_recv() {
                Some(job) => jobs.push(job),
                None => break,
            }
        }
        if let Some(router) = router {
            if jobs.len() < max {
                claimed.clear();
                if let Ok(n) = self.entry.consumer.try_claim(max - jobs.len(), claimed) {
                    if n > 0 {
                        self.take_claimed(jobs, router, claimed).await;
                    }
                }
            }
        }
    }

    /// Turns claimed queue entries into jobs (routing those that are not plain deliveries).
    async fn take_claimed(
        &self,
        jobs: &mut Vec<Job>,
        router: &ConsumerRouter,
        claimed: &mut Vec<Claimed>,
    ) {
        for c in claimed.drain(..) {
            let job = match router.plain_job(c.message, c.receipt) {
                Ok(job) => Some(job),
                Err(message) => router.dispatch(message, Some(self.index), None).await,
            };
            jobs.extend(job);
        }
    }

    /// Parks on every source at once until one has something (added to `jobs`), the queue
    /// closes, or (with `until`) the deadline passes, the bus begins shutting down or the
    /// worker is asked to stop.
    async fn wait(
        &self,
        jobs: &mut Vec<Job>,
        max: usize,
        router: Option<&ConsumerRouter>,
        claimed: &mut Vec<Claimed>,
        until: Option<tokio::time::Instant>,
    ) -> Woke {
        let work = &self.entry.work_rx;
        let consumer = &self.entry.consumer;
        let room = max.saturating_sub(jobs.len()).max(1);
        let lingering = until.is_some();
        claimed.clear();
        let claim = async {
            match router {
                Some(_) => consumer.claim_batch(room, claimed).await,
                None => std::future::pending().await,
            }
        };
        let timer = async {
            match until {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let shutting_down = async {
            if lingering {
                self.hub.stopped_accepting().await
            } else {
                std::future::pending().await
            }
        };
        let woke = tokio::select! {
            biased;
            _ = self.state.stop_signal() => {
                if lingering { Woke::Done } else { Woke::Work }
            }
            _ = shutting_down => Woke::Done,
            j = self.inbox.recv() => { jobs.extend(j); Woke::Work }
            j = work.recv() => { jobs.extend(j); Woke::Work }
            r = claim => match r {
                Ok(_) => Woke::Work,
                Err(QueueError::Closed(_)) => Woke::Closed,
                Err(e) => {
                    tracing::error!(target: crate::constant::target::QUEUE, topic = %self.entry.topic, error = %e, "claim failed");
                    Woke::Work
                }
            },
            _ = timer => Woke::Done,
        };
        if let (Some(router), false) = (router, claimed.is_empty()) {
            self.take_claimed(jobs, router, claimed).await;
        }
        woke
    }

    /// Waits up to `linger` for the batch to fill, unless the bus is shutting down or the
    /// worker is asked to stop.
    async fn linger(
        &self,
        jobs: &mut Vec<Job>,
        max: usize,
        linger: Duration,
        router: Option<&ConsumerRouter>,
        claimed: &mut Vec<Claimed>,
    ) {
        if !self.hub.is_accepting() || self.state.stop_requested() {
            return;
        }
        let until = crate::clock::instant_after(tokio::time::Instant::now(), linger);
        while jobs.len() < max {
            match self.wait(jobs, max, router, claimed, Some(until)).await {
                Woke::Work => {}
                Woke::Closed | Woke::Done => return,
            }
            self.take_ready(jobs, max, router, claimed).await;
        }
    }

    /// Handles one batch: `Processing` for all of it, one call, then each message's next
    /// state. Returns `false` if the worker was declared dead meanwhile (the monitor took the
    /// batch and delivers it elsewhere): the worker must then end.
    async fn process_batch(&self, spec: &BatchSpec, jobs: &mut Vec<Job>) -> bool {
        // Keyed messages whose turn has not come wait in their key's line (so a batch never
        // holds two of one key).
        if jobs.iter().any(|j| j.message.key().is_some()) {
            let taken = std::mem::take(jobs);
            jobs.extend(taken.into_iter().filter_map(|j| self.entry.keys.admit(j)));
        }
        self.drop_lost_claims(jobs).await;
        if jobs.is_empty() {
            return true;
        }
        let flags = {
            let ids: Vec<&str> = jobs.iter().map(|j| j.message.id.as_str()).collect();
            match self.hub.wal.begin_batch(&ids) {
                Ok(flags) => flags,
                Err(e) => {
                    tracing::error!(target: crate::constant::target::DELIVERY, messages = ids.len(), error = %e, "could not mark a batch processing; delivering it anyway");
                    vec![true; ids.len()]
                }
            }
        };
        let mut batch: Vec<Job> = Vec::with_capacity(jobs.len());
        for (job, live) in jobs
            .drain(..)
            .zip(flags.into_iter().chain(std::iter::repeat(true)))
        {
            // A shared queue's entry is live by its claim (as for one job, `worker/mod.rs`).
            if live || self.entry.claim_counted {
                batch.push(job);
            } else {
                // Withdrawn or finished already: nothing to deliver, its queue entry is done.
                self.entry.keys.leave(&job.message);
                self.entry.abandon_copy(&job);
                ack_claim(&job);
            }
        }
        if batch.is_empty() {
            return true;
        }
        let messages: Vec<EMessage> = batch.iter().map(|j| (*j.message).clone()).collect();
        let n = batch.len();
        self.state.set_current_batch(batch);
        self.state.set_status(WorkerStatus::Working);
        let started = (self.audit.is_some() || self.latency_metrics).then(SystemTime::now);
        let marks: Vec<Option<StartMark>> = messages
            .iter()
            .map(|m| {
                self.entry.counters.handled();
                match (&self.audit, started) {
                    (Some(stage), Some(at)) => Some(stage.started(&m.id, m.attempts, at)),
                    _ => None,
                }
            })
            .collect();
        let (outcomes, end) = self.deliver_batch(spec, &messages, started).await;
        drop(messages);
        let batch = self.state.take_current_batch();
        if batch.len() != n {
            // Declared dead while the handler ran; the monitor has delivered the batch again
            // and owns its outcome.
            return false;
        }
        self.state.set_status(if self.state.stop_requested() {
            WorkerStatus::Stopping
        } else {
            WorkerStatus::Idle
        });
        let took = end.map_or(Duration::ZERO, |(_, took)| took);
        let ended = end.map(|(at, _)| at);
        let mut acked: Vec<Job> = Vec::with_capacity(n);
        for ((job, outcome), mark) in batch.into_iter().zip(outcomes).zip(marks) {
            self.state.count_processed();
            let decision = decide(outcome, job.message.attempts, self.policy);
            if decision == Decision::Complete {
                self.entry.counters.acked();
                TopicCounters::add(&self.state.acked);
                self.audit_finished(mark, &job.message, || AuditOutcome::Acked, took);
                acked.push(job);
                continue;
            }
            self.log_retry(&job, &decision);
            self.apply(job, decision, (mark, took), ended, Vec::new())
                .await;
        }
        if !acked.is_empty() {
            let dead = self.hub.finish_batch_ok(&self.entry, &acked, ended);
            for job in &acked {
                self.entry.keys.leave(&job.message);
            }
            for dead in dead {
                self.hub.settle_dead(&self.entry, dead).await;
            }
        }
        true
    }

    /// Runs the batch handler once for `messages` and says how the call ended for each of
    /// them, in order. Never panics, and returns by the handler's timeout at the latest.
    /// With `started` (the bus keeps time), also when the call ended and how long it took:
    /// the one clock read after the handler, which the handler-time histogram, the audit and
    /// the dedup window share (as for one message, `deliver.rs`).
    async fn deliver_batch(
        &self,
        spec: &BatchSpec,
        messages: &[EMessage],
        started: Option<SystemTime>,
    ) -> (Vec<Outcome>, Option<(SystemTime, Duration)>) {
        let n = messages.len();
        if let Some(gate) = &self.entry.rate {
            // A batch handler's rate counts its calls. Asked to stop meanwhile, it still
            // makes this call: the batch is taken, and stopping waits for it.
            let _ = Box::pin(self.paced(gate)).await;
        }
        let counters = &self.entry.counters;
        let latency = self.latency_metrics;
        if let Some(now) = started.filter(|_| latency) {
            for m in messages.iter().filter(|m| m.attempts <= 1) {
                let since = m
                    .deliver_at
                    .map_or(m.metadata.created_at, |at| at.max(m.metadata.created_at));
                if let Ok(wait) = now.duration_since(since) {
                    counters.queue_wait.record(wait);
                }
            }
        }
        let span = tracing::info_span!(
            target: crate::constant::target::DELIVERY,
            "event_base.handle_batch",
            topic = %self.entry.topic,
            messages = n,
            first_id = messages.first().map(|m| m.id.as_str()),
        );
        let call = CatchUnwind(spec.handler.handle_batch(messages));
        let run = async {
            let answer = match self.timeout {
                None => call.await.map(Some),
                Some(limit) => match tokio::time::timeout(limit, call).await {
                    Ok(r) => r.map(Some),
                    Err(_) => Ok(None),
                },
            };
            // An `Err` return (through `IntoAck`) leaves its text in the context.
            (answer, take_failure())
        };
        let retries = self.policy.retries.unwrap_or(DEFAULT_MAX_RETRIES);
        let bus = self.hub.clone();
        let (answer, failure) = if span.is_disabled() {
            with_current_batch(retries, bus, run).await
        } else {
            with_current_batch(retries, bus, run.instrument(span)).await
        };
        // A clock that went back reads as zero time taken (the histogram skips it), ended
        // when it started.
        let end = started.map(|t| {
            let now = SystemTime::now();
            match now.duration_since(t) {
                Ok(took) => {
                    if latency {
                        counters.handler_time.record(took);
                    }
                    (now, took)
                }
                Err(_) => (t, Duration::ZERO),
            }
        });
        (outcomes(answer, failure, n), end)
    }
}

/// Each message's outcome from how the batch call ended: `Err(panic)`, `Ok(None)` for a
/// timeout, or the answer (with the `Err` text the handler reported, if any).
fn outcomes(
    answer: Result<Option<BatchAck>, String>,
    failure: Option<String>,
    n: usize,
) -> Vec<Outcome> {
    let each = |f: &dyn Fn() -> Outcome| (0..n).map(|_| f()).collect();
    match answer {
        Err(panic) => each(&|| Outcome::Panicked(panic.clone())),
        Ok(None) => each(&|| Outcome::TimedOut),
        Ok(Some(BatchAck::All(ack))) => match (&ack, failure) {
            (Ack::NoAck { retry_after, .. }, Some(text)) => each(&|| Outcome::Failed {
                text: text.clone(),
                retry_after: *retry_after,
            }),
            _ => each(&|| Outcome::Answered(ack.clone())),
        },
        Ok(Some(BatchAck::Each(acks))) if acks.len() == n => {
            acks.into_iter().map(Outcome::Answered).collect()
        }
        Ok(Some(BatchAck::Each(acks))) => {
            let text = wrong_length(acks.len(), n);
            each(&|| Outcome::Failed {
                text: text.clone(),
                retry_after: None,
            })
        }
    }
}
