//! A unit of work handed from the router to a worker, and the queue entry it came from.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::backend::queue::{Claimed, EConsumer, QueuedRetry};
use crate::delivery::in_flight::Held;
use crate::error::QueueError;
use crate::message::ack::DeadReason;
use crate::message::delivery_mode::DeliveryMode;
use crate::message::emessage::EMessage;

/// Shared by the deliveries of one `Broadcast` or `Repeated(n)` message within one handler:
/// the handler's copy is finished when the last of them is.
#[derive(Debug)]
pub(crate) struct DeliveryGroup {
    remaining: AtomicU32,
    /// Why the first of them that died did.
    failure: OnceLock<DeadReason>,
}

impl DeliveryGroup {
    pub(crate) fn new(n: u32) -> Arc<Self> {
        Arc::new(DeliveryGroup {
            remaining: AtomicU32::new(n),
            failure: OnceLock::new(),
        })
    }

    /// Counts one delivery done; `true` for the last one.
    pub(crate) fn finish_one(&self) -> bool {
        self.remaining.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// One delivery died for `reason` (the first reason is kept).
    pub(crate) fn mark_failed(&self, reason: DeadReason) {
        let _ = self.failure.set(reason);
    }

    /// Why the first delivery that died did, if one did.
    pub(crate) fn failure(&self) -> Option<&DeadReason> {
        self.failure.get()
    }
}

/// Whether `message` is a plain delivery: `Standard`, due now (no `deliver_at` at all), for
/// no worker in particular. A claimed plain message of the subscription's own topic is
/// simply the claiming worker's next job (`ConsumerRouter::plain_job`); any other is routed.
#[inline]
pub(crate) fn is_plain(message: &EMessage) -> bool {
    message.delivery_mode == DeliveryMode::Standard
        && message.deliver_at.is_none()
        && message.to_worker.is_none()
}

/// One delivery.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) message: Arc<EMessage>,
    pub(crate) group: Option<Arc<DeliveryGroup>>,
    /// The queue entry the delivery came from, when the queue needs acknowledgement: acked
    /// when the handler's copy ends (all of a group's deliveries share it).
    pub(crate) claim: Option<Arc<ClaimTicket>>,
    /// The message's index in its topic log's state words (`TopicEntry::copies`), when the
    /// log took it once for every handler: the copy begins and ends there, not in the
    /// fan-out table. Kept through retries and a hand-over.
    pub(crate) copies: Option<u32>,
}

/// What the settler of a subscription (`consumer_router.rs`, `run_settler`) does with a
/// claimed entry.
#[derive(Debug)]
pub(crate) enum Settle {
    /// The handler's copy ended (acked or dead-lettered): `EConsumer::ack`.
    Ack(Claimed, Option<Arc<Held>>),
    /// Dropped before its copy ended (shutdown, a lost hand-off): `EConsumer::nack`, so
    /// another consumer takes it at once.
    Nack(Claimed, Option<Arc<Held>>),
}

/// A claimed entry of a queue that needs acknowledgement, travelling with its deliveries
/// (and their retries) until the handler's copy ends. Settled once: [`ack`](Self::ack) when
/// the copy ends, [`keep`](Self::keep) to leave it pending with this consumer; dropped
/// unsettled, it is given back (`nack`). Never acknowledged by being dropped: that would
/// turn a lost hand-off into a lost message.
///
/// `held`, for a queue shared by several processes, counts the entry in flight in this
/// process until both the ticket is gone and the settler has written the ack (or the give
/// back): the settle message carries a second handle.
#[derive(Debug)]
pub(crate) struct ClaimTicket {
    claimed: Claimed,
    settler: flume::Sender<Settle>,
    settled: AtomicBool,
    held: Option<Arc<Held>>,
}

impl ClaimTicket {
    pub(crate) fn new(
        claimed: Claimed,
        settler: flume::Sender<Settle>,
        held: Option<Arc<Held>>,
    ) -> Arc<Self> {
        Arc::new(ClaimTicket {
            claimed,
            settler,
            settled: AtomicBool::new(false),
            held,
        })
    }

    /// The claimed entry.
    pub(crate) fn claimed(&self) -> &Claimed {
        &self.claimed
    }

    /// Another consumer took the entry over (`EConsumer::confirm_claim` answered
    /// `ClaimStatus::Lost`): neither acked nor given back, it is the new owner's to settle.
    pub(crate) fn lost(&self) {
        self.settled.store(true, Ordering::Release);
    }

    /// The handler's copy ended: acknowledge the entry (once, whoever calls).
    pub(crate) fn ack(&self) {
        if !self.settled.swap(true, Ordering::AcqRel) {
            let _ = self
                .settler
                .send(Settle::Ack(self.claimed.clone(), self.held.clone()));
        }
    }

    /// Hands the entry's retry to its queue ([`EConsumer::retry_later`]): settled by the
    /// queue if it kept the retry, or found taken over (fenced); still unsettled, for the
    /// bus to retry itself, on an error.
    pub(crate) async fn retry_later(
        &self,
        consumer: &dyn EConsumer,
        next: &Arc<EMessage>,
        delay: Duration,
    ) -> Result<QueuedRetry, QueueError> {
        let r = consumer.retry_later(&self.claimed, next, delay).await;
        if r.is_ok() {
            // Kept or fenced: the entry is no longer this consumer's to ack or give back.
            self.settled.store(true, Ordering::Release);
        }
        r
    }

    /// Leaves the entry pending with this consumer, neither acked nor given back (a
    /// broadcast that found no running worker: it waits for the next start, as the WAL's
    /// record does for in-memory queues).
    pub(crate) fn keep(&self) {
        self.settled.store(true, Ordering::Release);
    }
}

impl Drop for ClaimTicket {
    fn drop(&mut self) {
        if !*self.settled.get_mut() {
            let _ = self
                .settler
                .send(Settle::Nack(self.claimed.clone(), self.held.take()));
        }
    }
}

/// Acknowledges the entry of `job`'s handler copy, if it came from a queue that needs it.
#[inline]
pub(crate) fn ack_claim(job: &Job) {
    if let Some(t) = &job.claim {
        t.ack();
    }
}

/// Which worker may take a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// Any idle worker of the topic.
    Any,
    /// The worker at this index of the topic's worker list.
    Worker(usize),
}
