//! [`HandlerSpec`]: a handler with its settings, and the compile-time [`HANDLER_REGISTRY`]
//! that `#[handler]` fills.
//!
//! `#[handler(topic = "..")]` on an `async fn` generates a unit struct implementing
//! [`EHandler`] and a [`HandlerRegistration`] in [`HANDLER_REGISTRY`]. `start_system!` builds a
//! [`HandlerSpec`] from every registration it finds. The registry is a `linkme` distributed
//! slice: the linker only keeps registrations from crates the final binary names, so when
//! handlers live in a library crate, name it in the binary (`use my_handlers as _;`). The bus
//! logs every handler it registers (topic, workers) at start-up so a missing one is visible.

use std::sync::Arc;
use std::time::Duration;

use crate::handler::backoff::Backoff;
use crate::handler::batch::{BatchSpec, EBatchHandler, OneOfBatch};
use crate::handler::ehandler::EHandler;
use crate::handler::middleware::Middleware;
use crate::handler::rate::Rate;
use crate::message::topic::MessageTopic;

/// What `#[handler]` records about a handler at compile time. (Hidden: the macro's, not a
/// program's.)
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct HandlerRegistration {
    /// The handler's name (the function name); worker names derive from it.
    pub name: &'static str,
    /// The topic it subscribes to.
    pub topic: &'static str,
    /// Number of workers (default 1).
    pub workers: usize,
    /// Per-delivery timeout in seconds.
    pub timeout_secs: Option<u64>,
    /// Retries for panics and timeouts, and the limit `Ack::retry()` gives a `NoAck`.
    pub retries: Option<u32>,
    /// Time a worker gets to finish its message at shutdown, in seconds.
    pub shutdown_timeout_secs: Option<u64>,
    /// `outbox`: sends held until the handler acks.
    pub outbox: bool,
    /// `batch = n, linger_ms = ms`: a batch handler, built by `make_batch`, taking up to `n`
    /// messages per call and waiting up to `ms` milliseconds for more.
    pub batch: Option<BatchRegistration>,
    /// `rate = ".."`: at most that many handler starts per period (checked as the crate
    /// compiles, by `check_rate`).
    pub rate: Option<&'static str>,
    /// Builds the handler value.
    pub make_handler: fn() -> Arc<dyn EHandler>,
    /// Builds the handler's middleware, outermost first.
    pub make_middleware: fn() -> Vec<Arc<dyn Middleware>>,
}

/// What `#[handler(.., batch = n, linger_ms = ms)]` records of a batch handler. (Hidden: the
/// macro's, not a program's.)
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct BatchRegistration {
    /// The most messages per call.
    pub max: usize,
    /// How long to wait for more, in milliseconds.
    pub linger_ms: u64,
    /// Builds the batch handler value.
    pub make_batch: fn() -> Arc<dyn EBatchHandler>,
}

impl HandlerRegistration {
    /// Turns the registration into a [`HandlerSpec`].
    pub fn to_spec(&self) -> HandlerSpec {
        if let Some(b) = &self.batch {
            let mut spec = HandlerSpec::batch_of(
                self.name,
                self.topic,
                (b.make_batch)(),
                b.max,
                Duration::from_millis(b.linger_ms),
            )
            .workers(self.workers);
            spec.timeout = self.timeout_secs.map(Duration::from_secs);
            spec.retries = self.retries;
            spec.shutdown_timeout = self.shutdown_timeout_secs.map(Duration::from_secs);
            spec.middleware = (self.make_middleware)();
            spec.rate = self.rate();
            return spec;
        }
        HandlerSpec {
            name: self.name.to_owned(),
            topic: MessageTopic::from(self.topic),
            workers: self.workers,
            timeout: self.timeout_secs.map(Duration::from_secs),
            retries: self.retries,
            shutdown_timeout: self.shutdown_timeout_secs.map(Duration::from_secs),
            handler: (self.make_handler)(),
            middleware: (self.make_middleware)(),
            backoff: None,
            outbox: self.outbox,
            batch: None,
            rate: self.rate(),
        }
    }

    /// The rate, parsed (the macro checked it at compile time).
    fn rate(&self) -> Option<Rate> {
        self.rate.and_then(|r| r.parse().ok())
    }
}

/// Every handler declared with `#[handler]` in the crates linked into the binary. (Hidden:
/// the macro's, not a program's.)
#[doc(hidden)]
#[linkme::distributed_slice]
pub static HANDLER_REGISTRY: [HandlerRegistration];

/// A handler with its settings, ready to be added to a bus.
///
/// ```
/// use event_base_core::{Ack, EMessage, HandlerSpec, handler_fn};
///
/// let spec = HandlerSpec::new("audit_orders", "order.created", handler_fn(|_msg: EMessage| async { Ack::Ack }))
///     .workers(2)
///     .retries(5);
/// assert_eq!(spec.workers, 2);
/// ```
#[derive(Clone)]
#[must_use = "a spec does nothing until it is added to a builder"]
pub struct HandlerSpec {
    /// Name; workers are called `<name>-0`, `<name>-1`, ...
    pub name: String,
    /// Topic subscribed to.
    pub topic: MessageTopic,
    /// Number of workers.
    pub workers: usize,
    /// Per-delivery timeout; [`MAX_WAIT`](crate::constant::MAX_WAIT) (30 years) or more is
    /// none.
    pub timeout: Option<Duration>,
    /// Default retries.
    pub retries: Option<u32>,
    /// Time to finish the current message at shutdown;
    /// [`MAX_WAIT`](crate::constant::MAX_WAIT) (30 years) or more is no limit.
    pub shutdown_timeout: Option<Duration>,
    /// The handler.
    pub handler: Arc<dyn EHandler>,
    /// Middleware, outermost first.
    pub middleware: Vec<Arc<dyn Middleware>>,
    /// Wait before redelivery after a panic, a timeout or `NoAck { retry_after: None }`.
    pub backoff: Option<Backoff>,
    /// Whether the handler's sends are held until it acks ([`HandlerSpec::outbox`]).
    pub outbox: bool,
    /// For a batch handler ([`HandlerSpec::batch`]): the handler its workers call and how they
    /// form batches. `handler` then calls it with one message at a time (for code that takes a
    /// spec's handler); the bus's workers call the batch handler.
    pub batch: Option<BatchSpec>,
    /// At most this many handler starts per period, across its workers (and, on a shared
    /// backend, its nodes) ([`HandlerSpec::rate`]); `None`: no limit.
    pub rate: Option<Rate>,
}

impl std::fmt::Debug for HandlerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerSpec")
            .field("name", &self.name)
            .field("topic", &self.topic)
            .field("workers", &self.workers)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .field("middleware", &self.middleware.len())
            .field("batch", &self.batch)
            .finish()
    }
}

impl HandlerSpec {
    /// A handler with one worker and default settings.
    pub fn new(
        name: impl Into<String>,
        topic: impl Into<MessageTopic>,
        handler: impl EHandler,
    ) -> Self {
        HandlerSpec {
            name: name.into(),
            topic: topic.into(),
            workers: 1,
            timeout: None,
            retries: None,
            shutdown_timeout: None,
            handler: Arc::new(handler),
            middleware: Vec::new(),
            backoff: None,
            outbox: false,
            batch: None,
            rate: None,
        }
    }

    /// A batch handler with one worker: its worker hands it up to `max` ready messages per
    /// call (at least 1), waiting at most `linger` (clamped to
    /// [`MAX_WAIT`](crate::constant::MAX_WAIT)) for more while it holds fewer; see
    /// [`EBatchHandler`] for how its answer, a panic or a timeout apply to each message.
    ///
    /// ```
    /// use event_base_core::{batch_fn, Ack, EMessage, HandlerSpec};
    /// use std::time::Duration;
    ///
    /// let spec = HandlerSpec::batch(
    ///     "store",
    ///     "metrics.points",
    ///     batch_fn(|_batch: Vec<EMessage>| async { Ack::Ack }),
    ///     500,
    ///     Duration::from_millis(10),
    /// )
    /// .retries(5);
    /// assert_eq!(spec.batch.as_ref().map(|b| (b.max, b.linger)), Some((500, Duration::from_millis(10))));
    /// ```
    pub fn batch(
        name: impl Into<String>,
        topic: impl Into<MessageTopic>,
        handler: impl EBatchHandler,
        max: usize,
        linger: Duration,
    ) -> Self {
        HandlerSpec::batch_of(name, topic, Arc::new(handler), max, linger)
    }

    fn batch_of(
        name: impl Into<String>,
        topic: impl Into<MessageTopic>,
        handler: Arc<dyn EBatchHandler>,
        max: usize,
        linger: Duration,
    ) -> Self {
        let mut spec = HandlerSpec::new(name, topic, OneOfBatch(handler.clone()));
        spec.batch = Some(BatchSpec {
            handler,
            max,
            linger,
        });
        spec
    }

    /// Holds the messages the handler sends while it runs (from its own task, to its own
    /// bus) and releases them only with its `Ack`: appended to the WAL together with the
    /// handler's completion, in one record, so that after a crash either the completion and
    /// all its messages are in the log or none is (and the handler runs again). On `NoAck`,
    /// `Dead`, a panic or a timeout they are discarded, so a retried handler never sends
    /// twice. A held send answers `Ok` with the message's id at once. Not for batch handlers
    /// ([`HandlerSpec::batch`]): the builder refuses the two together.
    ///
    /// ```
    /// use event_base_core::{Ack, EMessage, HandlerSpec, handler_fn};
    /// let spec = HandlerSpec::new("bill", "order.created", handler_fn(|_m: EMessage| async { Ack::Ack }))
    ///     .outbox(true);
    /// assert!(spec.outbox);
    /// ```
    pub fn outbox(mut self, on: bool) -> Self {
        self.outbox = on;
        self
    }

    /// How long to wait before redelivering after a panic, a timeout, or
    /// `NoAck { retry_after: None }` (which otherwise redelivers at once).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// Number of workers.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// Per-delivery timeout; [`MAX_WAIT`](crate::constant::MAX_WAIT) (30 years) or more is
    /// none.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// Default retries.
    pub fn retries(mut self, n: u32) -> Self {
        self.retries = Some(n);
        self
    }

    /// At most `rate` handler starts per period, across all its workers, and across every
    /// node running it on a shared backend (Redis). Starts are spaced evenly; messages
    /// beyond the rate wait (never dropped, never failures), and the time spent waiting is
    /// in the metrics (`SubscriptionMetrics::rate_limited`). A batch handler's rate counts
    /// its calls. Same as `#[handler(rate = "100/s")]`.
    ///
    /// ```
    /// use event_base_core::{handler_fn, Ack, EMessage, HandlerSpec, Rate};
    ///
    /// let spec = HandlerSpec::new("mailer", "mail.send", handler_fn(|_m: EMessage| async { Ack::Ack }))
    ///     .workers(4)
    ///     .rate("50/s".parse()?);
    /// assert_eq!(spec.rate, Some(Rate::per_second(50)?));
    /// # Ok::<(), event_base_core::CoreError>(())
    /// ```
    pub fn rate(mut self, rate: Rate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// Time to finish the current message at shutdown;
    /// [`MAX_WAIT`](crate::constant::MAX_WAIT) (30 years) or more is no limit.
    pub fn shutdown_timeout(mut self, t: Duration) -> Self {
        self.shutdown_timeout = Some(t);
        self
    }

    /// Adds a middleware inside the ones already added.
    pub fn middleware(mut self, m: impl Middleware) -> Self {
        self.middleware.push(Arc::new(m));
        self
    }
}
