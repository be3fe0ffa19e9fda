//! W3C trace context across messages (feature `otel`): a send puts the sender's current
//! OpenTelemetry span into the message's `traceparent`/`tracestate` headers, and a delivery's
//! `event_base.handle` span takes the span they name as its parent, so a send, its handler,
//! what the handler sends and its handler are one trace, across processes too (the headers
//! travel through the WAL, Redis and gRPC).
//!
//! The spans are `tracing` spans; OpenTelemetry sees them through `tracing-opentelemetry`'s
//! layer, which the application installs with its exporter. Without that layer the current
//! span has no OpenTelemetry context and nothing is written; a message that already carries a
//! `traceparent` (set by the application, or by another service) keeps it.
//!
//! The header format is W3C Trace Context level 1: `traceparent` is
//! `00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>`, `tracestate` a list of
//! `key=value` pairs kept as it came.

use std::str::FromStr;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::message::emessage::EMessage;
use crate::message::headers::MessageHeaders;

/// Writes the current span's context into `message`'s headers, unless it carries a
/// `traceparent` already or there is no valid current OpenTelemetry span.
pub(crate) fn inject(message: &mut EMessage) {
    if message.headers.get(MessageHeaders::TRACEPARENT).is_some() {
        return;
    }
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    if !sc.is_valid() {
        return;
    }
    message
        .headers
        .insert(MessageHeaders::TRACEPARENT, traceparent(&sc));
    let state = sc.trace_state().header();
    if !state.is_empty() {
        message.headers.insert(MessageHeaders::TRACESTATE, state);
    }
}

/// Makes `span` (a delivery's span) a child of the span `message`'s `traceparent` names, if
/// it names a valid one.
pub(crate) fn adopt(span: &tracing::Span, message: &EMessage) {
    if message.headers.is_empty() || span.is_disabled() {
        return;
    }
    if let Some(sc) = extract(message) {
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(sc));
    }
}

/// The `traceparent` header of `sc`.
fn traceparent(sc: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}

/// The remote span context `message`'s headers name, if its `traceparent` is valid.
pub(crate) fn extract(message: &EMessage) -> Option<SpanContext> {
    let header = message.headers.get(MessageHeaders::TRACEPARENT)?;
    let mut parts = header.trim().split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let span = parts.next()?;
    let flags = parts.next()?;
    // Version 00 has exactly four parts; a later version may add some (read what we know).
    if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    };
    if !hex(version, 2) || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()? & TraceFlags::SAMPLED.to_u8());
    let state = message
        .headers
        .get(MessageHeaders::TRACESTATE)
        .and_then(|s| TraceState::from_str(s).ok())
        .unwrap_or_default();
    let sc = SpanContext::new(trace_id, span_id, flags, true, state);
    sc.is_valid().then_some(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(tp: &str) -> EMessage {
        EMessage::standard("t", b"x".to_vec()).with_header(MessageHeaders::TRACEPARENT, tp)
    }

    #[test]
    fn a_valid_traceparent_reads_back_as_it_was_written() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let sc = extract(&with(tp)).expect("valid");
        assert!(sc.is_remote() && sc.is_sampled());
        assert_eq!(traceparent(&sc), tp);
    }

    #[test]
    fn malformed_or_zero_traceparents_are_ignored() {
        for tp in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-zz-00f067aa0ba902b7-01",
        ] {
            assert!(extract(&with(tp)).is_none(), "{tp:?}");
        }
    }
}
