//! [`MetricsMiddleware`]: counts and times the deliveries that pass through it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use event_base_core::{Ack, EMessage, LatencyHistogram, LatencySummary, Middleware, Next};

#[derive(Debug, Default)]
struct Stats {
    calls: AtomicU64,
    acked: AtomicU64,
    retried: AtomicU64,
    dead: AtomicU64,
    latency: LatencyHistogram,
}

/// Counts deliveries and their outcomes and times them. Clones share the same figures, so
/// keep a clone to read them; with the `metrics` feature they also go to the `metrics`
/// facade as `event_base_middleware_*{name}`.
///
/// The bus already keeps per-topic and per-worker counters (`EventBus::metrics`); this
/// middleware measures exactly the part of a chain it wraps, under a name of your choosing.
///
/// ```
/// use event_base_middleware::MetricsMiddleware;
/// let m = MetricsMiddleware::new("orders");
/// // HandlerSpec::new(..).middleware(m.clone())
/// assert_eq!(m.snapshot().calls, 0);
/// ```
#[derive(Debug, Clone)]
pub struct MetricsMiddleware {
    name: Arc<str>,
    stats: Arc<Stats>,
}

/// Figures of one [`MetricsMiddleware`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MiddlewareMetrics {
    /// Deliveries seen.
    pub calls: u64,
    /// Answered `Ack::Ack`.
    pub acked: u64,
    /// Answered `Ack::NoAck`.
    pub retried: u64,
    /// Answered `Ack::Dead`.
    pub dead: u64,
    /// Time in the wrapped chain.
    pub latency: LatencySummary,
}

impl Default for MetricsMiddleware {
    fn default() -> Self {
        Self::new("default")
    }
}

impl MetricsMiddleware {
    /// A new set of figures, labelled `name`.
    pub fn new(name: impl AsRef<str>) -> Self {
        MetricsMiddleware {
            name: Arc::from(name.as_ref()),
            stats: Arc::default(),
        }
    }

    /// The label given at creation.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The figures now.
    pub fn snapshot(&self) -> MiddlewareMetrics {
        let s = &self.stats;
        MiddlewareMetrics {
            calls: s.calls.load(Ordering::Relaxed),
            acked: s.acked.load(Ordering::Relaxed),
            retried: s.retried.load(Ordering::Relaxed),
            dead: s.dead.load(Ordering::Relaxed),
            latency: s.latency.summary(),
        }
    }
}

#[async_trait]
impl Middleware for MetricsMiddleware {
    async fn handle(&self, msg: &EMessage, next: Next<'_>) -> Ack {
        let started = Instant::now();
        let ack = next.run(msg).await;
        let took = started.elapsed();
        let s = &self.stats;
        s.calls.fetch_add(1, Ordering::Relaxed);
        s.latency.record(took);
        let outcome = match &ack {
            Ack::Ack => &s.acked,
            Ack::NoAck { .. } => &s.retried,
            Ack::Dead { .. } => &s.dead,
        };
        outcome.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        {
            let name = self.name.to_string();
            metrics::counter!("event_base_middleware_calls_total", "name" => name.clone(), "outcome" => ack.kind()).increment(1);
            metrics::histogram!("event_base_middleware_seconds", "name" => name)
                .record(took.as_secs_f64());
        }
        ack
    }
}
