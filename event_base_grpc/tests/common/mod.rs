//! What the gRPC tests share: an isolated bus, a server on a free loopback port, and clients.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

pub mod http;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_base_core::{handler_fn, Ack, EMessage, EventBus, HandlerSpec};
use event_base_grpc::client::{connect, AdminClient, ClientOptions};
use event_base_grpc::{GrpcServer, ServeHandle, Tokens, WatchFeed};
use event_base_queue::FlumeQueueFactory;
use event_base_wal::MemoryWal;

/// Longest any test waits for something it expects.
pub const WAIT: Duration = Duration::from_secs(10);
pub const READ: &str = "read-token";
pub const ADMIN: &str = "admin-token";

/// Counts what a handler was given, and lets a test await a count.
#[derive(Debug, Default)]
pub struct Probe {
    count: AtomicUsize,
    payloads: Mutex<Vec<(String, Vec<u8>)>>,
    changed: tokio::sync::Notify,
}

impl Probe {
    pub fn new() -> Arc<Probe> {
        Arc::new(Probe::default())
    }

    /// A handler on `topic` that records each delivery and answers `answer`.
    pub fn handler(
        self: &Arc<Self>,
        name: &str,
        topic: &str,
        answer: fn(&EMessage) -> Ack,
    ) -> HandlerSpec {
        let probe = self.clone();
        HandlerSpec::new(
            name,
            topic,
            handler_fn(move |m: EMessage| {
                let probe = probe.clone();
                async move {
                    probe
                        .payloads
                        .lock()
                        .unwrap()
                        .push((m.topic.as_str().to_owned(), m.payload.as_bytes().to_vec()));
                    probe.count.fetch_add(1, Ordering::SeqCst);
                    probe.changed.notify_waiters();
                    answer(&m)
                }
            }),
        )
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    pub fn payloads(&self) -> Vec<(String, Vec<u8>)> {
        self.payloads.lock().unwrap().clone()
    }

    /// Waits until at least `n` deliveries were seen.
    pub async fn wait_for(&self, n: usize) {
        tokio::time::timeout(WAIT, async {
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if self.count() >= n {
                    return;
                }
                changed.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("expected {n} deliveries, saw {}", self.count()));
    }
}

/// A bus with `specs` and the watch feed's handlers.
pub async fn bus_with(specs: Vec<HandlerSpec>) -> (EventBus, WatchFeed) {
    bus_with_feed(specs, WatchFeed::new(64)).await
}

/// A bus with `specs` and `feed`'s handlers.
pub async fn bus_with_feed(specs: Vec<HandlerSpec>, feed: WatchFeed) -> (EventBus, WatchFeed) {
    let mut builder = EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::default());
    for spec in specs.into_iter().chain(feed.handlers()) {
        builder = builder.handler(spec);
    }
    (builder.build().await.unwrap(), feed)
}

/// A running server over `bus` on a free loopback port, and its address.
pub struct Served {
    pub bus: EventBus,
    pub handle: ServeHandle,
    pub addr: String,
}

impl Served {
    /// A client sending `token`.
    pub async fn client(&self, token: Option<&str>) -> AdminClient {
        let mut options = ClientOptions::new(self.addr.clone());
        options.token = token.map(str::to_owned);
        connect(&options).await.unwrap()
    }

    /// A client with the admin token.
    pub async fn admin(&self) -> AdminClient {
        self.client(Some(ADMIN)).await
    }
}

/// Serves `bus` with the read and admin tokens, on a listener bound to port 0.
pub async fn serve(bus: EventBus, feed: WatchFeed) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let handle = GrpcServer::builder(bus.clone())
        .tokens(Tokens::new().read(READ).admin(ADMIN))
        .watch_feed(feed)
        .serve_with_incoming(listener)
        .unwrap();
    let addr = format!("http://{}", handle.local_addr());
    Served { bus, handle, addr }
}

/// A bus with `specs`, served.
pub async fn start(specs: Vec<HandlerSpec>) -> Served {
    let (bus, feed) = bus_with(specs).await;
    serve(bus, feed).await
}

/// Answers for handlers.
pub fn ack(_: &EMessage) -> Ack {
    Ack::Ack
}

pub fn dead(_: &EMessage) -> Ack {
    Ack::dead()
}

/// Waits until `handler`'s lag on `topic` is 0 (its last delivery settled), up to [`WAIT`].
/// Lag has no notification to wait on (it is two counters read together), so this looks
/// every 10 ms; a handler's end is what the caller waited for before calling it.
pub async fn lag_drains(bus: &EventBus, topic: &str, handler: &str) {
    tokio::time::timeout(WAIT, async {
        while bus.lag(topic, handler).unwrap() != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{handler} on {topic} still lags after {WAIT:?}"));
}
