//! One delivery: the handler's pipeline run for one message, inside its tracing span and the
//! message context, with panics caught, the handler's timeout enforced, and the topic's
//! queue-wait and handler-time histograms fed.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tracing::Instrument;

use crate::constant::DEFAULT_MAX_RETRIES;
use crate::message::ack::Ack;
use crate::message::context::{handling, take_failure, take_outbox, with_current};
use crate::message::emessage::EMessage;
use crate::worker::catch_unwind::CatchUnwind;
use crate::worker::outcome::Outcome;
use crate::worker::Worker;

impl Worker {
    /// Runs the pipeline for `message` and says how it ended. Never panics, and returns by
    /// the handler's timeout at the latest.
    /// `started` is when the delivery began, if the bus keeps time (latency metrics, audit).
    /// With an outbox, also the messages the handler sent, held until it acks; and, when
    /// `started` is given, when the delivery ended and how long it took (the one clock read
    /// after the handler, which the handler-time histogram, the audit and the dedup window
    /// share).
    pub(super) async fn deliver(
        &self,
        message: &Arc<EMessage>,
        started: Option<SystemTime>,
    ) -> (Outcome, Vec<Arc<EMessage>>, Option<(SystemTime, Duration)>) {
        let counters = &self.entry.counters;
        let latency = self.latency_metrics;
        if let Some(now) = started.filter(|_| latency) {
            if message.attempts <= 1 {
                let since = message
                    .deliver_at
                    .map_or(message.metadata.created_at, |at| {
                        at.max(message.metadata.created_at)
                    });
                if let Ok(wait) = now.duration_since(since) {
                    counters.queue_wait.record(wait);
                }
            }
        }
        // The one span of a delivery. `outcome` and `duration_us` are filled in by
        // `LoggerMiddleware`, which records into this span instead of opening its own.
        let span = tracing::info_span!(
            target: crate::constant::target::DELIVERY,
            "event_base.handle",
            id = %message.id,
            topic = %message.topic,
            attempt = message.attempts,
            trace_id = message.metadata.trace_id.as_deref(),
            correlation_id = message.metadata.correlation_id.as_deref(),
            outcome = tracing::field::Empty,
            duration_us = tracing::field::Empty,
        );
        // A child of the span the message's `traceparent` names (the sender's).
        #[cfg(feature = "otel")]
        crate::observe::trace_context::adopt(&span, message);
        let call = CatchUnwind(self.pipeline.call(message));
        let run = async {
            let outcome = match self.timeout {
                None => match call.await {
                    Ok(ack) => Outcome::Answered(ack),
                    Err(panic) => Outcome::Panicked(panic),
                },
                Some(limit) => match tokio::time::timeout(limit, call).await {
                    Ok(Ok(ack)) => Outcome::Answered(ack),
                    Ok(Err(panic)) => Outcome::Panicked(panic),
                    Err(_) => Outcome::TimedOut,
                },
            };
            // An `Err` return answers `NoAck` and leaves its text in the context (`IntoAck`);
            // read here, inside the context's scope. Other answers never look.
            let outcome = match outcome {
                Outcome::Answered(Ack::NoAck { retry_after, .. }) => match take_failure() {
                    Some(text) => Outcome::Failed { text, retry_after },
                    None => outcome,
                },
                other => other,
            };
            // The outbox too is read inside the scope; without one there is nothing to take.
            let held = if self.outbox {
                take_outbox()
            } else {
                Vec::new()
            };
            (outcome, held)
        };
        // Without a subscriber that wants the span, skip wrapping the handler's future in it:
        // entering a disabled span on every poll is pure cost.
        let retries = self.policy.retries.unwrap_or(DEFAULT_MAX_RETRIES);
        // The handler's `TopicRouter::global()` and `send_msg!` reach this bus.
        // Inside the worker's own context (`Worker::run`) the message is only put in; a worker
        // run some other way gets a context for this delivery alone.
        let outcome = match (handling(message), span.is_disabled()) {
            (Some(_handling), true) => run.await,
            (Some(_handling), false) => run.instrument(span).await,
            (None, true) => {
                let bus = self.hub.clone();
                with_current(message.clone(), retries, bus, self.outbox, run).await
            }
            (None, false) => {
                let bus = self.hub.clone();
                let run = run.instrument(span);
                with_current(message.clone(), retries, bus, self.outbox, run).await
            }
        };
        // The one clock read after the handler: when it ended, and how long it took.
        let ended = started.map(|t| {
            let now = SystemTime::now();
            (now, now.duration_since(t))
        });
        if let Some((_, Ok(took))) = ended.as_ref().filter(|_| latency) {
            counters.handler_time.record(*took);
        }
        let (outcome, held) = outcome;
        // A clock that went back reads as zero time taken (the histogram skips it), ended
        // when it started.
        let ended = ended.zip(started).map(|((now, took), t)| match took {
            Ok(took) => (now, took),
            Err(_) => (t, Duration::ZERO),
        });
        (outcome, held, ended)
    }
}
