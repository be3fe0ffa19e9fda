//! OpenTelemetry spans exported to memory, through `tracing-opentelemetry`'s layer installed
//! as the global `tracing` subscriber: for the trace-context test and its child process.

use std::sync::OnceLock;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The process's exporter and provider, installed on first use (the subscriber is global:
/// workers run on the runtime's threads).
pub fn exporter() -> &'static (InMemorySpanExporter, SdkTracerProvider) {
    static SETUP: OnceLock<(InMemorySpanExporter, SdkTracerProvider)> = OnceLock::new();
    SETUP.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let tracer = provider.tracer("event_base_test");
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(tracer))
            .init();
        (exporter, provider)
    })
}

/// Every span finished so far.
pub fn finished_spans() -> Vec<SpanData> {
    let (exporter, provider) = exporter();
    provider
        .force_flush()
        .expect("flush the in-memory exporter");
    exporter
        .get_finished_spans()
        .expect("read the in-memory exporter")
}

/// The `topic` attribute of a span (the `event_base.handle` spans have one).
pub fn topic_of(span: &SpanData) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == "topic")
        .map(|kv| match &kv.value {
            Value::String(s) => s.as_str().to_owned(),
            other => other.to_string(),
        })
}
