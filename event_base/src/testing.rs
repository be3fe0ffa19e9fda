//! A harness for testing handlers: [`TestBus`].
//!
//! It runs a real, isolated system (in-memory WAL and queues, auditing on) so a test exercises
//! exactly what production runs, and adds what a test needs: publish, wait until everything
//! has settled (no sleeps), then ask what happened to a message: acked, retried, dead, and which
//! messages the handlers sent. Topics a handler sends to but the test does not run are
//! *captured* instead: their messages are kept for inspection.
//!
//! ```
//! use event_base::prelude::*;
//! use event_base::testing::TestBus;
//!
//! // The code under test: an order handler that bills and refuses empty orders.
//! async fn handle_order(msg: EMessage) -> Ack {
//!     if msg.payload.0.is_empty() {
//!         return Ack::dead();
//!     }
//!     let bill = EMessage::standard("billing", msg.payload.0.clone());
//!     match event_base::TopicRouter::global().send("billing", bill, None, None).await {
//!         Ok(_) => Ack::Ack,
//!         Err(_) => Ack::retry(),
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), CoreError> {
//! let t = TestBus::builder()
//!     .handler(HandlerSpec::new("orders", "orders", event_base::handler_fn(handle_order)))
//!     .capture("billing")
//!     .start()
//!     .await?;
//! let good = t.publish("orders", b"42".to_vec()).await?;
//! let bad = t.publish("orders", Vec::<u8>::new()).await?;
//! t.settle().await?;
//!
//! assert!(t.acked(&good));
//! assert_eq!(t.captured("billing").len(), 1);
//! assert_eq!(t.captured("billing")[0].metadata.causation_id.as_deref(), Some(&*good));
//! assert_eq!(t.dead_letters().await?[0].message.id, bad);
//! # t.stop().await?;
//! # Ok(()) }
//! ```
//!
//! # Isolation
//!
//! Every `TestBus` is a bus of its own, built with [`EventBus::builder`] and never installed
//! as the process-wide global, so tests that use one run in parallel under plain `cargo test`.
//! Its handlers still reach it with `send_msg!` and `TopicRouter::global()`: inside a handler
//! those send into the bus that runs the handler (the message context carries it), not the
//! global one. Outside a handler (the test body, or a task a handler spawned) they mean the
//! global bus, as always; send to a `TestBus` from there with [`TestBus::publish`] or
//! `t.bus().router()`.
//!
//! A `TestBus` ends when it is dropped, also when the test panics before [`TestBus::stop`]:
//! its bus refuses further sends and its workers are cancelled, and nothing of it is left in
//! the process for the next test. (A clone of [`TestBus::bus`] kept elsewhere keeps the bus
//! running until that clone is dropped too.) [`TestBus::stop`] is the orderly end: it drains
//! and reports.
//!
//! # Captured topics
//!
//! [`TestBusBuilder::capture`] *replaces* the topic's handlers: a handler given with
//! [`handler`](TestBusBuilder::handler) or found by
//! [`with_registered_handlers`](TestBusBuilder::with_registered_handlers) for a captured topic
//! is not started, and every message sent to the topic is kept, acked, for
//! [`TestBus::captured`]. So a test runs the handler under test and captures what it sends
//! downstream, whatever handlers the binary registers for those topics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_base_core::{
    async_trait, Ack, AuditEvent, AuditOutcome, AuditRecord, CoreError, DeadLetterMessage,
    EHandler, EMessage, EventBus, EventBusBuilder, HandlerRegistration, HandlerSpec, IntoMessage,
    MessageId, ShutdownReport, ShutdownStrategy, HANDLER_REGISTRY,
};

type Captured = Arc<Mutex<HashMap<String, Vec<EMessage>>>>;

/// The captured topics and how many messages each holds, sorted by topic: what a `Debug` of
/// the harness shows instead of every message.
fn captured_counts(captured: &Captured) -> Vec<(String, usize)> {
    let mut counts: Vec<(String, usize)> = match captured.lock() {
        Ok(map) => map.iter().map(|(t, v)| (t.clone(), v.len())).collect(),
        Err(poisoned) => poisoned
            .get_ref()
            .iter()
            .map(|(t, v)| (t.clone(), v.len()))
            .collect(),
    };
    counts.sort_unstable();
    counts
}

/// Builds a [`TestBus`].
#[must_use = "a builder does nothing until `build().await`"]
pub struct TestBusBuilder {
    builder: EventBusBuilder,
    /// Handlers given by value; those of captured topics are left out at start.
    handlers: Vec<HandlerSpec>,
    /// Whether to add every `#[handler]` of the binary (those of captured topics left out).
    registered: bool,
    captured: Captured,
    settle_timeout: Duration,
}

/// Shows the captured topics and the settle timeout (the wrapped `EventBusBuilder` holds
/// boxed backends and handlers and is left out).
impl std::fmt::Debug for TestBusBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let topics: Vec<String> = captured_counts(&self.captured)
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        f.debug_struct("TestBusBuilder")
            .field("handlers", &self.handlers)
            .field("registered", &self.registered)
            .field("captured_topics", &topics)
            .field("settle_timeout", &self.settle_timeout)
            .finish_non_exhaustive()
    }
}

impl TestBusBuilder {
    /// Adds a handler by value (left out if its topic is [captured](Self::capture)).
    pub fn handler(mut self, spec: HandlerSpec) -> Self {
        self.handlers.push(spec);
        self
    }

    /// Adds every `#[handler]` of the binary, except those of [captured](Self::capture)
    /// topics.
    pub fn with_registered_handlers(mut self) -> Self {
        self.registered = true;
        self
    }

    /// Captures `topic`: every message sent to it is kept (and acked) for
    /// [`TestBus::captured`], and the topic's own handlers, given with
    /// [`handler`](Self::handler) or registered with `#[handler]`, are *not* started: the
    /// capture replaces them, whichever order the calls come in.
    pub fn capture(self, topic: &str) -> Self {
        if let Ok(mut m) = self.captured.lock() {
            m.entry(topic.to_owned()).or_default();
        }
        self
    }

    /// How long [`TestBus::settle`] waits before it fails (default 10 s).
    pub fn settle_timeout(mut self, t: Duration) -> Self {
        self.settle_timeout = t;
        self
    }

    /// Starts the bus: an isolated one, not installed as the global bus (see the
    /// [module docs](self)).
    ///
    /// Fails as [`EventBusBuilder::build`] does: outside a tokio runtime, with two handlers
    /// of one name, or (with [`with_registered_handlers`](Self::with_registered_handlers)) when
    /// the binary has no `#[handler]` and nothing else was given.
    pub async fn start(self) -> Result<TestBus, CoreError> {
        let captured_topics: Vec<String> = captured_counts(&self.captured)
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        let is_captured = |topic: &str| captured_topics.iter().any(|t| t == topic);
        let mut builder = self.builder;
        let mut specs = self.handlers;
        if self.registered {
            if HANDLER_REGISTRY.is_empty() {
                // Nothing to filter: the core's own check says what is missing and the fix.
                builder = builder.with_registered_handlers();
            } else {
                specs.extend(HANDLER_REGISTRY.iter().map(HandlerRegistration::to_spec));
            }
        }
        for spec in specs.into_iter().filter(|s| !is_captured(s.topic.as_str())) {
            builder = builder.handler(spec);
        }
        for topic in &captured_topics {
            builder = builder.handler(HandlerSpec::new(
                format!("capture:{topic}"),
                topic.as_str(),
                Capture {
                    topic: topic.clone(),
                    store: self.captured.clone(),
                },
            ));
        }
        let bus = builder.build().await?;
        Ok(TestBus {
            bus,
            captured: self.captured,
            settle_timeout: self.settle_timeout,
        })
    }
}

struct Capture {
    topic: String,
    store: Captured,
}

#[async_trait]
impl EHandler for Capture {
    async fn handler(&self, msg: &EMessage) -> Ack {
        if let Ok(mut m) = self.store.lock() {
            m.entry(self.topic.clone()).or_default().push(msg.clone());
        }
        Ack::Ack
    }
}

/// A running bus for tests, with questions a test asks about it.
///
/// Isolated: its own bus, not the global one, so tests using one run in parallel; its
/// handlers' `send_msg!` and `TopicRouter::global()` reach it. Dropping it (a panicking test
/// drops it too) ends the bus. See the [module docs](self).
pub struct TestBus {
    bus: EventBus,
    captured: Captured,
    settle_timeout: Duration,
}

/// Shows the bus, the settle timeout and, per captured topic, how many messages it holds
/// (not the messages themselves).
impl std::fmt::Debug for TestBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestBus")
            .field("bus", &self.bus)
            .field("captured", &captured_counts(&self.captured))
            .field("settle_timeout", &self.settle_timeout)
            .finish()
    }
}

impl TestBus {
    /// A builder: in-memory WAL and queues, auditing on, no handlers yet.
    pub fn builder() -> TestBusBuilder {
        TestBusBuilder {
            builder: crate::builder().audit(1 << 16),
            handlers: Vec::new(),
            registered: false,
            captured: Arc::default(),
            settle_timeout: Duration::from_secs(10),
        }
    }

    /// The bus itself (its router, metrics, workers, WAL). A clone kept past the `TestBus`
    /// keeps the bus running.
    pub fn bus(&self) -> &EventBus {
        &self.bus
    }

    /// Sends a message or payload to `topic`.
    pub async fn publish(
        &self,
        topic: &str,
        message: impl IntoMessage,
    ) -> Result<MessageId, CoreError> {
        self.bus.send(topic, message).await
    }

    /// Sends `message` to `topic` with [`SendOptions`](crate::SendOptions), as
    /// `EventBus::send_with` and `TopicRouter::send_with` do.
    pub async fn send_with(
        &self,
        topic: &str,
        message: crate::EMessage,
        options: crate::SendOptions,
    ) -> Result<MessageId, CoreError> {
        self.bus.send_with(topic, message, options).await
    }

    /// Waits until every accepted message (follow-ups, retries and their backoff included)
    /// is complete or dead.
    pub async fn settle(&self) -> Result<(), CoreError> {
        self.bus.wait_idle(self.settle_timeout).await
    }

    /// Every audit record of one message, in order.
    pub fn history(&self, id: &str) -> Vec<AuditRecord> {
        self.bus.audit().for_message(id)
    }

    fn outcomes(&self, id: &str) -> impl Iterator<Item = AuditOutcome> {
        self.history(id).into_iter().filter_map(|r| match r.event {
            AuditEvent::Finished { outcome, .. } => Some(outcome),
            AuditEvent::Started => None,
        })
    }

    /// Whether a handler acked the message.
    pub fn acked(&self, id: &str) -> bool {
        self.outcomes(id).any(|o| o == AuditOutcome::Acked)
    }

    /// How many times the message was scheduled again.
    pub fn retries(&self, id: &str) -> usize {
        self.outcomes(id)
            .filter(|o| matches!(o, AuditOutcome::Retried { .. }))
            .count()
    }

    /// The dead letters.
    pub async fn dead_letters(&self) -> Result<Vec<DeadLetterMessage>, CoreError> {
        self.bus.dead_letters().await
    }

    /// The messages sent to a [captured](TestBusBuilder::capture) topic, in arrival order
    /// (empty for a topic that is not captured).
    pub fn captured(&self, topic: &str) -> Vec<EMessage> {
        self.captured
            .lock()
            .ok()
            .and_then(|m| m.get(topic).cloned())
            .unwrap_or_default()
    }

    /// Stops the bus: everything accepted settles first (up to the settle timeout), then its
    /// workers stop. Dropping the `TestBus` instead ends it at once, without a report.
    pub async fn stop(self) -> Result<ShutdownReport, CoreError> {
        self.bus
            .shutdown(ShutdownStrategy::Drain {
                timeout: self.settle_timeout,
            })
            .await
    }
}
