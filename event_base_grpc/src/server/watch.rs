//! [`WatchFeed`]: the events the `Watch` RPC streams, and how they reach it.
//!
//! The bus announces dead letters on `_system.dead_letter`, worker changes on
//! `_system.worker_discovery` and batches of audit records on `_system.audit` only when a
//! handler subscribes to them (so a bus nobody watches pays nothing). [`WatchFeed::handlers`]
//! are such handlers (the audit one only with [`WatchFeed::with_audit`]): they turn each
//! announcement into [`pb::WatchResponse`]s and put them on a bounded broadcast channel. Every `Watch` call reads its own receiver; one that
//! falls more than the channel's capacity behind gets a `lagged { skipped }` event and goes on
//! from the oldest event still held, its stream intact.
//!
//! Lifecycle events (a shutdown began, a shutdown through the API finished) come from the
//! server itself and need no handler; metrics events are read from the bus by each watcher
//! that asks for them, on its own interval.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use event_base_core::constant::{AUDIT, DEAD_LETTER, SYSTEM_PREFIX, WORKER_DISCOVERY};
use event_base_core::{
    handler_fn, Ack, AuditRecord, DeadLetterMessage, DiscoveryEvent, EMessage, EventBus,
    EventBusBuilder, HandlerSpec, ShutdownReport, WorkerDiscovery,
};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::convert::{self, PayloadCut};
use crate::pb;
use crate::pb::watch_response::Event;

/// The name of the feed's handler on `_system.dead_letter` (its worker is `<name>-0`).
pub const DEAD_LETTER_HANDLER: &str = "grpc_watch_dead_letters";
/// The name of the feed's handler on `_system.worker_discovery`.
pub const WORKER_HANDLER: &str = "grpc_watch_workers";
/// The name of the feed's handler on `_system.audit`.
pub const AUDIT_HANDLER: &str = "grpc_watch_audit";
/// How often a watcher of metrics gets them unless it says otherwise.
pub const DEFAULT_METRICS_INTERVAL: Duration = Duration::from_secs(5);
/// The shortest metrics interval a watcher may ask for.
const MIN_METRICS_INTERVAL: Duration = Duration::from_millis(100);
/// Events a [`WatchFeed`] holds for its slowest watcher unless told otherwise.
pub const DEFAULT_WATCH_CAPACITY: usize = 1024;
/// Payload bytes a dead-letter event carries.
const EVENT_PREVIEW_BYTES: usize = 64;

/// The source of `Watch` events: add its [`handlers`](Self::handlers) to the bus (or let
/// [`register`](Self::register) add them), and give the feed to the server with
/// [`GrpcServerBuilder::watch_feed`](crate::GrpcServerBuilder::watch_feed).
///
/// The bus's topics are fixed when it is built, so the handlers must be on the builder: the
/// server cannot add them to a running bus.
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use event_base_grpc::{GrpcServer, WatchFeed};
/// let feed = WatchFeed::new(1024);
/// let builder = feed.register(event_base_core::EventBus::builder());
/// # let builder = builder.wal(event_base_wal::MemoryWal::new()).queue(event_base_queue::FlumeQueueFactory::default());
/// let bus = builder.build().await?;
/// let server = GrpcServer::builder(bus).watch_feed(feed).serve("127.0.0.1:0").await?;
/// server.shutdown().await?;
/// # Ok(()) }
/// ```
///
/// Clones share the feed.
#[derive(Debug, Clone)]
pub struct WatchFeed {
    inner: Arc<FeedInner>,
    /// Whether [`handlers`](Self::handlers) includes the audit handler.
    audit: bool,
}

#[derive(Debug)]
struct FeedInner {
    tx: broadcast::Sender<pb::WatchResponse>,
    seq: AtomicU64,
}

impl Default for WatchFeed {
    fn default() -> Self {
        WatchFeed::new(DEFAULT_WATCH_CAPACITY)
    }
}

impl WatchFeed {
    /// A feed that keeps up to `capacity` events for its slowest watcher (at least 1).
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        WatchFeed {
            inner: Arc::new(FeedInner {
                tx,
                seq: AtomicU64::new(0),
            }),
            audit: false,
        }
    }

    /// Whether [`handlers`](Self::handlers) includes [`AUDIT_HANDLER`], so that `Watch` can
    /// stream audit records (default: no). It costs the bus one system message, so one WAL
    /// record, per batch of audit records (a worker hands its records over every 64
    /// deliveries or when it goes idle): with a WAL that syncs every record, a sync each.
    pub fn with_audit(mut self, on: bool) -> Self {
        self.audit = on;
        self
    }

    /// The handlers that feed it: [`DEAD_LETTER_HANDLER`] on `_system.dead_letter`,
    /// [`WORKER_HANDLER`] on `_system.worker_discovery` and, with
    /// [`with_audit(true)`](Self::with_audit), [`AUDIT_HANDLER`] on `_system.audit`. Add them
    /// to the bus's builder (or use [`register`](Self::register)).
    ///
    /// Each costs the bus one system message per announcement: per dead letter and per
    /// worker change (and per audit batch).
    pub fn handlers(&self) -> Vec<HandlerSpec> {
        let dead = self.clone();
        let workers = self.clone();
        let audit = self.clone();
        let mut specs = vec![
            HandlerSpec::new(
                DEAD_LETTER_HANDLER,
                DEAD_LETTER,
                handler_fn(move |m: EMessage| {
                    let feed = dead.clone();
                    async move {
                        feed.on_dead_letter(&m);
                        Ack::Ack
                    }
                }),
            ),
            HandlerSpec::new(
                WORKER_HANDLER,
                WORKER_DISCOVERY,
                handler_fn(move |m: EMessage| {
                    let feed = workers.clone();
                    async move {
                        feed.on_worker(&m);
                        Ack::Ack
                    }
                }),
            ),
        ];
        if self.audit {
            specs.push(HandlerSpec::new(
                AUDIT_HANDLER,
                AUDIT,
                handler_fn(move |m: EMessage| {
                    let feed = audit.clone();
                    async move {
                        feed.on_audit(&m);
                        Ack::Ack
                    }
                }),
            ));
        }
        specs
    }

    /// `builder` with the feed's [`handlers`](Self::handlers) added.
    pub fn register(&self, builder: EventBusBuilder) -> EventBusBuilder {
        self.handlers()
            .into_iter()
            .fold(builder, EventBusBuilder::handler)
    }

    fn publish(&self, event: Event) {
        let seq = self.inner.seq.fetch_add(1, Ordering::Relaxed) + 1;
        // No receiver: nobody watches, nothing to keep.
        let _ = self.inner.tx.send(pb::WatchResponse {
            seq,
            at: Some(convert::timestamp(SystemTime::now())),
            event: Some(event),
        });
    }

    fn on_dead_letter(&self, m: &EMessage) {
        match m.json_payload::<DeadLetterMessage>() {
            Ok(dead) => self.publish(Event::DeadLetter(convert::dead_letter(
                &dead,
                PayloadCut::Preview(EVENT_PREVIEW_BYTES),
            ))),
            Err(e) => {
                tracing::warn!(error = %e, "watch feed: a dead-letter announcement did not decode")
            }
        }
    }

    fn on_worker(&self, m: &EMessage) {
        match m.json_payload::<WorkerDiscovery>() {
            Ok(d) => {
                let change = match d.event {
                    DiscoveryEvent::Joined => pb::WorkerChange::Joined,
                    DiscoveryEvent::Left => pb::WorkerChange::Left,
                    DiscoveryEvent::Dead => pb::WorkerChange::Dead,
                    #[allow(unreachable_patterns)]
                    _ => pb::WorkerChange::Unspecified,
                };
                self.publish(Event::Worker(pb::WorkerEvent {
                    change: change as i32,
                    worker: Some(convert::worker(&d.worker, None)),
                }));
            }
            Err(e) => {
                tracing::warn!(error = %e, "watch feed: a worker announcement did not decode")
            }
        }
    }

    fn on_audit(&self, m: &EMessage) {
        match m.json_payload::<Vec<AuditRecord>>() {
            Ok(records) => {
                for r in &records {
                    self.publish(Event::Audit(convert::audit_record(r)));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "watch feed: an audit announcement did not decode")
            }
        }
    }

    /// A lifecycle event from the server.
    pub(crate) fn lifecycle(&self, stage: pb::LifecycleStage, report: Option<&ShutdownReport>) {
        self.publish(Event::Lifecycle(pb::LifecycleEvent {
            stage: stage as i32,
            report: report.map(convert::shutdown_report),
        }));
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<pb::WatchResponse> {
        self.inner.tx.subscribe()
    }
}

/// What one `Watch` call wants.
#[derive(Debug)]
pub(crate) struct WatchSelection {
    dead_letters: bool,
    workers: bool,
    lifecycle: bool,
    audit: bool,
    /// Metrics every so often, if asked for.
    metrics: Option<Duration>,
    topics: Vec<String>,
}

impl WatchSelection {
    pub(crate) fn from_pb(req: &pb::WatchRequest) -> Result<Self, Status> {
        let mut kinds = Vec::new();
        for k in &req.kinds {
            match pb::WatchEventKind::try_from(*k) {
                Ok(pb::WatchEventKind::Unspecified) => {}
                Ok(kind) => kinds.push(kind),
                Err(_) => {
                    return Err(Status::invalid_argument(format!(
                        "`kinds` has {k}, which is not a WatchEventKind"
                    )))
                }
            }
        }
        // AUDIT and METRICS only when named: they are many, or periodic.
        let wants = |k| kinds.is_empty() || kinds.contains(&k);
        let named = |k| kinds.contains(&k);
        let metrics = if named(pb::WatchEventKind::Metrics) {
            let every = match &req.metrics_interval {
                None => DEFAULT_METRICS_INTERVAL,
                Some(d) => convert::std_duration(d, "metrics_interval")?,
            };
            Some(every.max(MIN_METRICS_INTERVAL))
        } else {
            None
        };
        Ok(WatchSelection {
            dead_letters: wants(pb::WatchEventKind::DeadLetter),
            workers: wants(pb::WatchEventKind::Worker),
            lifecycle: wants(pb::WatchEventKind::Lifecycle),
            audit: named(pb::WatchEventKind::Audit),
            metrics,
            topics: req.topics.clone(),
        })
    }

    /// The feed's handlers it needs on the bus (by name), and the kind each serves.
    pub(crate) fn needs_handlers(&self) -> Vec<(&'static str, &'static str)> {
        let mut needs = Vec::new();
        if self.dead_letters {
            needs.push((DEAD_LETTER_HANDLER, "WATCH_EVENT_KIND_DEAD_LETTER"));
        }
        if self.workers {
            needs.push((WORKER_HANDLER, "WATCH_EVENT_KIND_WORKER"));
        }
        if self.audit {
            needs.push((AUDIT_HANDLER, "WATCH_EVENT_KIND_AUDIT"));
        }
        needs
    }

    fn topic_ok(&self, topic: Option<&str>) -> bool {
        self.topics.is_empty() || topic.is_some_and(|t| self.topics.iter().any(|x| x == t))
    }

    fn wants(&self, event: &pb::WatchResponse) -> bool {
        match &event.event {
            Some(Event::DeadLetter(d)) => {
                self.dead_letters && self.topic_ok(d.message.as_ref().map(|m| m.topic.as_str()))
            }
            Some(Event::Worker(w)) => {
                self.workers && self.topic_ok(w.worker.as_ref().map(|w| w.topic.as_str()))
            }
            Some(Event::Audit(a)) => self.audit && self.topic_ok(Some(&a.topic)),
            Some(Event::Lifecycle(_)) => self.lifecycle,
            Some(Event::Lagged(_)) => true,
            // Metrics are made per watcher, never fed.
            Some(Event::Metrics(_)) | None => false,
        }
    }

    /// Whether metrics events carry `topic`: one named, or, when none are, a user's topic.
    fn metrics_topic(&self, topic: &str) -> bool {
        if self.topics.is_empty() {
            !topic.starts_with(SYSTEM_PREFIX)
        } else {
            self.topics.iter().any(|t| t == topic)
        }
    }

    /// The bus's counters as a metrics event, for the topics selected.
    fn metrics_event(&self, bus: &EventBus) -> pb::WatchResponse {
        let m = bus.metrics();
        pb::WatchResponse {
            seq: 0,
            at: Some(convert::timestamp(SystemTime::now())),
            event: Some(Event::Metrics(pb::MetricsEvent {
                node: Some(convert::node_metrics(&m.node)),
                topics: m
                    .topics
                    .iter()
                    .filter(|(name, _)| self.metrics_topic(name))
                    .map(|(name, t)| (name.clone(), convert::topic_metrics(t)))
                    .collect(),
            })),
        }
    }
}

/// Forwards the feed to one watcher, with metrics on its interval if it asked for them,
/// until it goes away or the server stops.
pub(crate) async fn forward(
    mut rx: broadcast::Receiver<pb::WatchResponse>,
    selection: WatchSelection,
    bus: EventBus,
    tx: mpsc::Sender<Result<pb::WatchResponse, Status>>,
    stop: CancellationToken,
) {
    // The first tick is at once; a slow reader delays ticks rather than piling them up.
    let mut ticks = selection.metrics.map(|every| {
        let mut t = tokio::time::interval(every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    loop {
        let tick = async {
            match ticks.as_mut() {
                Some(t) => {
                    t.tick().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let next = tokio::select! {
            next = rx.recv() => next,
            () = tick => Ok(selection.metrics_event(&bus)),
            () = tx.closed() => return,
            () = stop.cancelled() => return,
        };
        let event = match next {
            Ok(event) if matches!(event.event, Some(Event::Metrics(_))) => event,
            Ok(event) if selection.wants(&event) => event,
            Ok(_) => continue,
            Err(broadcast::error::RecvError::Lagged(skipped)) => pb::WatchResponse {
                seq: 0,
                at: Some(convert::timestamp(SystemTime::now())),
                event: Some(Event::Lagged(pb::Lagged { skipped })),
            },
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let sent = tokio::select! {
            sent = tx.send(Ok(event)) => sent,
            () = stop.cancelled() => return,
        };
        if sent.is_err() {
            return;
        }
    }
}
