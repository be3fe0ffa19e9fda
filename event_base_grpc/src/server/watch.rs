//! [`WatchFeed`]: the events the `Watch` RPC streams, and how they reach it.
//!
//! The bus announces dead letters on `_system.dead_letter` and worker changes on
//! `_system.worker_discovery` only when a handler subscribes to them (so a bus nobody watches
//! pays nothing). [`WatchFeed::handlers`] are two such handlers: they turn each announcement
//! into a [`pb::WatchResponse`] and put it on a bounded broadcast channel. Every `Watch` call
//! reads its own receiver; one that falls more than the channel's capacity behind gets a
//! `lagged { skipped }` event and goes on from the oldest event still held, its stream intact.
//!
//! Lifecycle events (a shutdown began, a shutdown through the API finished) come from the
//! server itself and need no handler.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use event_base_core::constant::{DEAD_LETTER, WORKER_DISCOVERY};
use event_base_core::{
    handler_fn, Ack, DeadLetterMessage, DiscoveryEvent, EMessage, HandlerSpec, ShutdownReport,
    WorkerDiscovery,
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
/// Events a [`WatchFeed`] holds for its slowest watcher unless told otherwise.
pub const DEFAULT_WATCH_CAPACITY: usize = 1024;
/// Payload bytes a dead-letter event carries.
const EVENT_PREVIEW_BYTES: usize = 64;

/// The source of `Watch` events: add its [`handlers`](Self::handlers) to the bus, and give
/// the feed to the server with [`GrpcServerBuilder::watch_feed`](crate::GrpcServerBuilder::watch_feed).
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use event_base_grpc::{GrpcServer, WatchFeed};
/// let feed = WatchFeed::new(1024);
/// let mut builder = event_base_core::EventBus::builder();
/// for spec in feed.handlers() {
///     builder = builder.handler(spec);
/// }
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
        }
    }

    /// The two handlers that feed it: [`DEAD_LETTER_HANDLER`] on `_system.dead_letter` and
    /// [`WORKER_HANDLER`] on `_system.worker_discovery`. Add both to the bus's builder.
    pub fn handlers(&self) -> Vec<HandlerSpec> {
        let dead = self.clone();
        let workers = self.clone();
        vec![
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
        ]
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
        let wants = |k| kinds.is_empty() || kinds.contains(&k);
        Ok(WatchSelection {
            dead_letters: wants(pb::WatchEventKind::DeadLetter),
            workers: wants(pb::WatchEventKind::Worker),
            lifecycle: wants(pb::WatchEventKind::Lifecycle),
            topics: req.topics.clone(),
        })
    }

    /// Whether it needs the feed's handlers on the bus.
    pub(crate) fn needs_handlers(&self) -> bool {
        self.dead_letters || self.workers
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
            Some(Event::Lifecycle(_)) => self.lifecycle,
            Some(Event::Lagged(_)) => true,
            None => false,
        }
    }
}

/// Forwards the feed to one watcher until it goes away or the server stops.
pub(crate) async fn forward(
    mut rx: broadcast::Receiver<pb::WatchResponse>,
    selection: WatchSelection,
    tx: mpsc::Sender<Result<pb::WatchResponse, Status>>,
    stop: CancellationToken,
) {
    loop {
        let next = tokio::select! {
            next = rx.recv() => next,
            () = tx.closed() => return,
            () = stop.cancelled() => return,
        };
        let event = match next {
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
