//! [`EventBusBuilder`]: assembles and starts a system.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

use crate::backend::queue_factory::QueueFactory;
use crate::backend::routes::RemoteRoutes;
use crate::backend::wal::Wal;
use crate::bus::assemble;
use crate::bus::event_bus::EventBus;
use crate::bus::global;
use crate::bus::monitor::run_monitor;
use crate::bus::shared::BusShared;
use crate::bus::stop::shutdown_command::{BusCell, ShutdownCommandHandler};
use crate::bus::tasks::BusTasks;
use crate::constant::{
    DEFAULT_AUDIT_CAPACITY, DEFAULT_BATCH_SIZE, DEFAULT_DEDUP_WINDOW, DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_STALE_AFTER, SHUTDOWN, SYSTEM_TOPICS, TOPIC_DISCOVERY,
};
use crate::delivery::dedup::dedup_window::DedupWindow;
use crate::delivery::hub::DeliveryHub;
use crate::delivery::in_flight::InFlight;
use crate::delivery::remote::remote_routes;
use crate::delivery::remote::remote_table::RemoteTable;
use crate::delivery::remote::sent_to::SentTo;
use crate::delivery::send::message_pool::MessagePool;
use crate::delivery::send::scheduler::SchedulerHandle;
use crate::error::CoreError;
use crate::handler::handler_override::{apply_overrides, HandlerOverride};
use crate::handler::middleware::Middleware;
use crate::handler::spec::{HandlerSpec, HANDLER_REGISTRY};
use crate::node::{self, NodeIdentity, NodeType};
use crate::observe::audit_log::AuditLog;
use crate::observe::audit_record::AuditWriter;
use crate::system_topics::handlers::{AnnouncerCell, TopicDiscoveryHandler};

/// Builds an [`EventBus`].
///
/// ```
/// # use event_base_core::*;
/// # use event_base_core::backend::{QueueFactory, Wal};
/// # fn demo(wal: impl Wal, queue: impl QueueFactory) {
/// let builder = EventBus::builder()
///     .wal(wal)
///     .queue(queue)
///     .batch_size(128)
///     .handler(HandlerSpec::new("echo", "echo", handler_fn(|_m: EMessage| async { Ack::Ack })).workers(2));
/// // let bus = builder.build().await?;
/// # }
/// ```
#[must_use = "a builder does nothing until `build().await`"]
pub struct EventBusBuilder {
    wal: Option<Arc<dyn Wal>>,
    queue: Option<Arc<dyn QueueFactory>>,
    batch_size: usize,
    topic_log: bool,
    dedup_window: Duration,
    handlers: Vec<HandlerSpec>,
    overrides: Vec<(String, HandlerOverride)>,
    registered: bool,
    global_middleware: Vec<Arc<dyn Middleware>>,
    heartbeat_interval: Duration,
    stale_after: Duration,
    latency_metrics: bool,
    audit_capacity: Option<usize>,
    audit_writers: Vec<Arc<dyn AuditWriter>>,
    node_name: Option<String>,
    node_type: Option<NodeType>,
    name: Option<String>,
    replies: bool,
    #[cfg(feature = "metrics")]
    export_metrics: Option<Duration>,
}

/// Buses built in this process so far: the `n` of a default bus name.
static BUSES_BUILT: AtomicUsize = AtomicUsize::new(0);

impl std::fmt::Debug for EventBusBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBusBuilder")
            .field("wal_set", &self.wal.is_some())
            .field("queue", &self.queue.as_ref().map(|q| q.name()))
            .field("batch_size", &self.batch_size)
            .field("dedup_window", &self.dedup_window)
            .field("handlers", &self.handlers)
            .field("overrides", &self.overrides)
            .field("registered", &self.registered)
            .field("middleware", &self.global_middleware.len())
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("stale_after", &self.stale_after)
            .field("audit_capacity", &self.audit_capacity)
            .field("node_name", &self.node_name)
            .field("node_type", &self.node_type)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
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
            topic_log: true,
            dedup_window: DEFAULT_DEDUP_WINDOW,
            handlers: Vec::new(),
            overrides: Vec::new(),
            registered: false,
            global_middleware: Vec::new(),
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            stale_after: DEFAULT_STALE_AFTER,
            latency_metrics: true,
            audit_capacity: Some(DEFAULT_AUDIT_CAPACITY),
            audit_writers: Vec::new(),
            node_name: None,
            node_type: None,
            name: None,
            replies: false,
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

    /// Whether, with an in-memory queue backend (`FlumeQueueFactory`, `MpmcQueueFactory`:
    /// [`QueueFactory::topic_log`]), each topic keeps its messages in one log read by a
    /// cursor per handler (default `true`): a send to a topic with several handlers is one
    /// append, not a queue item per handler. `false` gives each handler a queue of the
    /// factory's own instead, as before the topic log; behaviour is the same either way
    /// (order, backpressure, the bound), so this is for measuring one against the other.
    /// Backends shared by processes (Redis) are the log themselves and ignore it.
    pub fn topic_log(mut self, on: bool) -> Self {
        self.topic_log = on;
        self
    }

    /// How long the id of a completed message keeps refusing sends of the same id (default
    /// two minutes; `Duration::ZERO` turns deduplication off). A window reaching back past
    /// the Unix epoch reaches back to it.
    ///
    /// A send whose id the WAL still holds (pending, processing, a dead letter), or whose
    /// message completed within the window, is answered `Ok` with that id and not delivered
    /// again: set an application id (`EMessage::with_id("order-42-created")`) and a sender
    /// may retry a send whose answer it missed. With `PersistentWal` the window survives a
    /// restart. Memory is bounded by the messages completed within one window (about 40
    /// bytes each).
    ///
    /// ```
    /// use std::time::Duration;
    /// let builder = event_base_core::EventBus::builder().dedup_window(Duration::from_secs(600));
    /// ```
    pub fn dedup_window(mut self, window: Duration) -> Self {
        self.dedup_window = window;
        self
    }

    /// Adds a handler by value.
    pub fn handler(mut self, spec: HandlerSpec) -> Self {
        self.handlers.push(spec);
        self
    }

    /// Replaces settings of the handler named `name` (workers, retries, timeout) when the bus
    /// is built, whether it was added by value or by `#[handler]`; a later override of the
    /// same name is applied after an earlier one. `build()` fails if no handler has the
    /// name, listing the names there are.
    ///
    /// ```
    /// use event_base_core::*;
    /// let builder = EventBus::builder()
    ///     .handler(HandlerSpec::new("echo", "echo", handler_fn(|_m: EMessage| async { Ack::Ack })))
    ///     .handler_override("echo", HandlerOverride::new().workers(4));
    /// ```
    pub fn handler_override(mut self, name: impl Into<String>, o: HandlerOverride) -> Self {
        self.overrides.push((name.into(), o));
        self
    }

    /// Adds every `#[handler]` linked into the binary (the registry the macro fills).
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
    /// `timeout` plus one interval). `interval` is clamped to 1 ms ..=
    /// [`MAX_WAIT`](crate::constant::MAX_WAIT).
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
    /// `metrics`), clamped to 1 ms ..= [`MAX_WAIT`](crate::constant::MAX_WAIT); see
    /// [`MetricsManager`](crate::MetricsManager).
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn export_metrics(mut self, interval: Duration) -> Self {
        self.export_metrics = Some(interval);
        self
    }

    /// Keeps the newest `capacity` audit records in memory (default
    /// [`DEFAULT_AUDIT_CAPACITY`], 10,000); `0` turns auditing off (see
    /// [`AuditLog`](crate::AuditLog)).
    pub fn audit(mut self, capacity: usize) -> Self {
        self.audit_capacity = (capacity > 0).then_some(capacity);
        self
    }

    /// Adds an audit writer (and turns auditing back on, with the default capacity, if
    /// `audit(0)` had turned it off).
    pub fn audit_writer(mut self, writer: impl AuditWriter) -> Self {
        self.audit_capacity.get_or_insert(DEFAULT_AUDIT_CAPACITY);
        self.audit_writers.push(Arc::new(writer));
        self
    }

    /// This bus's node name, instead of the process's [`node_name`](crate::node_name).
    pub fn node_name(mut self, name: impl Into<String>) -> Self {
        self.node_name = Some(name.into()).filter(|n| !n.is_empty());
        self
    }

    /// This bus's node type, instead of the process's [`node_type`](crate::node_type). A
    /// [`NodeType::Worker`] registers no handlers of its own on the `_system.` topics, except,
    /// on a backend shared between processes (Redis), the one for shutdown commands: a
    /// command sent on `_system.shutdown` by any node stops every node.
    pub fn node_type(mut self, kind: NodeType) -> Self {
        self.node_type = Some(kind);
        self
    }

    /// This bus's name: the `bus` label of every metric it exports, so that two buses of one
    /// process keep apart series. Without it (or with an empty name) a bus is called
    /// `<node name>-<n>`, `n` counting the buses built in this process from 0. Give each bus
    /// of a process its own name: two buses of one name write over each other's series.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into()).filter(|n| !n.is_empty());
        self
    }

    /// Whether this bus reads replies sent from other processes to its requests
    /// ([`EventBus::request`](crate::EventBus::request) on a shared backend such as Redis):
    /// it then runs a subscription of its own on `event_base.reply`
    /// ([`constant::REPLY_TOPIC`](crate::constant::REPLY_TOPIC)), to which a handler in another process
    /// addresses its [`reply`](crate::reply) (`to_worker: "<node name>/<worker>"`). Give
    /// each such process a node name of its own ([`node_name`](Self::node_name)): the reply
    /// names the node by it. Off by default; a request on a shared backend without it is
    /// answered only by handlers of this process.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), event_base_core::CoreError> {
    /// let bus = event_base_core::EventBus::builder()
    ///     .node_name("checkout-1")
    ///     .replies(true)
    ///     // .queue(RedisQueueFactory::connect(url)?).wal(..)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn replies(mut self, on: bool) -> Self {
        self.replies = on;
        self
    }

    /// Starts the system: spawns its tasks on the current tokio runtime and replays every
    /// unfinished record of the WAL.
    ///
    /// Cancel safety: dropped before it returned, the tasks it had started end with it
    /// (nothing was accepted yet; a replay it began leaves the rest of the WAL as it was).
    pub async fn build(self) -> Result<EventBus, CoreError> {
        let (wal, queue) = backends(self.wal, self.queue, self.batch_size)?;
        let mut specs = handler_specs(self.handlers, self.registered, &self.overrides)?;
        let defaults = node::identity();
        let node = NodeIdentity {
            name: self
                .node_name
                .map_or(defaults.name, |n| Arc::from(n.as_str())),
            kind: self.node_type.unwrap_or(defaults.kind),
        };
        let name = bus_name(self.name, &node);
        // With a shared backend, a send may reach the handlers other processes run.
        let routes = shared_routes(&*queue, &node);
        // A worker node leaves the `_system.` topics to a host, except that on a shared
        // backend it still obeys the cluster's shutdown commands (they fan out to every node).
        let cells = match node.kind {
            NodeType::Host => Some(BusCells::add_system_handlers(&mut specs, true)),
            NodeType::Worker if routes.is_some() => {
                Some(BusCells::add_system_handlers(&mut specs, false))
            }
            NodeType::Worker => None,
        };
        if self.replies {
            for make in crate::bus::start_hooks::REPLY_SUBSCRIPTION {
                specs.push(make());
            }
        }
        let sent_to = routes.as_ref().map(|_| Arc::new(SentTo::default()));
        let (topics, handlers) = assemble::topic_table(
            &specs,
            &*queue,
            self.batch_size,
            self.topic_log,
            &self.global_middleware,
            sent_to.as_deref(),
        )?;
        if routes.is_none() && specs.iter().all(|s| s.topic.is_system()) {
            tracing::warn!(target: crate::constant::target::BUS, "event_base started with no handlers: every send will be refused with NoHandler. If your handlers live in another crate, name it in the binary (`use my_handlers as _;`)");
        }
        let in_flight = Arc::new(InFlight::default());
        // The audit publisher runs only for someone who wants the records as they come:
        // writers, or a handler on `_system.audit`. Reads of `bus.audit()` need none.
        let published = self.audit_capacity.is_some()
            && (!self.audit_writers.is_empty() || topics.contains_key(crate::constant::AUDIT));
        let (flush_tx, flush_rx) = flume::unbounded();
        let (scheduler, scheduler_rx) = SchedulerHandle::new(in_flight.clone());
        let delivery = Arc::new(DeliveryHub {
            fan_outs: Default::default(),
            dedup: DedupWindow::new(self.dedup_window),
            wal,
            remote: routes.zip(sent_to).map(|(r, s)| RemoteTable::new(r, s)),
            topics,
            scheduler,
            in_flight,
            accepting: AtomicBool::new(true),
            stopping: Default::default(),
            batch_size: self.batch_size,
            audit: AuditLog::new(self.audit_capacity, published.then_some(flush_tx)),
            pool: MessagePool::default(),
            outboxes: specs.iter().any(|s| s.outbox),
        });
        let shared = BusShared::new(delivery, node, name, self.latency_metrics);
        remote_routes::follow_refreshes(&shared.delivery);
        crate::system_topics::evicted::follow_liveness(&shared.announcer);
        let tasks = assemble::bus_tasks(&shared, &handlers, scheduler_rx);
        tasks.push_other(tokio::spawn(global::runtime_guard(Arc::downgrade(&shared))));
        if published {
            assemble::spawn_audit(&tasks, self.audit_writers, flush_rx)?;
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
            assemble::spawn_metrics_export(&bus.tasks, bus.metrics_manager(), every);
        }
        if let Some(cells) = &cells {
            cells.set(&bus.tasks);
        }
        // What completed within the dedup window before this start is still a duplicate.
        if bus.shared.delivery.dedup.enabled() {
            let since = bus.shared.delivery.dedup.reaches_back_to();
            for (id, at) in bus.shared.delivery.wal.recent_completions(since).await? {
                bus.shared.delivery.dedup.completed_at(&id, at);
            }
        }
        // Replay before anything new is appended: replay re-sends whatever the WAL holds
        // unfinished, and must not pick up this start's own announcements.
        bus.router().replay().await?;
        // What the concerns above the bus take up at start (the WAL's schedules).
        for hook in crate::bus::start_hooks::ON_START {
            hook(&bus).await?;
        }
        bus.shared.announcer.announce_start(&started).await;
        Ok(bus)
    }
}

/// The WAL and the queue factory of a bus.
type Backends = (Arc<dyn Wal>, Arc<dyn QueueFactory>);

/// The bus's name: the one given, else `<node name>-<n>`, `n` counting the buses built.
fn bus_name(given: Option<String>, node: &NodeIdentity) -> Arc<str> {
    let nth = BUSES_BUILT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    match given {
        Some(name) => Arc::from(name),
        None => Arc::from(format!("{}-{nth}", node.name)),
    }
}

/// The shared backend's [`RemoteRoutes`] (`None` for one in the process), told the bus's node
/// name and type before any of the bus's queues is made, so that its record of the node
/// carries them from the first beat.
fn shared_routes(queue: &dyn QueueFactory, node: &NodeIdentity) -> Option<Arc<dyn RemoteRoutes>> {
    let routes = queue.routes();
    if let Some(r) = &routes {
        r.describe_node(&node.name, node.kind);
    }
    routes
}

/// The bus's handlers: those added by value, then (if asked) every `#[handler]`, with the
/// overrides applied and the whole checked.
fn handler_specs(
    mut specs: Vec<HandlerSpec>,
    registered: bool,
    overrides: &[(String, HandlerOverride)],
) -> Result<Vec<HandlerSpec>, CoreError> {
    if registered {
        if HANDLER_REGISTRY.is_empty() && specs.is_empty() {
            return Err(CoreError::Config(
                "with_registered_handlers() (or start_system!) found no #[handler] in this binary: the linker only keeps handlers of crates the binary names; if yours live in another crate, add `use my_handlers as _;` to the binary (or to the test file)".into(),
            ));
        }
        specs.extend(HANDLER_REGISTRY.iter().map(|r| r.to_spec()));
    }
    apply_overrides(&mut specs, overrides)?;
    validate(&specs)?;
    Ok(specs)
}

/// The WAL and queue a build needs, and the checks that need nothing else.
fn backends(
    wal: Option<Arc<dyn Wal>>,
    queue: Option<Arc<dyn QueueFactory>>,
    batch_size: usize,
) -> Result<Backends, CoreError> {
    let wal = wal.ok_or_else(|| {
        CoreError::Config(
            "no WAL set: call .wal(MemoryWal::new()) (or use start_system!, which picks defaults)"
                .into(),
        )
    })?;
    let queue = queue.ok_or_else(|| {
        CoreError::Config(
            "no queue set: call .queue(FlumeQueueFactory::default()) (or use start_system!)".into(),
        )
    })?;
    if batch_size == 0 {
        return Err(CoreError::Config("batch_size must be at least 1".into()));
    }
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(CoreError::Config(
            "build() must run inside a tokio runtime".into(),
        ));
    }
    Ok((wal, queue))
}

/// Where the bus's own handlers find the bus once it is built.
struct BusCells {
    shutdown: BusCell,
    /// `None` on a worker node, which answers no topic discovery requests.
    discovery: Option<AnnouncerCell>,
}

impl BusCells {
    /// Adds the bus's own handlers to `specs`: shutdown commands on `_system.shutdown`, and
    /// with `discovery` topic discovery requests on `_system.topic_discovery`.
    fn add_system_handlers(specs: &mut Vec<HandlerSpec>, discovery: bool) -> BusCells {
        let command_handler = ShutdownCommandHandler::default();
        let shutdown = command_handler.cell();
        specs.push(HandlerSpec::new(
            "event_base.shutdown",
            SHUTDOWN,
            command_handler,
        ));
        let discovery = discovery.then(|| {
            let discovery_handler = TopicDiscoveryHandler::default();
            let cell = discovery_handler.cell();
            specs.push(HandlerSpec::new(
                "event_base.topic_discovery",
                TOPIC_DISCOVERY,
                discovery_handler,
            ));
            cell
        });
        BusCells {
            shutdown,
            discovery,
        }
    }

    fn set(&self, tasks: &Arc<BusTasks>) {
        self.shutdown.set(tasks);
        if let Some(discovery) = &self.discovery {
            discovery.set(&tasks.shared.announcer);
        }
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
        if let Some(batch) = &spec.batch {
            if batch.max == 0 {
                return Err(CoreError::Config(format!(
                    "batch handler `{}` has batch = 0; a batch holds at least 1 message",
                    spec.name
                )));
            }
            if spec.outbox {
                return Err(CoreError::Config(format!(
                    "batch handler `{}` has an outbox; the outbox holds one delivery's sends, so it is for single-message handlers: drop `outbox` or the batch",
                    spec.name
                )));
            }
            if !spec.middleware.is_empty() {
                return Err(CoreError::Config(format!(
                    "batch handler `{}` has middleware of its own; middleware wraps single deliveries and cannot wrap a batch call: drop it, or do its work in the handler",
                    spec.name
                )));
            }
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
