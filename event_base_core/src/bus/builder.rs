//! [`EventBusBuilder`]: assembles and starts a system.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::backend::queue::QueueFactory;
use crate::backend::wal::Wal;
use crate::bus::event_bus::EventBus;
use crate::bus::in_flight::InFlight;
use crate::bus::shared::BusShared;
use crate::bus::tasks::BusTasks;
use crate::constant::{
    DEFAULT_BATCH_SIZE, DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_STALE_AFTER, SYSTEM_TOPICS,
};
use crate::delivery::consumer_router::ConsumerRouter;
use crate::delivery::job_channel::job_channel;
use crate::delivery::scheduler::{run_scheduler, SchedulerHandle};
use crate::delivery::topic_hasher::TopicMap;
use crate::delivery::topic_table::TopicEntry;
use crate::error::CoreError;
use crate::handler::middleware::Middleware;
use crate::handler::runtime::HandlerRuntime;
use crate::handler::spec::{HandlerSpec, HANDLER_REGISTRY};
use crate::observe::audit_log::AuditWriter;
use crate::observe::topic_counters::TopicCounters;
use crate::system_topics::handlers::{ShutdownCommandHandler, TopicDiscoveryHandler};
use crate::worker::monitor::run_monitor;
use crate::worker::registry::WorkerRegistry;

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
    heartbeat_interval: Duration,
    stale_after: Duration,
    latency_metrics: bool,
    audit_capacity: Option<usize>,
    audit_writers: Vec<Arc<dyn AuditWriter>>,
    #[cfg(feature = "metrics")]
    export_metrics: Option<Duration>,
}

impl Default for EventBusBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl EventBus {
    /// A builder for a new system.
    pub fn builder() -> EventBusBuilder {
        EventBusBuilder::new()
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
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            stale_after: DEFAULT_STALE_AFTER,
            latency_metrics: true,
            audit_capacity: None,
            audit_writers: Vec::new(),
            #[cfg(feature = "metrics")]
            export_metrics: None,
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

    /// Adds a middleware around every handler of an application topic, outside the handler's
    /// own middleware. Handlers on `_system.` topics are not wrapped.
    pub fn middleware(mut self, m: impl Middleware) -> Self {
        self.global_middleware.push(Arc::new(m));
        self
    }

    /// How often the monitor samples every worker (default 1 s), and how long a worker may
    /// work on one message without progress before it is declared dead, cancelled, and its
    /// message delivered to another worker (default 60 s; never less than the handler's own
    /// `timeout` plus one interval).
    pub fn heartbeat(mut self, interval: Duration, stale_after: Duration) -> Self {
        self.heartbeat_interval = interval.max(Duration::from_millis(1));
        self.stale_after = stale_after;
        self
    }

    /// Whether workers time each delivery's queue wait and handler time into the topic's
    /// latency histograms (default on; two clock reads per delivery).
    pub fn latency_metrics(mut self, on: bool) -> Self {
        self.latency_metrics = on;
        self
    }

    /// Publishes the system's metrics to the `metrics` facade every `interval` (feature
    /// `metrics`); see [`MetricsManager`](crate::MetricsManager).
    #[cfg(feature = "metrics")]
    pub fn export_metrics(mut self, interval: Duration) -> Self {
        self.export_metrics = Some(interval);
        self
    }

    /// Turns auditing on, keeping the newest `capacity` records in memory (see
    /// [`AuditLog`](crate::AuditLog)).
    pub fn audit(mut self, capacity: usize) -> Self {
        self.audit_capacity = Some(capacity.max(1));
        self
    }

    /// Adds an audit writer (and turns auditing on, with 4096 records in memory unless
    /// `audit` set another size).
    pub fn audit_writer(mut self, writer: impl AuditWriter) -> Self {
        self.audit_capacity.get_or_insert(4096);
        self.audit_writers.push(Arc::new(writer));
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
        // The bus's own handler: shutdown commands sent on `_system.shutdown`.
        let command_handler = ShutdownCommandHandler::default();
        let bus_cell = command_handler.cell();
        specs.push(HandlerSpec::new(
            "event_base.shutdown",
            crate::constant::SHUTDOWN,
            command_handler,
        ));
        let discovery_handler = TopicDiscoveryHandler::default();
        let discovery_cell = discovery_handler.cell();
        specs.push(HandlerSpec::new(
            "event_base.topic_discovery",
            crate::constant::TOPIC_DISCOVERY,
            discovery_handler,
        ));

        // One entry per topic, in declaration order.
        let mut topics = TopicMap::default();
        let mut handlers: Vec<Arc<HandlerRuntime>> = Vec::new();
        for spec in &specs {
            if !topics.contains_key(&spec.topic) {
                let q = queue.create(&spec.topic)?;
                let total: usize = specs
                    .iter()
                    .filter(|s| s.topic == spec.topic)
                    .map(|s| s.workers)
                    .sum();
                let (work_tx, work_rx) = job_channel(self.batch_size.max(total));
                topics.insert(
                    spec.topic.clone(),
                    Arc::new(TopicEntry {
                        topic: spec.topic.clone(),
                        producer: q.producer,
                        consumer: q.consumer,
                        work_tx,
                        work_rx,
                        workers: RwLock::new(Vec::with_capacity(total)),
                        counters: TopicCounters::default(),
                    }),
                );
            }
            // Global middleware is for the application's handlers; the bus's own and any
            // handler on a system topic run bare, so a refusing middleware cannot break, say,
            // shutdown by message.
            let global: &[Arc<dyn Middleware>] = if spec.topic.is_system() {
                &[]
            } else {
                &self.global_middleware
            };
            handlers.push(Arc::new(HandlerRuntime::new(spec, global)));
            if !spec.topic.is_system() {
                tracing::info!(handler = %spec.name, topic = %spec.topic, workers = spec.workers, "handler registered");
            }
        }
        if specs.iter().all(|s| s.topic.is_system()) {
            tracing::warn!("event_base started with no handlers: every send will be refused with NoHandler. If your handlers live in another crate, name it in the binary (`use my_handlers as _;`)");
        }

        let in_flight = Arc::new(InFlight::default());
        let (flush_tx, flush_rx) = flume::unbounded();
        let (scheduler, scheduler_rx) = SchedulerHandle::new(in_flight.clone());
        let shared = Arc::new(BusShared {
            wal,
            topics,
            registry: WorkerRegistry::default(),
            scheduler,
            in_flight: in_flight.clone(),
            accepting: AtomicBool::new(true),
            batch_size: self.batch_size,
            started: std::time::Instant::now(),
            latency_metrics: self.latency_metrics,
            audit: crate::observe::audit_log::AuditLog::new(self.audit_capacity, Some(flush_tx)),
        });

        // One router per topic: its own task for queues that need acks, otherwise shared by
        // the topic's workers, which claim for themselves.
        let mut routers = HashMap::new();
        let mut router_tasks = Vec::new();
        for (topic, entry) in &shared.topics {
            let router = ConsumerRouter::new(shared.clone(), entry.clone());
            if router.workers_claim_directly() {
                routers.insert(topic.clone(), Arc::new(router));
            } else {
                router_tasks.push(router);
            }
        }
        let by_name: HashMap<String, Arc<HandlerRuntime>> = handlers
            .iter()
            .map(|h| (h.name.clone(), h.clone()))
            .collect();
        let tasks = Arc::new(BusTasks::new(shared.clone(), routers, by_name));
        let next_due = shared.scheduler.next_due();
        tasks.push_other(tokio::spawn(run_scheduler(
            scheduler_rx,
            in_flight,
            next_due,
        )));
        if shared.audit.is_enabled() {
            let writers = if self.audit_writers.is_empty() {
                None
            } else {
                Some(
                    crate::observe::audit_writer_thread::spawn_writer_thread(self.audit_writers)
                        .map_err(|e| {
                            CoreError::Internal(format!(
                                "cannot start the audit writer thread: {e}"
                            ))
                        })?,
                )
            };
            tasks.push_other(tokio::spawn(
                crate::observe::audit_publisher::run_audit_publisher(
                    shared.clone(),
                    writers,
                    flush_rx,
                ),
            ));
        }
        for router in router_tasks {
            tasks.push_other(tokio::spawn(router.run()));
        }
        let mut started = Vec::new();
        for (spec, handler) in specs.iter().zip(&handlers) {
            for _ in 0..spec.workers {
                started.push(tasks.spawn_worker(handler)?);
            }
        }
        tasks.push_other(tokio::spawn(run_monitor(
            Arc::downgrade(&tasks),
            self.heartbeat_interval,
            self.stale_after,
        )));
        let bus = EventBus { shared, tasks };
        #[cfg(feature = "metrics")]
        if let Some(every) = self.export_metrics {
            let manager = bus.metrics_manager();
            bus.tasks.push_other(tokio::spawn(async move {
                let mut ticker = tokio::time::interval(every);
                loop {
                    ticker.tick().await;
                    manager.export();
                }
            }));
        }
        bus_cell.set(&bus.tasks);
        discovery_cell.set(&bus.tasks);
        // Replay before anything new is appended: replay re-sends whatever the WAL holds
        // unfinished, and must not pick up this start's own announcements.
        bus.router().replay().await?;
        for state in &started {
            bus.shared
                .announce_worker(
                    crate::system_topics::discovery::DiscoveryEvent::Joined,
                    state,
                )
                .await;
        }
        let sync = bus.shared.topic_sync();
        bus.shared
            .announce(crate::constant::TOPIC_SYNC, &sync)
            .await;
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
