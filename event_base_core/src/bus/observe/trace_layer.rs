//! Tracing into the bus: [`TraceRecord`] and, with the `trace` feature, [`TraceLayer`], a
//! `tracing_subscriber::Layer` that turns events, and spans when they close, at or above a
//! level into `TraceRecord`s published, in batches, on `_system.trace`.
//!
//! Each record carries the id, trace id and correlation id of the message being handled when
//! the event was emitted (see [`current_message`](crate::current_message)), so the events of
//! a chain of messages can be put back together.
//!
//! Events from the bus's own crates, and from handlers of `_system.` topics, are skipped, so
//! the bus never traces its own tracing. The
//! layer never blocks the code that logs: records go through a bounded channel, and when it is
//! full they are dropped and counted.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// One tracing event, or one closed span, as published on `_system.trace`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TraceRecord {
    /// `ERROR`, `WARN`, `INFO`, `DEBUG` or `TRACE`.
    pub level: String,
    /// The event's target (module path by default).
    pub target: String,
    /// The event's message (for a span: its name).
    pub message: Option<String>,
    /// Its other fields, formatted.
    pub fields: BTreeMap<String, String>,
    /// The innermost span it happened in (for a span: the span itself).
    pub span: Option<String>,
    /// For a closed span: how long it was open. `None` for events.
    pub span_duration: Option<std::time::Duration>,
    /// The message being handled, if the event came from a handler.
    pub message_id: Option<String>,
    /// That message's trace id.
    pub trace_id: Option<String>,
    /// That message's correlation id.
    pub correlation_id: Option<String>,
    /// When.
    pub at: SystemTime,
}

#[cfg(feature = "trace")]
pub use layer::TraceLayer;

#[cfg(feature = "trace")]
mod layer {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Weak};
    use std::time::SystemTime;

    use std::time::Instant;

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id};
    use tracing::{Event, Level, Subscriber};
    use tracing_subscriber::layer::Context;
    use tracing_subscriber::registry::LookupSpan;
    use tracing_subscriber::Layer;

    use super::TraceRecord;
    use crate::bus::event_bus::EventBus;
    use crate::bus::shared::BusShared;
    use crate::constant::TRACE;
    use crate::message::context::current_message;

    const CHANNEL: usize = 8192;

    /// Publishes tracing events at or above `level` on `_system.trace` of a system.
    ///
    /// ```no_run
    /// # async fn demo(bus: event_base_core::EventBus) {
    /// use tracing_subscriber::prelude::*;
    /// let layer = event_base_core::TraceLayer::new(&bus, tracing::Level::INFO);
    /// tracing_subscriber::registry().with(layer).init();
    /// # }
    /// ```
    pub struct TraceLayer {
        level: Level,
        tx: flume::Sender<TraceRecord>,
        dropped: Arc<AtomicU64>,
    }

    impl std::fmt::Debug for TraceLayer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("TraceLayer")
                .field("level", &self.level)
                .field("dropped", &self.dropped())
                .finish()
        }
    }

    impl TraceLayer {
        /// A layer feeding `bus`; must be called inside its tokio runtime (it starts the task
        /// that publishes the batches). The layer does not keep the system alive.
        pub fn new(bus: &EventBus, level: Level) -> TraceLayer {
            let (tx, rx) = flume::bounded(CHANNEL);
            let shared = Arc::downgrade(&bus.shared);
            tokio::spawn(forward(shared, rx));
            TraceLayer {
                level,
                tx,
                dropped: Arc::default(),
            }
        }

        /// Records dropped because the channel was full.
        pub fn dropped(&self) -> u64 {
            self.dropped.load(Ordering::Relaxed)
        }
    }

    async fn forward(shared: Weak<BusShared>, rx: flume::Receiver<TraceRecord>) {
        while let Ok(first) = rx.recv_async().await {
            let mut batch = vec![first];
            while let Ok(more) = rx.try_recv() {
                batch.push(more);
                if batch.len() >= 512 {
                    break;
                }
            }
            let Some(shared) = shared.upgrade() else {
                return;
            };
            shared.delivery.announce(TRACE, &batch).await;
        }
    }

    /// The bus's own crates (not user crates that merely start with `event_base`).
    fn is_own_target(target: &str) -> bool {
        const OWN: [&str; 7] = [
            "event_base",
            "event_base_core",
            "event_base_wal",
            "event_base_queue",
            "event_base_middleware",
            "event_base_audit",
            "event_base_grpc",
        ];
        let krate = target.split("::").next().unwrap_or(target);
        OWN.contains(&krate)
    }

    #[derive(Default)]
    struct Fields {
        message: Option<String>,
        fields: BTreeMap<String, String>,
    }

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                self.message = Some(format!("{value:?}"));
            } else {
                self.fields
                    .insert(field.name().to_owned(), format!("{value:?}"));
            }
        }

        fn record_str(&mut self, field: &Field, value: &str) {
            if field.name() == "message" {
                self.message = Some(value.to_owned());
            } else {
                self.fields
                    .insert(field.name().to_owned(), value.to_owned());
            }
        }
    }

    impl<S> Layer<S> for TraceLayer
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
            let meta = event.metadata();
            let Some(current) = self.admit(meta) else {
                return;
            };
            let mut fields = Fields::default();
            event.record(&mut fields);
            let span = ctx.lookup_current().map(|s| s.name().to_owned());
            self.publish(record(
                meta,
                fields.message,
                fields.fields,
                span,
                None,
                current,
            ));
        }

        fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
            let Some(current) = self.admit(attrs.metadata()) else {
                return;
            };
            let mut fields = Fields::default();
            attrs.record(&mut fields);
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().insert(OpenSpan {
                    opened: Instant::now(),
                    fields: fields.fields,
                    message: current,
                });
            }
        }

        fn on_close(&self, id: Id, ctx: Context<'_, S>) {
            let Some(span) = ctx.span(&id) else { return };
            let Some(open) = span.extensions_mut().remove::<OpenSpan>() else {
                return;
            };
            let meta = span.metadata();
            let name = Some(meta.name().to_owned());
            self.publish(record(
                meta,
                name.clone(),
                open.fields,
                name,
                Some(open.opened.elapsed()),
                open.message,
            ));
        }
    }

    /// What the layer keeps about a span while it is open.
    struct OpenSpan {
        opened: Instant,
        fields: BTreeMap<String, String>,
        message: Option<Arc<crate::message::emessage::EMessage>>,
    }

    /// A record of an event or a closed span, tagged with the message being handled.
    fn record(
        meta: &tracing::Metadata<'_>,
        message: Option<String>,
        fields: BTreeMap<String, String>,
        span: Option<String>,
        span_duration: Option<std::time::Duration>,
        current: Option<Arc<crate::message::emessage::EMessage>>,
    ) -> TraceRecord {
        TraceRecord {
            level: meta.level().to_string(),
            target: meta.target().to_owned(),
            message,
            fields,
            span,
            span_duration,
            message_id: current.as_ref().map(|m| m.id.clone()),
            trace_id: current.as_ref().and_then(|m| m.metadata.trace_id.clone()),
            correlation_id: current
                .as_ref()
                .and_then(|m| m.metadata.correlation_id.clone()),
            at: SystemTime::now(),
        }
    }

    impl TraceLayer {
        /// Whether to record something with this metadata now; if so, the message being
        /// handled (if any). Skipped: below the level (in `tracing`'s order ERROR < WARN <
        /// INFO < DEBUG < TRACE, keep what is at least as severe as `level`), the bus's own
        /// crates, and anything inside a handler of a `_system.` topic (a subscriber of
        /// `_system.trace` that logs would otherwise feed itself).
        #[allow(clippy::option_option)]
        fn admit(
            &self,
            meta: &tracing::Metadata<'_>,
        ) -> Option<Option<Arc<crate::message::emessage::EMessage>>> {
            if *meta.level() > self.level || is_own_target(meta.target()) {
                return None;
            }
            let current = current_message();
            if current.as_ref().is_some_and(|m| m.topic.is_system()) {
                return None;
            }
            Some(current)
        }

        fn publish(&self, record: TraceRecord) {
            if self.tx.try_send(record).is_err() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
