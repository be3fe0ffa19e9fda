//! [`ConsumerRouter`]: takes a topic's messages from its queue and hands them to workers.
//!
//! Routing is the same whoever claims the message:
//!
//! - a message addressed to a worker (`to_worker`) goes to that worker; a name the topic does
//!   not know makes it a dead letter with [`DeadReason::UnknownWorker`], never a drop;
//! - `Broadcast` gives a copy to every worker of the topic;
//! - `Standard` goes to the next idle worker; `Repeated(n)` is handed out `n` times;
//! - a message whose `deliver_at` is still ahead goes to the scheduler, unless its queue keeps
//!   delayed messages itself (`EProducer::keeps_delayed`: it released the message when due);
//! - a message on the wrong topic becomes a dead letter rather than reach a handler that
//!   would misread it.
//!
//! Who claims depends on the queue:
//!
//! - **Queues that need acknowledgement** (a Redis Streams consumer group): one router task per
//!   subscription claims up to `batch_size` messages at once (default 64) and routes them.
//!   Each claimed entry travels with its deliveries (and their retries) as a claim ticket
//!   (`job.rs`) and is acknowledged only when the handler's copy ends (acked or dead), by a
//!   settler task that acks in batches what finished meanwhile: a process that dies
//!   mid-message leaves its entries pending, for another consumer to claim. When every
//!   worker is busy the shared work channel fills and the router waits on it (an `await`, no
//!   spinning) until a worker takes the next job. When the queue is shared with other
//!   processes, the router of a user's handler stops claiming as soon as its bus begins to
//!   shut down (`EConsumer::stop_claiming`): it routes what it had claimed and ends, and the
//!   shutdown waits for that (`bus/stop/coordinator.rs`), so a draining node takes no new
//!   work and what the queue still holds goes to the other nodes.
//! - **In-memory queues** (no acknowledgement): there is no router task. Each idle worker
//!   claims the next message itself and runs the routing above, keeping the message when it
//!   is its own to handle. This saves a task hand-off per message, which on the memory path
//!   costs as much as the channel itself; an idle worker is by construction the one that
//!   claims. Copies for other workers are handed over without ever blocking the claimer.
//!
//! Workers never wait on a channel that only they drain: retries come back through the
//! scheduler or detached hand-offs, so a full channel cannot deadlock the topic.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::backend::queue::{Claimed, EConsumer, Receipt};
use crate::delivery::hub::DeliveryHub;
use crate::delivery::in_flight::Held;
use crate::delivery::send::scheduler::Scheduled;
use crate::delivery::subscription::job::{
    is_plain, ClaimTicket, DeliveryGroup, Job, Settle, Target,
};
use crate::delivery::subscription::topic_table::TopicEntry;
use crate::error::QueueError;
use crate::message::ack::DeadReason;
use crate::message::delivery_mode::DeliveryMode;
use crate::message::emessage::EMessage;
use crate::message::topic::MessageTopic;

/// The dispatcher of one topic: takes its messages from the queue and hands each to the
/// worker it belongs to (see the module docs for the rules).
///
/// The bus creates one per topic; an application never holds one. What it decides, a user
/// sets elsewhere: the claim batch with `EventBusBuilder::batch_size` (or
/// `start_system!(batch_size: n)`), the routing with `EMessage::delivery_mode` and
/// `to_worker`, whether it runs as a task of its own by the queue backend it uses
/// (`EConsumer::requires_ack`). The type is public so that these docs, and the design it follows,
/// can name it.
pub struct ConsumerRouter {
    shared: Arc<DeliveryHub>,
    entry: Arc<TopicEntry>,
    batch_size: usize,
    /// Held while it may claim, by a router that stops claiming when the bus shuts down
    /// ([`stops_at_shutdown`](Self::stops_at_shutdown)): the shutdown waits for every one
    /// to be dropped.
    claiming: Option<tokio::sync::watch::Receiver<()>>,
}

impl std::fmt::Debug for ConsumerRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerRouter")
            .field("topic", &self.entry.topic)
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}

impl ConsumerRouter {
    pub(crate) fn new(shared: Arc<DeliveryHub>, entry: Arc<TopicEntry>) -> Self {
        let batch_size = shared.batch_size.max(1);
        // Subscribed here, before any shutdown can begin, not when the task first runs.
        let claiming = (entry.claim_counted && !entry.topic.is_system())
            .then(|| shared.stopping.claimers.subscribe());
        ConsumerRouter {
            shared,
            entry,
            batch_size,
            claiming,
        }
    }

    /// The topic it serves.
    pub fn topic(&self) -> &MessageTopic {
        &self.entry.topic
    }

    /// Messages claimed at once by the router task.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Whether workers claim from the queue themselves (in-memory queues) instead of a
    /// router task.
    pub fn workers_claim_directly(&self) -> bool {
        !self.entry.consumer.requires_ack()
    }

    /// Whether the router stops claiming as soon as its bus begins to shut down: that of a
    /// user's handler on a queue other processes share (their consumers take what it
    /// leaves), so a draining node settles what it holds and takes no new work. Routers of
    /// queues only this process reads, and of `_system.` topics (the shutdown's own acks
    /// travel on them), claim until the bus's tasks end.
    pub fn stops_at_shutdown(&self) -> bool {
        self.claiming.is_some()
    }

    /// The router task, for queues that need acknowledgement. Runs until the queue closes,
    /// the system stops, or, if it [stops at shutdown](Self::stops_at_shutdown), the bus
    /// begins to shut down: it then asks the consumer to stop claiming
    /// ([`EConsumer::stop_claiming`]), routes what the consumer still returns, and ends.
    /// Claimed entries are acknowledged by a settler task of their own once their handler's
    /// copy ends; that task outlives this one until the last ticket is settled, so a
    /// stopping bus still acks what its workers finished.
    pub(crate) async fn run(self) {
        let consumer = self.entry.consumer.clone();
        let (settle_tx, settle_rx) = flume::unbounded();
        tokio::spawn(run_settler(
            consumer.clone(),
            settle_rx,
            self.entry.topic.clone(),
        ));
        let mut batch: Vec<Claimed> = Vec::with_capacity(self.batch_size);
        let mut backoff = Duration::from_millis(50);
        // Until the bus stops accepting; once the consumer was asked to stop claiming, its
        // claims return what it still holds for this router, then Closed.
        let mut watch_shutdown = self.stops_at_shutdown();
        loop {
            if self.entry.pause.is_paused() {
                // Claims nothing new while paused; the entries wait in the backend.
                tokio::select! {
                    biased;
                    () = self.shared.stopped_accepting(), if watch_shutdown => {}
                    () = self.entry.pause.running() => {}
                }
                if self.entry.pause.is_paused() {
                    return;
                }
            }
            match self.claim(&mut batch, &mut watch_shutdown).await {
                Ok(_) => backoff = Duration::from_millis(50),
                Err(QueueError::Closed(_)) => return,
                Err(e) => {
                    tracing::error!(target: crate::constant::target::QUEUE, topic = %self.entry.topic, error = %e, ?backoff, "claim failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            }
            for claimed in batch.drain(..) {
                let message = claimed.message.clone();
                // In the order claimed: its place in its key's line (`key_order.rs`). A
                // message due later takes its place when due: a queue that keeps delayed
                // messages released it then (its `deliver_at` stays set), otherwise the
                // scheduler sends it to the queue again, to be claimed then.
                if self.entry.keys_at_claim
                    && message.deliver_at.is_none_or(|at| {
                        self.entry.producer.keeps_delayed() || at <= SystemTime::now()
                    })
                {
                    self.entry.keys.enter(&message);
                }
                // Held here from the claim until settled, when other processes share the
                // queue (they do not count what this one claims).
                let held = self
                    .entry
                    .claim_counted
                    .then(|| Held::new(&self.shared.in_flight));
                let ticket = ClaimTicket::new(claimed, settle_tx.clone(), held);
                self.dispatch(message, None, Some(ticket)).await;
            }
        }
    }

    /// One claim into `batch`. While `watch_shutdown`, a shutdown that begins meanwhile asks
    /// the consumer to stop claiming (and clears it): the claim then ends with what the
    /// consumer returns, or, if it cannot stop, is cancelled and answers `Closed`.
    async fn claim(
        &self,
        batch: &mut Vec<Claimed>,
        watch_shutdown: &mut bool,
    ) -> Result<usize, QueueError> {
        let consumer = &self.entry.consumer;
        if !*watch_shutdown {
            return consumer.claim_batch(self.batch_size, batch).await;
        }
        let claim = consumer.claim_batch(self.batch_size, batch);
        tokio::pin!(claim);
        tokio::select! {
            biased;
            () = self.shared.stopped_accepting() => {
                *watch_shutdown = false;
                if consumer.stop_claiming() {
                    claim.await
                } else {
                    Err(QueueError::Closed(self.entry.topic.0.clone()))
                }
            }
            r = &mut claim => r,
        }
    }

    /// The common case, decided without building `dispatch`'s future: a `Standard` message
    /// of this topic, due now, for no worker in particular, is simply the claiming worker's
    /// next job. Any other message is handed back for [`dispatch`](Self::dispatch).
    ///
    /// `receipt`: the claim's; from a topic log that counts copies by state words
    /// (`TopicEntry::copies`), its `hi` is the message's index plus one (0: none). Only plain
    /// messages are counted that way (`delivery/send/accept.rs`), so no index is lost to
    /// `dispatch`.
    #[inline]
    pub(crate) fn plain_job(
        &self,
        message: Arc<EMessage>,
        receipt: Receipt,
    ) -> Result<Job, Arc<EMessage>> {
        let copies = match (&self.entry.copies, receipt.hi) {
            (Some(_), hi) if hi > 0 => u32::try_from(hi - 1).ok(),
            _ => None,
        };
        if is_plain(&message) && message.topic == self.entry.topic {
            Ok(Job {
                message,
                group: None,
                claim: None,
                copies,
            })
        } else {
            debug_assert!(copies.is_none(), "a counted copy is a plain message");
            Err(message)
        }
    }

    /// Routes one message. `claimer` is the index of the worker that claimed it (direct
    /// mode); the job that worker should handle itself is returned. Without a claimer every
    /// job is pushed, waiting for room. `claim`: the queue entry it came from, if the queue
    /// needs acknowledgement; every job made of it carries it.
    pub(crate) async fn dispatch(
        &self,
        message: Arc<EMessage>,
        claimer: Option<usize>,
        claim: Option<Arc<ClaimTicket>>,
    ) -> Option<Job> {
        let entry = &*self.entry;
        if message.topic != entry.topic {
            let reason = DeadReason::Other(format!(
                "message for topic `{}` reached the queue of `{}`",
                message.topic, entry.topic
            ));
            let job = Job {
                message,
                group: None,
                claim,
                copies: None,
            };
            self.shared.dead_letter(entry, &job, reason).await;
            return None;
        }
        if let Some(at) = message.deliver_at {
            // A queue that keeps delayed messages released this one when its clock said so.
            if at > SystemTime::now() && !entry.producer.keeps_delayed() {
                let what = match claim {
                    None => Scheduled::Message {
                        entry: self.entry.clone(),
                        message,
                    },
                    Some(claim) => Scheduled::Claimed {
                        entry: self.entry.clone(),
                        message,
                        claim,
                    },
                };
                self.shared.scheduler.schedule_wall(at, what);
                return None;
            }
        }
        let mut local = None;
        if let Some(name) = &message.to_worker {
            // A name with its node (`<node id>/<worker>`) reached the node it names: the
            // backend hands such a message to that node only (`delivery/remote/addressed.rs`).
            let found = entry.worker_index(name).or_else(|| {
                crate::backend::routes::node_and_worker(name)
                    .and_then(|(_, worker)| entry.worker_index(worker))
            });
            let Some(i) = found else {
                let reason = DeadReason::UnknownWorker(name.clone());
                let job = Job {
                    message,
                    group: None,
                    claim,
                    copies: None,
                };
                self.shared.dead_letter(entry, &job, reason).await;
                return None;
            };
            // Addressed: Standard and Broadcast mean once (the worker is the whole audience),
            // Repeated(n) means n times, all by that worker.
            let times = match message.delivery_mode {
                DeliveryMode::Repeated(n) => n,
                DeliveryMode::Standard | DeliveryMode::Broadcast => 1,
            };
            let to = (Target::Worker(i), claimer);
            self.repeat(message, times, to, claim, &mut local).await;
            return local;
        }
        match message.delivery_mode {
            DeliveryMode::Standard => {
                let to = (Target::Any, claimer);
                self.repeat(message, 1, to, claim, &mut local).await
            }
            DeliveryMode::Repeated(n) => {
                let to = (Target::Any, claimer);
                self.repeat(message, n, to, claim, &mut local).await
            }
            DeliveryMode::Broadcast => {
                let audience = entry.running_workers();
                if audience.is_empty() {
                    // Nobody left to hear it (the topic's workers were all stopped): keep it
                    // in the WAL (or pending in the queue) for the next start rather than
                    // call it delivered. Not on a shared queue: there this node's copy
                    // is its own group's, which no later start reads (a new node), so
                    // kept pending it would only hold back the stream's trimming.
                    if let Some(t) = &claim {
                        if entry.claim_counted {
                            tracing::info!(target: crate::constant::target::DELIVERY, topic = %entry.topic, id = %message.id, "a broadcast reached this node while none of its workers runs; this node's copy is acked unheard");
                            t.ack();
                        } else {
                            t.keep();
                        }
                    }
                    return None;
                }
                let group = DeliveryGroup::new(audience.len() as u32);
                for i in audience {
                    let job = Job {
                        message: message.clone(),
                        group: Some(group.clone()),
                        claim: claim.clone(),
                        copies: None,
                    };
                    self.hand(job, Target::Worker(i), claimer, &mut local).await;
                }
            }
        }
        local
    }

    /// Hands `message` out `times` times to `target`: once without a group, several times
    /// as one group whose record completes with the last delivery, none as an at-once
    /// completion.
    async fn repeat(
        &self,
        message: Arc<EMessage>,
        times: u32,
        (target, claimer): (Target, Option<usize>),
        claim: Option<Arc<ClaimTicket>>,
        local: &mut Option<Job>,
    ) {
        match times {
            0 => {
                let job = Job {
                    message,
                    group: None,
                    claim,
                    copies: None,
                };
                if let Some(dead) = self.shared.finish_ok(&self.entry, &job, None, Vec::new()) {
                    self.shared.settle_dead(&self.entry, dead).await;
                }
            }
            1 => {
                let job = Job {
                    message,
                    group: None,
                    claim,
                    copies: None,
                };
                self.hand(job, target, claimer, local).await;
            }
            n => {
                let group = DeliveryGroup::new(n);
                for _ in 0..n {
                    let job = Job {
                        message: message.clone(),
                        group: Some(group.clone()),
                        claim: claim.clone(),
                        copies: None,
                    };
                    self.hand(job, target, claimer, local).await;
                }
            }
        }
    }

    /// Keeps the first job the claimer may handle; hands every other one over.
    async fn hand(
        &self,
        job: Job,
        target: Target,
        claimer: Option<usize>,
        local: &mut Option<Job>,
    ) {
        match claimer {
            Some(c) => {
                if local.is_none() && (target == Target::Any || target == Target::Worker(c)) {
                    *local = Some(job);
                } else {
                    self.entry.push_detached(job, target);
                }
            }
            None => self.entry.push(job, target).await,
        }
    }
}

/// Settles the claims of one subscription as their handlers' copies end: acks (and gives back
/// dropped ones) in batches, as many as have ended since the last call. Ends when the router
/// and every ticket are gone.
async fn run_settler(
    consumer: Arc<dyn EConsumer>,
    settles: flume::Receiver<Settle>,
    topic: MessageTopic,
) {
    const MAX: usize = 512;
    let mut acks = Vec::new();
    let mut nacks = Vec::new();
    // Counted in flight until their acks (or give-backs) are written.
    let mut held = Vec::new();
    while let Ok(first) = settles.recv_async().await {
        let mut next = Some(first);
        while let Some(s) = next.take() {
            match s {
                Settle::Ack(c, h) => {
                    acks.push(c);
                    held.extend(h);
                }
                Settle::Nack(c, h) => {
                    nacks.push(c);
                    held.extend(h);
                }
            }
            if acks.len() + nacks.len() < MAX {
                next = settles.try_recv().ok();
            }
        }
        if !acks.is_empty() {
            if let Err(e) = consumer.ack(&acks).await {
                tracing::warn!(target: crate::constant::target::QUEUE, %topic, error = %e, entries = acks.len(), "ack failed; the entries stay pending and will be claimed again, so they may be handled twice");
            }
            acks.clear();
        }
        if !nacks.is_empty() {
            if let Err(e) = consumer.nack(&nacks).await {
                tracing::warn!(target: crate::constant::target::QUEUE, %topic, error = %e, entries = nacks.len(), "could not give entries back; they stay pending until claimed as stale");
            }
            nacks.clear();
        }
        held.clear();
    }
}
