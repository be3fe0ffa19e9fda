//! The queue contract: a [`TopicQueue`] per topic (made by a
//! [`QueueFactory`](crate::backend::QueueFactory)), an [`EProducer`] to put messages in and an
//! [`EConsumer`] to claim them.
//!
//! The shape follows a Redis Streams consumer group so that backend implements it directly:
//! [`EConsumer::claim_batch`] is `XREADGROUP COUNT n`, [`EConsumer::ack`] is `XACK`,
//! [`EConsumer::nack`] leaves entries pending for another claim, and
//! [`EConsumer::claim_stale`] is `XAUTOCLAIM` of entries whose consumer died, and
//! [`EConsumer::retry_later`] settles an entry into the subscription's delayed set. In-memory
//! channels need no acknowledgement (the WAL holds the truth) and say so through
//! [`EConsumer::requires_ack`], which lets the router skip those calls.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::error::QueueError;
use crate::message::delivery_mode::DeliveryMode;
use crate::message::emessage::EMessage;

/// The key a message is ordered by in each subscription (see `EMessage::with_key`): its key,
/// if it is a `Standard` message for no worker in particular. A `Broadcast`, `Repeated(n)`
/// or addressed message carries its key but is not held by it (those are per-worker
/// deliveries). A backend that keeps order per key across processes (Redis: a keyed stream
/// read by one lease holder) routes by this, so that it and the bus agree on what is
/// ordered.
#[inline]
pub fn ordering_key(message: &EMessage) -> Option<&str> {
    let key = message.key()?;
    (message.delivery_mode == DeliveryMode::Standard && message.to_worker.is_none()).then_some(key)
}

/// A backend's handle on a claimed entry (for Redis, the stream entry id `ms-seq`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Receipt {
    /// High part (Redis: milliseconds).
    pub hi: u64,
    /// Low part (Redis: sequence).
    pub lo: u64,
}

/// A message claimed from a queue.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The message.
    pub message: Arc<EMessage>,
    /// What to hand back to `ack`/`nack`.
    pub receipt: Receipt,
}

/// Why `try_send` did not enqueue.
#[derive(Debug, thiserror::Error)]
pub enum TrySendError {
    /// The queue is full; the message is handed back.
    #[error("the queue is full; message `{}` was handed back", .0.id)]
    Full(Arc<EMessage>),
    /// The queue failed.
    #[error(transparent)]
    Failed(QueueError),
}

/// The sending side of a topic's queue.
#[async_trait]
pub trait EProducer: Send + Sync + 'static {
    /// Enqueues without waiting.
    fn try_send(&self, message: Arc<EMessage>) -> Result<(), TrySendError>;

    /// Enqueues, waiting while the queue is full (backpressure).
    async fn send(&self, message: Arc<EMessage>) -> Result<(), QueueError>;

    /// Messages currently queued (best effort).
    fn len(&self) -> usize;

    /// Whether nothing is queued (best effort).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the queue itself keeps messages that are due later (`deliver_at` ahead) and
    /// releases each to its consumers when it is due. The bus then hands such messages to
    /// `try_send`/`send` at once, instead of holding them in its in-process scheduler (where
    /// a crash of the process would lose them unless its WAL replays them), and routes what
    /// the queue's consumer claims without holding it back for its `deliver_at` again (the
    /// queue's clock decided). Default `false`.
    fn keeps_delayed(&self) -> bool {
        false
    }

    /// Takes back the delayed message `id` that this queue keeps
    /// ([`keeps_delayed`](Self::keeps_delayed)) before it is due: `Ok(true)` if it was
    /// waiting here and now never will be released, `Ok(false)` if it is not (unknown, due
    /// already, or taken back before). Atomic against the release of due messages. The
    /// default, for queues that keep no delayed messages, answers `Ok(false)`
    /// (`EventBus::cancel` asks every subscription's queue that keeps them).
    async fn cancel_delayed(&self, id: &str) -> Result<bool, QueueError> {
        let _ = id;
        Ok(false)
    }

    /// Whether node `node` of a shared backend reads this subscription's messages addressed
    /// to its workers (`to_worker: "<node>/<worker>"`) now, so that a send of one would not
    /// be refused with [`QueueError::UnknownNode`]: the bus asks it once per node before it
    /// sends a batch holding such messages. Only a look (the send checks again). The
    /// default, `true`, is for backends without nodes.
    async fn reads_addressed(&self, node: &str) -> Result<bool, QueueError> {
        let _ = node;
        Ok(true)
    }

    /// The id of the node that `node`, the node part of a `to_worker: "<node>/<worker>"`,
    /// names when it is a node *name* rather than an id: the one running node of that name
    /// that reads this subscription's addressed messages. `Ok(None)`: `node` is an id, to be
    /// used as it is (the default, for backends without node names). None of that name:
    /// [`QueueError::UnknownNode`]; several: [`QueueError::AmbiguousNode`].
    async fn resolve_node(&self, node: &str) -> Result<Option<String>, QueueError> {
        let _ = node;
        Ok(None)
    }
}

/// The claiming side of a topic's queue.
#[async_trait]
pub trait EConsumer: Send + Sync + 'static {
    /// Waits for at least one message, then appends up to `max` to `out` without waiting
    /// further. Returns how many were added.
    ///
    /// # Cancel safety
    ///
    /// Must be cancel-safe: a worker waits on it in a `select!` and drops it when work
    /// reaches the worker another way first. Dropped before it returns, it loses nothing: a
    /// message it had taken off the queue is claimed by a later call or, when claims must
    /// be acknowledged, is found by [`claim_stale`](Self::claim_stale). (A channel whose
    /// receive future drops what a sender handed it, as kanal's does, is waited on some
    /// other way: `MpmcQueueFactory` waits on a `Notify` and takes with `try_recv`.)
    async fn claim_batch(&self, max: usize, out: &mut Vec<Claimed>) -> Result<usize, QueueError>;

    /// Appends up to `max` messages that are ready now to `out`, without waiting. Returns how
    /// many were added. Backends that cannot claim without waiting keep the default (none).
    fn try_claim(&self, max: usize, out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        let _ = (max, out);
        Ok(0)
    }

    /// A bell the queue rings ([`Notify::notify_one`]) after every message it accepts, and
    /// for every waiter ([`Notify::notify_waiters`]) when it closes, so that a
    /// [`try_claim`](Self::try_claim) made after the ring finds the message (or the queue
    /// closed). `None` (the default): the bus waits in [`claim_batch`](Self::claim_batch).
    ///
    /// A worker of a queue with a bell parks on the bell and claims with `try_claim`: it
    /// listens, looks once more, and only then waits, so a ring between its look and its
    /// wait is not missed. Waiting on a bell allocates nothing, where each call of the
    /// boxed `claim_batch` future allocates (and a channel's own wait may register a hook):
    /// a worker whose queue is often empty parks after nearly every message. Only queues
    /// that also answer [`requires_ack`](Self::requires_ack) with `false` are waited on
    /// this way.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use event_base_core::backend::{Claimed, EConsumer};
    /// use event_base_core::QueueError;
    /// # use std::time::Duration;
    /// use tokio::sync::Notify;
    ///
    /// struct Rung {
    ///     bell: Arc<Notify>,
    /// }
    ///
    /// #[async_trait::async_trait]
    /// impl EConsumer for Rung {
    ///     fn bell(&self) -> Option<&Notify> {
    ///         Some(&self.bell)
    ///     }
    ///     # async fn claim_batch(&self, _: usize, _: &mut Vec<Claimed>) -> Result<usize, QueueError> { Ok(0) }
    ///     # async fn ack(&self, _: &[Claimed]) -> Result<(), QueueError> { Ok(()) }
    ///     # async fn nack(&self, _: &[Claimed]) -> Result<(), QueueError> { Ok(()) }
    ///     # async fn claim_stale(&self, _: Duration, _: usize, _: &mut Vec<Claimed>) -> Result<usize, QueueError> { Ok(0) }
    ///     // ... claim_batch, try_claim, ack, nack, claim_stale
    /// }
    /// let q = Rung { bell: Arc::new(Notify::new()) };
    /// assert!(q.bell().is_some());
    /// ```
    fn bell(&self) -> Option<&Notify> {
        None
    }

    /// Whether claims must be acknowledged. `false` (in-memory channels) lets each worker
    /// claim for itself; `true` runs one router task per topic that claims in batches and
    /// acks them.
    fn requires_ack(&self) -> bool {
        true
    }

    /// Asks the consumer to claim nothing new: called once, when the bus it serves begins to
    /// shut down and its queue is shared with other processes (their consumers take what
    /// this one leaves). Entries already claimed are still settled through it as usual.
    ///
    /// `true`: it will. A [`claim_batch`](Self::claim_batch) waiting now returns soon, with
    /// what it had already claimed (if anything), and the later ones return what it still
    /// holds claimed for them, then [`QueueError::Closed`]; the bus calls `claim_batch`
    /// until then. `false` (the default): the bus cancels a claim that is waiting (as it
    /// does with every task at the end of a shutdown) and calls `claim_batch` no more.
    fn stop_claiming(&self) -> bool {
        false
    }

    /// Confirms the claimed entries are taken care of.
    async fn ack(&self, claimed: &[Claimed]) -> Result<(), QueueError>;

    /// Gives entries back for another claim.
    async fn nack(&self, claimed: &[Claimed]) -> Result<(), QueueError>;

    /// Whether the claim of `claimed` may have been lost since it was made or last renewed:
    /// its lease may have run out (the process was paused, or too busy to renew it) and
    /// another consumer may have taken the entry over. A worker asks before it starts a
    /// handler on a claimed entry, on every delivery, so it must answer from memory (no
    /// I/O); only when it says `true` does the worker ask the backend with
    /// [`confirm_claim`](Self::confirm_claim). `false` (the default): claims cannot be lost,
    /// or the backend does not track them.
    fn claim_in_doubt(&self, claimed: &Claimed) -> bool {
        let _ = claimed;
        false
    }

    /// Asks the backend whether `claimed` is still this consumer's, renewing its lease if it
    /// is; called only for a claim [in doubt](Self::claim_in_doubt), before its handler
    /// starts. [`ClaimStatus::Lost`]: another consumer owns the entry now; the worker drops
    /// its delivery without running the handler (the new owner runs it) and neither acks
    /// nor gives the entry back. A backend should confirm in one call every claim it holds
    /// that is in doubt (after a pause they all are), so that the workers that ask next find
    /// theirs decided. `Err`: nothing is known; the worker runs the handler (at least once)
    /// and logs the error at debug level only, so the backend should log a failed
    /// confirmation itself, once per attempt. The default answers [`ClaimStatus::Held`].
    async fn confirm_claim(&self, claimed: &Claimed) -> Result<ClaimStatus, QueueError> {
        let _ = claimed;
        Ok(ClaimStatus::Held)
    }

    /// Claims entries another consumer claimed but did not ack within `min_idle`.
    async fn claim_stale(
        &self,
        min_idle: Duration,
        max: usize,
        out: &mut Vec<Claimed>,
    ) -> Result<usize, QueueError>;

    /// Whether the queue keeps the delayed retries of its claimed entries itself
    /// ([`retry_later`](Self::retry_later)). The bus then hands it the retry of a claimed
    /// entry that stands for one delivery (a `Standard` message for no worker in particular)
    /// instead of holding the retry in its in-process scheduler with the entry still
    /// claimed: the lease is not held through the backoff, and the retry, with its
    /// `attempts`, outlives the process. Read only for claimed entries that fail with a
    /// delay, so a queue without acknowledgement never pays for it. Default `false`.
    fn keeps_retries(&self) -> bool {
        false
    }

    /// Settles `claimed` and keeps `next`, its next attempt (`attempts` already counted,
    /// `deliver_at` set), until `delay` has passed by the queue's clock, then releases it to
    /// this consumer's subscription only (not to the topic's other handlers), for any of its
    /// consumers to claim. Both happen together or not at all, and only while this consumer
    /// still owns the entry.
    ///
    /// `Ok(`[`QueuedRetry::Fenced`]`)`: another consumer has taken the entry over; nothing
    /// changed, its new owner decides. `Err`: nothing is known to have changed, the entry is
    /// still claimed here, and the bus retries in its own scheduler instead (should the
    /// queue have kept the retry after all, the message is delivered twice: at least once).
    /// Called only when [`keeps_retries`](Self::keeps_retries) says `true`; the default
    /// refuses.
    async fn retry_later(
        &self,
        claimed: &Claimed,
        next: &Arc<EMessage>,
        delay: Duration,
    ) -> Result<QueuedRetry, QueueError> {
        let _ = (claimed, next, delay);
        Err(QueueError::Backend(
            "this queue does not keep retries; EConsumer::keeps_retries must answer false".into(),
        ))
    }
}

/// Whether a consumer still holds a claim, as [`EConsumer::confirm_claim`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClaimStatus {
    /// Still this consumer's, its lease renewed: the handler may start.
    Held,
    /// Another consumer took the entry over (its lease ran out here): it is the new owner's
    /// to handle and settle.
    Lost,
}

/// What became of a retry handed to the queue with [`EConsumer::retry_later`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueuedRetry {
    /// The queue keeps the next attempt; the claimed entry is settled.
    Kept,
    /// The consumer no longer owns the entry (its lease ran out and another consumer took
    /// it over): nothing changed, and the new owner decides what happens to it.
    Fenced,
}

/// The two ends of one topic's queue.
#[derive(Clone)]
pub struct TopicQueue {
    /// Sending side.
    pub producer: Arc<dyn EProducer>,
    /// Claiming side.
    pub consumer: Arc<dyn EConsumer>,
}

impl std::fmt::Debug for TopicQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicQueue")
            .field("queued", &self.producer.len())
            .finish_non_exhaustive()
    }
}
