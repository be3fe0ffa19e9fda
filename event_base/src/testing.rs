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

use std::time::SystemTime;

use event_base_core::backend::{Wal, WalCommit, WalRecord, WalStats};
use event_base_core::{
    async_trait, Ack, AuditEvent, AuditOutcome, AuditRecord, CoreError, DeadLetterMessage,
    DeadReason, EHandler, EMessage, EventBus, EventBusBuilder, HandlerRegistration, HandlerSpec,
    IntoMessage, MessageId, ShutdownReport, ShutdownStrategy, WalError, HANDLER_REGISTRY,
};
use event_base_wal::MemoryWal;

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

/// What the harness's WAL saw appended: every message in order, and what each outbox
/// completion released, by the id of the message whose handler acked.
#[derive(Debug, Default)]
struct Appended {
    messages: Vec<Arc<EMessage>>,
    released: HashMap<String, Vec<Arc<EMessage>>>,
}

type Journal = Arc<Mutex<Appended>>;

/// The harness's WAL: a `MemoryWal` that also notes every message appended to it, so a test
/// can ask what a handler sent ([`TestBus::sent_by`]) and what its outbox released
/// ([`TestBus::released`]) after the records themselves have completed and gone.
struct RecordingWal {
    inner: MemoryWal,
    journal: Journal,
}

impl RecordingWal {
    fn note(&self, messages: &[Arc<EMessage>]) {
        if let Ok(mut j) = self.journal.lock() {
            j.messages.extend(messages.iter().cloned());
        }
    }
}

#[async_trait]
impl Wal for RecordingWal {
    fn append(&self, message: &Arc<EMessage>) -> Result<WalCommit, WalError> {
        let commit = self.inner.append(message)?;
        self.note(std::slice::from_ref(message));
        Ok(commit)
    }
    fn append_batch(&self, messages: &[Arc<EMessage>]) -> Result<WalCommit, WalError> {
        let commit = self.inner.append_batch(messages)?;
        self.note(messages);
        Ok(commit)
    }
    fn append_unique(&self, message: &Arc<EMessage>) -> Result<Option<WalCommit>, WalError> {
        let commit = self.inner.append_unique(message)?;
        if commit.is_some() {
            self.note(std::slice::from_ref(message));
        }
        Ok(commit)
    }
    fn append_batch_unique(
        &self,
        messages: &[Arc<EMessage>],
    ) -> Result<(WalCommit, Vec<bool>), WalError> {
        let (commit, appended) = self.inner.append_batch_unique(messages)?;
        let new: Vec<Arc<EMessage>> = messages
            .iter()
            .zip(&appended)
            .filter(|(_, &a)| a)
            .map(|(m, _)| m.clone())
            .collect();
        self.note(&new);
        Ok((commit, appended))
    }
    async fn recent_completions(
        &self,
        since: SystemTime,
    ) -> Result<Vec<(String, SystemTime)>, WalError> {
        self.inner.recent_completions(since).await
    }
    fn begin(&self, id: &str) -> Result<bool, WalError> {
        self.inner.begin(id)
    }
    fn complete(&self, id: &str) -> Result<(), WalError> {
        self.inner.complete(id)
    }
    fn begin_batch(&self, ids: &[&str]) -> Result<Vec<bool>, WalError> {
        self.inner.begin_batch(ids)
    }
    fn complete_batch(&self, ids: &[&str]) -> Result<(), WalError> {
        self.inner.complete_batch(ids)
    }
    fn complete_with(&self, id: &str, messages: &[Arc<EMessage>]) -> Result<WalCommit, WalError> {
        let commit = self.inner.complete_with(id, messages)?;
        self.note(messages);
        if let Ok(mut j) = self.journal.lock() {
            j.released
                .entry(id.to_owned())
                .or_default()
                .extend(messages.iter().cloned());
        }
        Ok(commit)
    }
    fn retry(&self, message: &Arc<EMessage>) -> Result<(), WalError> {
        self.inner.retry(message)
    }
    fn fail(
        &self,
        message: &Arc<EMessage>,
        reason: &DeadReason,
        handlers: &[String],
    ) -> Result<(), WalError> {
        self.inner.fail(message, reason, handlers)
    }
    fn cancel(&self, id: &str) -> Result<Option<WalCommit>, WalError> {
        self.inner.cancel(id)
    }
    async fn pending(&self) -> Result<Vec<WalRecord>, WalError> {
        self.inner.pending().await
    }
    async fn dead_letters(&self) -> Result<Vec<DeadLetterMessage>, WalError> {
        self.inner.dead_letters().await
    }
    async fn take_dead_letter(&self, id: &str) -> Result<Option<DeadLetterMessage>, WalError> {
        self.inner.take_dead_letter(id).await
    }
    async fn purge_dead_letters(&self) -> Result<usize, WalError> {
        self.inner.purge_dead_letters().await
    }
    async fn flush(&self) -> Result<(), WalError> {
        self.inner.flush().await
    }
    fn stats(&self) -> WalStats {
        self.inner.stats()
    }
}

/// One delivery of a message that did not ack, as [`TestBus::failures`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Failure {
    /// The delivery (1 for the first).
    pub attempt: u32,
    /// Why, as the bus recorded it: the text of a handler's `Err`, `panic: ..`, the reason of
    /// a payload a `Json<T>` parameter could not decode (`could not decode the payload as
    /// ..`), `timed out ..`; `None` for a `NoAck` the handler answered itself.
    pub reason: Option<String>,
    /// Whether this delivery made the message a dead letter (else it was retried).
    pub dead: bool,
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
    journal: Journal,
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
            journal: self.journal,
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
    journal: Journal,
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
    /// A builder: in-memory WAL and queues, auditing on, no handlers yet. The WAL also keeps
    /// every message appended to it for the bus's life (for [`sent_by`](Self::sent_by) and
    /// [`released`](Self::released)): a `TestBus` is sized for tests, not for millions of
    /// messages.
    pub fn builder() -> TestBusBuilder {
        let journal = Journal::default();
        let wal = RecordingWal {
            inner: MemoryWal::new(),
            journal: journal.clone(),
        };
        TestBusBuilder {
            builder: crate::builder().wal(wal).audit(1 << 16),
            handlers: Vec::new(),
            registered: false,
            captured: Arc::default(),
            journal,
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

    /// How the message's last delivery ended (`None` while no delivery of it has ended): the
    /// typed outcome of a typed handler too, e.g. `Dead { reason: Other(..) }` with the text
    /// of a `Result` handler's last `Err`, or with the reason a `Json<T>` parameter could not
    /// decode the payload.
    ///
    /// ```
    /// use event_base::prelude::*;
    /// use event_base::testing::TestBus;
    /// use event_base::AuditOutcome;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Order {
    ///     qty: u32,
    /// }
    ///
    /// #[handler(topic = "orders", retries = 1)]
    /// async fn place(Json(order): Json<Order>) -> Result<(), String> {
    ///     if order.qty == 0 {
    ///         return Err("an order of nothing".into());
    ///     }
    ///     Ok(())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), CoreError> {
    /// let t = TestBus::builder()
    ///     .with_registered_handlers()
    ///     .start()
    ///     .await?;
    /// let good = t.publish("orders", br#"{"qty":2}"#.to_vec()).await?;
    /// let empty = t.publish("orders", br#"{"qty":0}"#.to_vec()).await?;
    /// let garbled = t.publish("orders", b"qty=2".to_vec()).await?;
    /// t.settle().await?;
    ///
    /// assert_eq!(t.outcome(&good), Some(AuditOutcome::Acked));
    /// // The Err text, once per delivery: retried once, then dead with it.
    /// let failures = t.failures(&empty);
    /// assert_eq!(failures.len(), 2);
    /// assert!(failures.iter().all(|f| f.reason.as_deref() == Some("an order of nothing")));
    /// assert!(failures[1].dead);
    /// // Bad input is dead at once, the reason naming the type.
    /// let failures = t.failures(&garbled);
    /// assert_eq!(failures.len(), 1);
    /// assert!(failures[0].reason.as_deref().is_some_and(|r| r.contains("Order")));
    /// # t.stop().await?;
    /// # Ok(()) }
    /// ```
    pub fn outcome(&self, id: &str) -> Option<AuditOutcome> {
        self.outcomes(id).last()
    }

    /// Every delivery of the message that did not ack, in order, with why: see [`Failure`]
    /// and the example of [`outcome`](Self::outcome).
    pub fn failures(&self, id: &str) -> Vec<Failure> {
        self.history(id)
            .into_iter()
            .filter_map(|r| match r.event {
                AuditEvent::Finished { outcome, .. } => match outcome {
                    AuditOutcome::Acked => None,
                    AuditOutcome::Retried { reason, .. } => Some(Failure {
                        attempt: r.attempt,
                        reason,
                        dead: false,
                    }),
                    AuditOutcome::Dead { reason } => Some(Failure {
                        attempt: r.attempt,
                        reason: Some(reason.to_string()),
                        dead: true,
                    }),
                },
                AuditEvent::Started => None,
            })
            .collect()
    }

    /// The messages sent while message `id` was handled (those whose `causation_id` is `id`,
    /// which a send from a handler inherits), in the order the bus accepted them. For a
    /// handler with an outbox these are only what its acking run released: the sends of runs
    /// that failed were discarded and never reached the bus.
    pub fn sent_by(&self, id: &str) -> Vec<EMessage> {
        self.journal
            .lock()
            .map(|j| {
                j.messages
                    .iter()
                    .filter(|m| m.metadata.causation_id.as_deref() == Some(id))
                    .map(|m| (**m).clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// What the outbox of the handler that acked message `id` released with that ack, in the
    /// same WAL commit as the completion (empty when nothing was released: the handler has no
    /// outbox, sent nothing, or never acked). When the message has several handlers and the
    /// acking one was not the last to finish, its messages were released as sends of their
    /// own: see [`sent_by`](Self::sent_by).
    ///
    /// ```
    /// use event_base::prelude::*;
    /// use event_base::testing::TestBus;
    ///
    /// // Sends a receipt, then fails on the first delivery: only the second's receipt goes out.
    /// async fn bill(msg: EMessage) -> Ack {
    ///     let receipt = format!("receipt of attempt {}", msg.attempts);
    ///     if event_base::send_msg!("receipts", receipt.into_bytes()).await.is_err() {
    ///         return Ack::retry();
    ///     }
    ///     if msg.attempts == 1 { Ack::retry() } else { Ack::Ack }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), CoreError> {
    /// let t = TestBus::builder()
    ///     .handler(HandlerSpec::new("bill", "orders", event_base::handler_fn(bill)).outbox(true))
    ///     .capture("receipts")
    ///     .start()
    ///     .await?;
    /// let id = t.publish("orders", b"42".to_vec()).await?;
    /// t.settle().await?;
    ///
    /// let released = t.released(&id);
    /// assert_eq!(released.len(), 1);
    /// assert_eq!(&released[0].payload.0[..], b"receipt of attempt 2");
    /// assert_eq!(t.sent_by(&id), released, "the first run's receipt never left the outbox");
    /// assert_eq!(t.captured("receipts").len(), 1);
    /// # t.stop().await?;
    /// # Ok(()) }
    /// ```
    pub fn released(&self, id: &str) -> Vec<EMessage> {
        self.journal
            .lock()
            .ok()
            .and_then(|j| {
                j.released
                    .get(id)
                    .map(|v| v.iter().map(|m| (**m).clone()).collect())
            })
            .unwrap_or_default()
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
