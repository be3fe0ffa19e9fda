//! Final states. A handler's copy of a message ends in `Ack` or as a dead letter (a
//! broadcast or repeated copy once its last delivery has ended); the message is final once
//! every handler's copy is (`fan_out.rs`). Then its WAL record completes, or, if some
//! handler's copy died, it is recorded `Failed`, naming those handlers, and announced on
//! `_system.dead_letter`. Either way the message stops counting as in flight.
//!
//! A copy on a shared queue (one other processes claim from too) is final alone, on the
//! node that claimed it. Its sender completes the message's record once the backend
//! confirmed every copy (`sender_completions.rs`), so the ack of such a copy usually finds
//! no record to complete, and a death records the dead letter whether or not a record is
//! left (every WAL keeps a dead letter of a message it holds no live record of).

use std::sync::Arc;
use std::time::SystemTime;

use crate::constant::DEAD_LETTER;
use crate::delivery::hub::DeliveryHub;
use crate::delivery::settle::fan_out::{CopyEnded, Failure};
use crate::delivery::subscription::job::{ack_claim, Job};
use crate::delivery::subscription::topic_table::TopicEntry;
use crate::message::ack::DeadReason;
use crate::message::dead_letter::DeadLetterMessage;
use crate::message::emessage::EMessage;

/// Handlers' copies that died, to be settled as the message's dead letter
/// ([`DeliveryHub::settle_dead`]).
#[must_use = "the message is final only once its dead letter is settled"]
pub(crate) struct Dead(Vec<Failure>);

impl DeliveryHub {
    /// A delivery finished with `Ack` (at `ended`, if the worker read the clock), with the
    /// messages its handler's outbox held. Returns the dead letter to settle when this ended
    /// the message but an earlier delivery of it had died (a broadcast copy, another
    /// handler's).
    ///
    /// When this ack completes the message, the held messages go to the WAL in the same
    /// record as the completion; when it does not (other copies are still out), they are
    /// released at once, as sends of their own.
    #[inline]
    pub(crate) fn finish_ok(
        &self,
        entry: &TopicEntry,
        job: &Job,
        ended: Option<SystemTime>,
        held: Vec<Arc<EMessage>>,
    ) -> Option<Dead> {
        let failure = match &job.group {
            None => None,
            Some(group) => {
                if !group.finish_one() {
                    self.release_held(held);
                    return None;
                }
                group.failure().cloned()
            }
        };
        // The handler's copy ended: its queue entry (if the queue needs acks) is done.
        ack_claim(job);
        let Some(outcome) = self.copy_ended(entry, job, failure) else {
            self.release_held(held);
            return None;
        };
        match outcome {
            Ok(()) if held.is_empty() => {
                self.complete(&job.message.id, ended);
                self.message_final(entry);
                None
            }
            Ok(()) => {
                self.complete_with(&job.message.id, ended, held);
                self.message_final(entry);
                None
            }
            Err(dead) => {
                self.release_held(held);
                Some(dead)
            }
        }
    }

    /// The acked deliveries of one batch (a batch handler's call, ended at `ended` if the
    /// worker read the clock): the messages they complete are completed together
    /// (`Wal::complete_batch`), then their queue entries acked. Returns the dead letters to
    /// settle, as [`finish_ok`](Self::finish_ok) does for one.
    pub(crate) fn finish_batch_ok(
        &self,
        entry: &TopicEntry,
        jobs: &[Job],
        ended: Option<SystemTime>,
    ) -> Vec<Dead> {
        let mut complete: Vec<&str> = Vec::with_capacity(jobs.len());
        let mut ended_copies: Vec<&Job> = Vec::with_capacity(jobs.len());
        let mut dead = Vec::new();
        for job in jobs {
            let failure = match &job.group {
                None => None,
                Some(group) => {
                    if !group.finish_one() {
                        continue;
                    }
                    group.failure().cloned()
                }
            };
            ended_copies.push(job);
            match self.copy_ended(entry, job, failure) {
                None => {}
                Some(Ok(())) => complete.push(&job.message.id),
                Some(Err(d)) => dead.push(d),
            }
        }
        for id in &complete {
            // Into the dedup window before the records leave the WAL (see `delivery/dedup/dedup_window.rs`).
            self.dedup.completed(id, ended);
        }
        if !complete.is_empty() {
            if let Err(e) = self.wal.complete_batch(&complete) {
                tracing::error!(target: crate::constant::target::DELIVERY, messages = complete.len(), error = %e, "could not mark a batch's messages complete; they may be delivered again after a restart");
            }
        }
        // Acked after the completions are recorded, so a crash in between delivers again.
        for job in ended_copies {
            ack_claim(job);
        }
        for _ in &complete {
            self.message_final(entry);
        }
        dead
    }

    /// Completes message `id` and appends the messages its handler's outbox held, in one
    /// WAL commit, then queues them.
    fn complete_with(&self, id: &str, at: Option<SystemTime>, held: Vec<Arc<EMessage>>) {
        self.dedup.completed(id, at);
        if let Err(e) = self.wal.complete_with(id, &held) {
            tracing::error!(target: crate::constant::target::DELIVERY, %id, error = %e, "could not record the completion and the outbox's messages; the message will be delivered again after a restart, and its handler will send them again");
        }
        self.queue_released_all(held);
    }

    /// Sends what an outbox held now, each as a send of its own (the ack that released them
    /// does not complete its message yet).
    fn release_held(&self, held: Vec<Arc<EMessage>>) {
        // Nearly always nothing: every ack of a fanned-out message's copy but the last comes
        // here, and the routing of an empty batch costs more than the check.
        if held.is_empty() {
            return;
        }
        let mut appended = Vec::with_capacity(held.len());
        for message in held {
            match self.wal.append(&message) {
                Ok(_commit) => appended.push(message),
                Err(e) => {
                    tracing::error!(target: crate::constant::target::DELIVERY, id = %message.id, error = %e, "could not append a message the outbox released; it is lost")
                }
            }
        }
        self.queue_released_all(appended);
    }

    /// A delivery ended as a dead letter.
    pub(crate) async fn dead_letter(&self, entry: &TopicEntry, job: &Job, reason: DeadReason) {
        let message = &job.message;
        entry.counters.dead();
        tracing::warn!(target: crate::constant::target::DELIVERY, id = %message.id, topic = %message.topic, handler = %entry.handler, attempts = message.attempts, %reason, "message dead-lettered");
        let reason = match &job.group {
            None => reason,
            Some(group) => {
                group.mark_failed(reason.clone());
                if !group.finish_one() {
                    return;
                }
                group.failure().cloned().unwrap_or(reason)
            }
        };
        match self.copy_ended(entry, job, Some(reason)) {
            None => {}
            Some(Ok(())) => {
                // Not reached (this copy died, so the outcome carries a failure); kept so
                // the message is final whatever happens.
                self.complete(&message.id, None);
                self.message_final(entry);
            }
            Some(Err(dead)) => self.settle_dead(entry, dead).await,
        }
        // Acked after the dead letter is recorded, so a crash in between delivers it again
        // rather than lose it.
        ack_claim(job);
    }

    /// The message's dead letter: recorded `Failed` in the WAL, naming the handlers whose copy
    /// died, then announced; then the message is final.
    pub(crate) async fn settle_dead(&self, entry: &TopicEntry, dead: Dead) {
        let Dead(failures) = dead;
        let Some(first) = failures.first() else {
            self.message_final(entry);
            return;
        };
        let handlers: Vec<String> = failures.iter().map(|f| f.handler.to_string()).collect();
        let message = &first.message;
        if let Err(e) = self.wal.fail(message, &first.reason, &handlers) {
            tracing::error!(target: crate::constant::target::DELIVERY, id = %message.id, error = %e, "could not record dead letter in the WAL");
        }
        // Announce before the message counts as final, so `wait_idle` also covers the
        // announcement.
        if !message.topic.is_system() {
            let dead = DeadLetterMessage {
                message: (**message).clone(),
                reason: first.reason.clone(),
                attempts: message.attempts,
                died_at: SystemTime::now(),
                handlers,
            };
            self.announce(DEAD_LETTER, &dead).await;
        }
        self.message_final(entry);
    }

    /// One handler's copy of `message` ended (`failure`: as a dead letter). `None` while
    /// other handlers' copies are out; else the message's outcome.
    fn copy_ended(
        &self,
        entry: &TopicEntry,
        job: &Job,
        failure: Option<DeadReason>,
    ) -> Option<Result<(), Dead>> {
        let message = &job.message;
        entry.counters.finished();
        let failure = failure.map(|reason| Failure {
            handler: entry.handler.clone(),
            reason,
            message: message.clone(),
        });
        // A copy of a shared queue is final alone: its sender opened no fan-out for it, and
        // the node that claimed it may not be the sender (`fan_out.rs`); the sender completes
        // the record once the backend confirmed every copy.
        let counted = job.copies.zip(entry.copies.as_ref());
        let failures = if let Some((i, slab)) = counted {
            // Counted by the topic log's state words (`copy_slab.rs`): no look-up by id.
            match slab.copy_ended(i, failure) {
                CopyEnded::Waiting => return None,
                CopyEnded::Alone(failure) => failure.into_iter().collect(),
                CopyEnded::Last(failures) => failures,
            }
        } else if entry.fan_out && !entry.claim_counted {
            match self.fan_outs.copy_ended(&message.id, failure) {
                CopyEnded::Waiting => return None,
                CopyEnded::Alone(failure) => failure.into_iter().collect(),
                CopyEnded::Last(failures) => failures,
            }
        } else {
            match failure {
                None => return Some(Ok(())),
                Some(f) => vec![f],
            }
        };
        Some(if failures.is_empty() {
            Ok(())
        } else {
            Err(Dead(failures))
        })
    }

    /// A message reached its final state (complete or dead).
    #[inline]
    fn message_final(&self, entry: &TopicEntry) {
        if entry.fan_out {
            // The copies were counted by their handlers; the topic counts the message.
            if let Some(route) = self.topics.get(entry.topic.as_str()) {
                route.counters().finished();
            }
        }
        // A shared queue's entry counted at its claim, and is done when settled (`Held`).
        if !entry.claim_counted {
            self.in_flight.done();
        }
    }

    fn complete(&self, id: &str, at: Option<SystemTime>) {
        // Into the dedup window before the record leaves the WAL (see `delivery/dedup/dedup_window.rs`).
        self.dedup.completed(id, at);
        if let Err(e) = self.wal.complete(id) {
            tracing::error!(target: crate::constant::target::DELIVERY, %id, error = %e, "could not mark message complete; it may be delivered again after a restart");
        }
    }
}
