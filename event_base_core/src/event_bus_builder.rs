//! [`EventBusBuilder`]: assembles and starts a system.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::constant::{DEFAULT_BATCH_SIZE, SYSTEM_TOPICS};
use crate::consumer_router::ConsumerRouter;
use crate::error::CoreError;
use crate::event_bus::{EventBus, TaskSet};
use crate::handler::{HandlerSpec, HANDLER_REGISTRY};
use crate::in_flight::InFlight;
use crate::job::Job;
use crate::message::MessageTopic;
use crate::metrics::TopicCounters;
use crate::middleware::{Middleware, Pipeline};
use crate::queue::QueueFactory;
use crate::scheduler::{run_scheduler, SchedulerHandle};
use crate::system::SystemShared;
use crate::topic_entry::{TopicEntry, WorkerSlot};
use crate::wal::Wal;
use crate::worker::Worker;
use crate::worker_registry::{WorkerRegistry, WorkerState};

/// Capacity of each worker's private inbox.
const INBOX_CAPACITY: usize = 1024;

/// Builds an [`EventBus`].
///
/// ```
/// # use event_base_core::*;
/// # fn demo(wal: impl Wal, queue: impl QueueFactory) {
/// let builder = EventBus::builder()
///     .wal(wal)
///     .queue(queue)
///     .batch_size(128)
///     .handler(HandlerSpec::new("echo", "echo", handler_fn(|_m: EMessage| async { Ack::Ack })).workers(2));
/// // let bus = builder.build().await?;
/// # }
/// ```
pub struct EventBusBuilder {
    wal: Option<Arc<dyn Wal>>,
    queue: Option<Arc<dyn QueueFactory>>,
    batch_size: usize,
    handlers: Vec<HandlerSpec>,
    registered: bool,
    global_middleware: Vec<Arc<dyn Middleware>>,
}

impl Default for EventBusBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl EventBusBuilder {
    /// An empty builder: set a WAL and a queue factory, add handlers, then `build()`.
    pub fn new() -> Self {
        EventBusBuilder {
            wal: None,
            queue: None,
            batch_size: DEFAULT_BATCH_SIZE,
            handlers: Vec::new(),
            registered: false,
            global_middleware: Vec::new(),
        }
    }

    /// The WAL (e.g. `MemoryWal::new()`, or an `Arc` of one shared with a later system).
    pub fn wal(mut self, wal: impl Wal) -> Self {
        self.wal = Some(Arc::new(wal));
        self
    }

    /// The queue factory (e.g. `FlumeQueueFactory::default()`).
    pub fn queue(mut self, queue: impl QueueFactory) -> Self {
        self.queue = Some(Arc::new(queue));
        self
    }

    /// Messages the consumer router claims at once (default 64).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n;
        self
    }

    /// Adds a handler by value.
    pub fn handler(mut self, spec: HandlerSpec) -> Self {
        self.handlers.push(spec);
        self
    }

    /// Adds every `#[handler]` in [`HANDLER_REGISTRY`].
    pub fn with_registered_handlers(mut self) -> Self {
        self.registered = true;
        self
    }

    /// Adds a middleware around every handler, outside the handler's own middleware.
    pub fn middleware(mut self, m: impl Middleware) -> Self {
        self.global_middleware.push(Arc::new(m));
        self
    }

    /// Starts the system: spawns its tasks on the current tokio runtime and replays every
    /// unfinished record of the WAL.
    pub async fn build(self) -> Result<EventBus, CoreError> {
        let wal = self.wal.ok_or_else(|| {
            CoreError::Config(
                "no WAL set: call .wal(MemoryWal::new()) (or use start_system!, which picks defaults)"
                    .into(),
            )
        })?;
        let queue = self.queue.ok_or_else(|| {
            CoreError::Config(
                "no queue set: call .queue(FlumeQueueFactory::default()) (or use start_system!)"
                    .into(),
            )
        })?;
        if self.batch_size == 0 {
            return Err(CoreError::Config("batch_size must be at least 1".into()));
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(CoreError::Config(
                "build() must run inside a tokio runtime".into(),
            ));
        }
        let mut specs = self.handlers;
        if self.registered {
            specs.extend(HANDLER_REGISTRY.iter().map(|r| r.to_spec()));
        }
        validate(&specs)?;

        // Group handlers by topic, keeping declaration order.
        let mut order: Vec<MessageTopic> = Vec::new();
        let mut by_topic: HashMap<MessageTopic, Vec<HandlerSpec>> = HashMap::new();
        for spec in specs {
            if !by_topic.contains_key(&spec.topic) {
                order.push(spec.topic.clone());
            }
            by_topic.entry(spec.topic.clone()).or_default().push(spec);
        }

        struct PendingWorker {
            topic: MessageTopic,
            index: usize,
            state: Arc<WorkerState>,
            pipeline: Pipeline,
            spec: HandlerSpec,
            inbox: flume::Receiver<Job>,
        }

        let registry = WorkerRegistry::default();
        let mut topics = HashMap::new();
        let mut pending_workers = Vec::new();
        for topic in &order {
            let handlers = by_topic.remove(topic).unwrap_or_default();
            let q = queue.create(topic)?;
            let total: usize = handlers.iter().map(|h| h.workers).sum();
            let (work_tx, work_rx) = flume::bounded(self.batch_size.max(total));
            let mut slots = Vec::with_capacity(total);
            for spec in handlers {
                let mut layers = self.global_middleware.clone();
                layers.extend(spec.middleware.iter().cloned());
                let pipeline = Pipeline::new(spec.handler.clone(), layers);
                for i in 0..spec.workers {
                    let name = format!("{}-{}", spec.name, i);
                    let (tx, rx) = flume::bounded(INBOX_CAPACITY);
                    let state = Arc::new(WorkerState::new(name.clone(), topic.clone()));
                    registry.register(state.clone());
                    pending_workers.push(PendingWorker {
                        topic: topic.clone(),
                        index: slots.len(),
                        state,
                        pipeline: pipeline.clone(),
                        spec: spec.clone(),
                        inbox: rx,
                    });
                    slots.push(WorkerSlot { name, inbox: tx });
                }
                tracing::info!(handler = %spec.name, topic = %topic, workers = spec.workers, "handler registered");
            }
            topics.insert(
                topic.clone(),
                Arc::new(TopicEntry {
                    topic: topic.clone(),
                    producer: q.producer,
                    consumer: q.consumer,
                    work_tx,
                    work_rx,
                    workers: slots,
                    counters: TopicCounters::default(),
                }),
            );
        }
        if topics.is_empty() {
            tracing::warn!("event_base started with no handlers: every send will be refused with NoHandler. If your handlers live in another crate, name it in the binary (`use my_handlers as _;`)");
        }

        let (scheduler, scheduler_rx) = SchedulerHandle::new();
        let shared = Arc::new(SystemShared {
            wal,
            topics,
            registry,
            scheduler,
            in_flight: InFlight::default(),
            accepting: AtomicBool::new(true),
            batch_size: self.batch_size,
        });
        let tasks = Arc::new(TaskSet::new(shared.clone()));
        tasks.push(tokio::spawn(run_scheduler(scheduler_rx)));
        // One router per topic: run as its own task for queues that need acks, otherwise
        // shared by the topic's workers, which claim for themselves.
        let mut routers: HashMap<MessageTopic, Arc<ConsumerRouter>> = HashMap::new();
        for (topic, entry) in &shared.topics {
            let router = ConsumerRouter::new(shared.clone(), entry.clone());
            if router.workers_claim_directly() {
                routers.insert(topic.clone(), Arc::new(router));
            } else {
                tasks.push(tokio::spawn(router.run()));
            }
        }
        for w in pending_workers {
            let entry = shared.topics[&w.topic].clone();
            let router = routers.get(&w.topic).cloned();
            let worker = Worker::new(
                shared.clone(),
                entry,
                w.index,
                w.state,
                w.pipeline,
                w.spec.timeout,
                w.spec.retries,
                w.spec.backoff,
                w.inbox,
            );
            tasks.push(tokio::spawn(worker.run(router)));
        }
        let bus = EventBus { shared, tasks };
        bus.router().replay().await?;
        Ok(bus)
    }
}

fn validate(specs: &[HandlerSpec]) -> Result<(), CoreError> {
    let mut names = HashSet::new();
    for spec in specs {
        if spec.topic.0.is_empty() {
            return Err(CoreError::Config(format!(
                "handler `{}` has an empty topic",
                spec.name
            )));
        }
        if spec.topic.is_system() && !SYSTEM_TOPICS.contains(&spec.topic.as_str()) {
            return Err(CoreError::Config(format!(
                "handler `{}` subscribes to `{}`, which is under the reserved `_system.` prefix but is not a system topic",
                spec.name, spec.topic
            )));
        }
        if spec.workers == 0 {
            return Err(CoreError::Config(format!(
                "handler `{}` has workers = 0; it needs at least 1",
                spec.name
            )));
        }
        if !names.insert(spec.name.clone()) {
            return Err(CoreError::Config(format!(
                "two handlers are named `{}`; worker names must be unique, rename one",
                spec.name
            )));
        }
    }
    Ok(())
}
