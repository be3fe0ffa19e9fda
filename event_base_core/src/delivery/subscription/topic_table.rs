//! The topics of a running system: a [`Route`] per topic, and in it a [`TopicEntry`] per
//! handler (a subscription: its own queue, its workers' channels and its counters).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use crate::backend::queue::{EConsumer, EProducer};
use crate::delivery::log::log_queue::LogAppender;
use crate::delivery::remote::elsewhere::Elsewhere;
use crate::delivery::settle::copy_slab::CopySlab;
use crate::delivery::subscription::job::{Job, Target};
use crate::delivery::subscription::job_channel::{JobReceiver, JobSender};
use crate::delivery::subscription::key_order::KeyOrder;
use crate::delivery::subscription::pause::PauseSwitch;
use crate::delivery::subscription::rate_gate::RateGate;
use crate::delivery::subscription::topic_hasher::TopicMap;
use crate::message::topic::MessageTopic;
use crate::observe::topic_counters::TopicCounters;

/// A worker's private inbox (for `to_worker`, broadcast copies and their retries).
#[derive(Debug)]
pub(crate) struct WorkerSlot {
    pub(crate) name: String,
    pub(crate) inbox: JobSender,
    /// Cleared when the worker is stopped or declared dead; routing then skips it.
    pub(crate) running: AtomicBool,
}

impl WorkerSlot {
    pub(crate) fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }
}

/// The topic table of a bus: one route per subscribed topic, fixed once the bus is built.
pub(crate) type TopicTable = TopicMap<MessageTopic, Arc<Route>>;

/// One topic of a running bus: its subscriptions, one per handler, each receiving a copy of
/// every message sent to the topic.
pub(crate) struct Route {
    pub(crate) topic: MessageTopic,
    /// One per handler of the topic, in declaration order; empty only in a route to
    /// handlers other processes run ([`Route::elsewhere_only`]).
    pub(crate) subs: Box<[Arc<TopicEntry>]>,
    /// Message-level counters (accepted, refused, finished) when the topic has several
    /// handlers; with one, its subscription's counters are the topic's.
    messages: TopicCounters,
    /// The topic's handlers that only other processes run, from a shared backend's
    /// registry (see `delivery/remote/remote_routes.rs`); none with an in-process backend.
    pub(crate) elsewhere: Elsewhere,
    /// Its subscriptions' [`claim_counted`](TopicEntry::claim_counted).
    pub(crate) claim_counted: bool,
    /// The topic's log, when its subscriptions read one (an in-memory backend,
    /// `delivery/log/`): a send for every handler appends there once.
    pub(crate) log: Option<LogAppender>,
}

impl Route {
    pub(crate) fn new(topic: MessageTopic, subs: Vec<Arc<TopicEntry>>) -> Self {
        debug_assert!(!subs.is_empty());
        let claim_counted = subs.iter().any(|s| s.claim_counted);
        Route {
            topic,
            subs: subs.into_boxed_slice(),
            messages: TopicCounters::default(),
            elsewhere: Elsewhere::default(),
            claim_counted,
            log: None,
        }
    }

    /// The route of a topic this process has no handler of: every copy goes to the
    /// handlers other processes run (`elsewhere`), and `subs` is empty.
    pub(crate) fn elsewhere_only(topic: MessageTopic) -> Self {
        Route {
            topic,
            subs: Box::new([]),
            messages: TopicCounters::default(),
            elsewhere: Elsewhere::default(),
            claim_counted: true,
            log: None,
        }
    }

    /// The only subscription, when the topic has one handler (the common case).
    #[inline]
    pub(crate) fn single(&self) -> Option<&Arc<TopicEntry>> {
        match &*self.subs {
            [only] => Some(only),
            _ => None,
        }
    }

    /// The counters of the topic's messages (not of its copies).
    #[inline]
    pub(crate) fn counters(&self) -> &TopicCounters {
        match self.single() {
            Some(only) => &only.counters,
            None => &self.messages,
        }
    }

    /// The subscription of the handler called `handler`.
    pub(crate) fn sub(&self, handler: &str) -> Option<&Arc<TopicEntry>> {
        self.subs.iter().find(|s| &*s.handler == handler)
    }

    /// The subscription with a running worker called `worker`.
    pub(crate) fn sub_with_worker(&self, worker: &str) -> Option<&Arc<TopicEntry>> {
        self.subs.iter().find(|s| s.worker_index(worker).is_some())
    }
}

/// One subscription of a running bus (a handler of a topic): where the send path, the router
/// and the workers meet.
///
/// - `producer`/`consumer`: the topic's queue, filled by senders, claimed by the router or
///   (in-memory queues) by idle workers directly;
/// - `work_tx`/`work_rx`: the shared work channel (retries and repeated copies), where the
///   topic's workers compete;
/// - `workers`: a slot per worker with its private inbox (`to_worker`, broadcast copies);
/// - `counters`: the topic's hot-path recorder.
///
/// Built once by the builder and never removed while the bus runs; everything holds it as
/// an `Arc`.
pub(crate) struct TopicEntry {
    pub(crate) topic: MessageTopic,
    /// The handler this subscription runs.
    pub(crate) handler: Arc<str>,
    /// Whether the topic has other handlers too: a message is then final only once every
    /// handler's copy is (see `delivery/settle/fan_out.rs`).
    pub(crate) fan_out: bool,
    /// Whether its queue is shared by several processes (a shared backend's, one that needs
    /// acks): its messages then count in flight in the process that claims them, from the
    /// claim until the entry is settled (`delivery/in_flight.rs`, `Held`), not where they were
    /// sent.
    pub(crate) claim_counted: bool,
    pub(crate) producer: Arc<dyn EProducer>,
    pub(crate) consumer: Arc<dyn EConsumer>,
    /// Shared by the topic's workers: an idle worker takes the next job (competing consumers).
    pub(crate) work_tx: JobSender,
    pub(crate) work_rx: JobReceiver,
    /// Every worker the topic ever had, in order; a slot's index never changes, stopped ones
    /// stay with `running` cleared. Read on broadcast and addressed routing only, and never
    /// held across an `.await`.
    pub(crate) workers: RwLock<Vec<Arc<WorkerSlot>>>,
    pub(crate) counters: TopicCounters,
    /// Order per key: the lines of its keyed messages (`key_order.rs`).
    pub(crate) keys: Arc<KeyOrder>,
    /// Whether keyed messages enter their lines when the router claims them (queues that
    /// need acks), rather than when the queue takes them (`keyed_producer.rs`).
    pub(crate) keys_at_claim: bool,
    /// Messages a worker claims from the queue at once: a run from a topic log
    /// (`delivery/log/`), one from other in-memory queues.
    pub(crate) claim_run: usize,
    /// Its handler's pace (`HandlerSpec::rate`), if it has one: a worker waits on it before
    /// each start (`rate_gate.rs`).
    pub(crate) rate: Option<RateGate>,
    /// Whether it starts new work (`EventBus::pause`/`resume`).
    pub(crate) pause: PauseSwitch,
    /// The state words of its topic log's fanned-out messages (a log of several handlers):
    /// where a job that carries an index (`Job::copies`) begins and ends its copy.
    pub(crate) copies: Option<Arc<CopySlab>>,
}

impl TopicEntry {
    /// Whether `job`'s copy must mark its message `Processing` in the WAL: a copy counted by
    /// the topic log's state words does only if it is the message's first to begin.
    #[inline]
    pub(crate) fn begins_record(&self, job: &Job) -> bool {
        match (job.copies, &self.copies) {
            (Some(i), Some(slab)) => slab.begin(i),
            _ => true,
        }
    }

    /// `job`'s copy ends without a delivery (its record was withdrawn or finished): a copy
    /// counted by state words gives its count back.
    pub(crate) fn abandon_copy(&self, job: &Job) {
        if let (Some(i), Some(slab)) = (job.copies, &self.copies) {
            let _ = slab.copy_ended(i, None);
        }
    }

    /// Index of the running worker called `name`.
    pub(crate) fn worker_index(&self, name: &str) -> Option<usize> {
        self.workers
            .read()
            .ok()?
            .iter()
            .position(|w| w.name == name && w.is_running())
    }

    /// Indices of every running worker.
    pub(crate) fn running_workers(&self) -> Vec<usize> {
        match self.workers.read() {
            Ok(w) => w
                .iter()
                .enumerate()
                .filter(|(_, s)| s.is_running())
                .map(|(i, _)| i)
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    pub(crate) fn slot(&self, i: usize) -> Option<Arc<WorkerSlot>> {
        self.workers.read().ok()?.get(i).cloned()
    }

    /// Adds a worker slot; returns its index.
    pub(crate) fn add_slot(&self, slot: WorkerSlot) -> usize {
        match self.workers.write() {
            Ok(mut w) => {
                w.push(Arc::new(slot));
                w.len() - 1
            }
            Err(_) => usize::MAX,
        }
    }

    fn sender(&self, target: Target) -> Option<JobSender> {
        match target {
            Target::Any => Some(self.work_tx.clone()),
            Target::Worker(i) => self.slot(i).map(|w| w.inbox.clone()),
        }
    }

    /// Hands a job to the workers, waiting while their channel is full.
    pub(crate) async fn push(&self, job: Job, target: Target) {
        if target == Target::Any {
            if let Err(job) = self.work_tx.try_send(job) {
                // Only fails when the workers are gone (shutdown); the WAL keeps the message.
                let _ = self.work_tx.send(job).await;
            }
            return;
        }
        let Some(tx) = self.sender(target) else {
            return;
        };
        if let Err(job) = tx.try_send(job) {
            let _ = tx.send(job).await;
        }
    }

    /// Hands a job to the workers without ever blocking the caller: if their channel is full,
    /// a task waits for room. Used by the scheduler and by workers, which must never stall on
    /// a channel that workers drain.
    pub(crate) fn push_detached(&self, job: Job, target: Target) {
        let Some(tx) = self.sender(target) else {
            return;
        };
        if let Err(job) = tx.try_send(job) {
            tokio::spawn(async move {
                let _ = tx.send(job).await;
            });
        }
    }
}
