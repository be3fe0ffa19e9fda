//! Integration tests, crash tests and benchmarks of event_base.
//!
//! The tests live in `tests/`, one behaviour per file; the helpers they share live here:
//! a [`Probe`] that records every delivery a handler sees and lets a test await a count
//! instead of sleeping, a [`Gate`] that holds handlers until the test opens it, and a
//! [`span_capture::SpanCapture`] layer that records what a span carried. [`conformance`] holds
//! the cases every WAL and queue backend must pass, and those every bus over them must.
//! [`child_kill`] is the killing half of the crash tests, [`file_restart`] the restart half;
//! [`child_node::ChildNode`] is a bus in a child process a test can freeze and kill.
//! [`redis_server::RedisServer`] starts a real `redis-server` for a test, and
//! [`redis_cluster`] makes nodes and buses on it. [`postgres_server::PostgresServer`] starts a
//! real PostgreSQL cluster for a test.

#![deny(unsafe_code)]

pub mod child_kill;
pub mod child_node;
pub mod child_role;
pub mod conformance;
pub mod discovery_scenario;
pub mod file_restart;
pub mod forward;
pub mod otel_memory;
pub mod postgres_server;
pub mod rate_pace;
pub mod redis_cluster;
pub mod redis_server;
pub mod shutdown_scenario;
pub mod span_capture;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_base::{async_trait, Ack, EHandler, EMessage, HandlerSpec};
use tokio::sync::{watch, Notify};

/// One delivery as a handler saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Which handler (the label given to [`Probe::handler`]).
    pub label: String,
    /// Message id.
    pub id: String,
    /// `attempts` of this delivery.
    pub attempts: u32,
    /// The payload.
    pub payload: Vec<u8>,
}

/// Records deliveries from any number of handlers.
#[derive(Debug, Default)]
pub struct Probe {
    seen: Mutex<Vec<Seen>>,
    finished: Mutex<Vec<String>>,
    changed: Notify,
}

impl Probe {
    /// A new shared probe.
    pub fn new() -> Arc<Probe> {
        Arc::new(Probe::default())
    }

    /// A handler spec named `label` on `topic` that records each delivery, then answers
    /// with `answer(msg)`.
    pub fn handler<F>(self: &Arc<Self>, label: &str, topic: &str, answer: F) -> HandlerSpec
    where
        F: Fn(&EMessage) -> Ack + Send + Sync + 'static,
    {
        self.recording(label, topic, None, answer)
    }

    /// Like [`Probe::handler`], but each delivery first waits for `gate` to open.
    pub fn gated_handler<F>(
        self: &Arc<Self>,
        label: &str,
        topic: &str,
        gate: &Gate,
        answer: F,
    ) -> HandlerSpec
    where
        F: Fn(&EMessage) -> Ack + Send + Sync + 'static,
    {
        self.recording(label, topic, Some(gate.clone()), answer)
    }

    fn recording<F>(
        self: &Arc<Self>,
        label: &str,
        topic: &str,
        gate: Option<Gate>,
        answer: F,
    ) -> HandlerSpec
    where
        F: Fn(&EMessage) -> Ack + Send + Sync + 'static,
    {
        HandlerSpec::new(
            label,
            topic,
            Recording {
                probe: self.clone(),
                label: label.to_owned(),
                answer,
                gate,
            },
        )
    }

    fn record(&self, seen: Seen) {
        if let Ok(mut v) = self.seen.lock() {
            v.push(seen);
        }
        self.changed.notify_waiters();
    }

    /// Every delivery so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Ids of the deliveries whose handler returned (after any gate), in order.
    pub fn finished(&self) -> Vec<String> {
        self.finished.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Number of deliveries so far.
    pub fn count(&self) -> usize {
        self.seen.lock().map(|v| v.len()).unwrap_or(0)
    }

    /// Deliveries of one message.
    pub fn count_of(&self, id: &str) -> usize {
        self.seen
            .lock()
            .map(|v| v.iter().filter(|s| s.id == id).count())
            .unwrap_or(0)
    }

    /// Waits until at least `n` deliveries were recorded; panics with the count after
    /// `timeout`.
    pub async fn wait_for(&self, n: usize, timeout: Duration) {
        self.wait_until(&format!("{n} deliveries"), timeout, |seen| seen.len() >= n)
            .await;
    }

    /// Waits until `done` holds for the deliveries recorded so far (checked after each new
    /// one); panics naming `what` after `timeout`.
    pub async fn wait_until<F>(&self, what: &str, timeout: Duration, done: F)
    where
        F: Fn(&[Seen]) -> bool,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.seen.lock().map(|v| done(&v)).unwrap_or(false) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "expected {what} within {timeout:?}, saw {} deliveries",
                    self.count()
                );
            }
        }
    }
}

struct Recording<F> {
    probe: Arc<Probe>,
    label: String,
    answer: F,
    gate: Option<Gate>,
}

#[async_trait]
impl<F> EHandler for Recording<F>
where
    F: Fn(&EMessage) -> Ack + Send + Sync + 'static,
{
    async fn handler(&self, msg: &EMessage) -> Ack {
        self.probe.record(Seen {
            label: self.label.clone(),
            id: msg.id.clone(),
            attempts: msg.attempts,
            payload: msg.payload.0.to_vec(),
        });
        if let Some(gate) = &self.gate {
            gate.wait_for_message(&msg.id).await;
        }
        let answer = (self.answer)(msg);
        if let Ok(mut f) = self.probe.finished.lock() {
            f.push(msg.id.clone());
        }
        answer
    }
}

/// Holds handlers until opened; [`Gate::release`] lets single messages through first.
#[derive(Debug, Clone)]
pub struct Gate {
    tx: Arc<watch::Sender<GateState>>,
}

/// Which messages a [`Gate`] lets through.
#[derive(Debug, Clone, Default)]
struct GateState {
    open: bool,
    /// Let through while the gate is still closed.
    released: HashSet<String>,
}

impl GateState {
    fn passes(&self, id: Option<&str>) -> bool {
        self.open || id.is_some_and(|id| self.released.contains(id))
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Gate {
        Gate {
            tx: Arc::new(watch::channel(GateState::default()).0),
        }
    }

    /// Lets every waiting and future handler through.
    pub fn open(&self) {
        self.tx.send_modify(|state| state.open = true);
    }

    /// Lets the handlers of the messages `ids` through, while the gate stays closed to the
    /// others.
    pub fn release<I, S>(&self, ids: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tx
            .send_modify(|state| state.released.extend(ids.into_iter().map(Into::into)));
    }

    /// Waits until the gate is open.
    pub async fn wait(&self) {
        self.wait_as(None).await;
    }

    /// Waits until the gate lets the message `id` through.
    pub async fn wait_for_message(&self, id: &str) {
        self.wait_as(Some(id)).await;
    }

    async fn wait_as(&self, id: Option<&str>) {
        let mut rx = self.tx.subscribe();
        let _ = rx.wait_for(|state| state.passes(id)).await;
    }
}

/// Decodes a JSON payload the bus published (on a system topic, say).
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> T {
    EMessage::standard("x", bytes.to_vec())
        .json_payload()
        .expect("the bus publishes valid JSON")
}

/// The ids of every record `wal` would replay (`Wal::pending`), in its order.
pub async fn pending_ids(wal: &dyn event_base::backend::Wal) -> Vec<String> {
    wal.pending()
        .await
        .expect("read the WAL's pending records")
        .into_iter()
        .map(|r| r.message.id.clone())
        .collect()
}

/// The default time a test waits for an event before it fails.
pub const WAIT: Duration = Duration::from_secs(10);

/// Polls `done` every 20 ms until it holds, failing with `what` after [`WAIT`]: for state
/// another process or a server changes, which offers nothing to wait on (Redis keys, rows of
/// PostgreSQL, what a child did).
pub async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done().await {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The README's examples, compiled and run as this crate's doctests, so that the first code a
/// reader sees is code that works (`cargo test -p event_base_test --doc`).
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
