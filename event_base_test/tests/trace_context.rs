//! W3C trace context across messages (feature `otel`): a send made inside a span, its
//! handler, the message that handler sends and that message's handler are one trace, each
//! `event_base.handle` span the child of the span that sent its message; in one process, and
//! across two buses sharing Redis (the headers travel in the stream entries).

use std::sync::OnceLock;

use event_base::prelude::*;
use event_base::RedisQueueFactory;
use event_base_test::{Probe, WAIT};
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// One exporter for the whole test binary (the subscriber is global: workers run on the
/// runtime's threads). Each test tells its spans apart by its own topic names.
fn exporter() -> &'static (InMemorySpanExporter, SdkTracerProvider) {
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

/// Sends one message to `next` from inside its delivery, then acks.
struct Forward {
    next: &'static str,
}

#[async_trait]
impl EHandler for Forward {
    async fn handler(&self, _msg: &EMessage) -> Ack {
        TopicRouter::global()
            .send(
                self.next,
                EMessage::standard(self.next, b"next".to_vec()),
                None,
                None,
            )
            .await
            .expect("the handler's send is accepted");
        Ack::Ack
    }
}

fn topic_of(span: &SpanData) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == "topic")
        .map(|kv| match &kv.value {
            Value::String(s) => s.as_str().to_owned(),
            other => other.to_string(),
        })
}

/// The exported spans: the root called `root`, and the handling spans of `first`, `second`.
fn find(root: &str, first: &str, second: &str) -> (SpanData, SpanData, SpanData) {
    let (exporter, provider) = exporter();
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let named = |name: &str| spans.iter().find(|s| s.name == name).cloned();
    let handling = |topic: &str| {
        spans
            .iter()
            .find(|s| s.name == "event_base.handle" && topic_of(s).as_deref() == Some(topic))
            .cloned()
    };
    (
        named(root).unwrap_or_else(|| panic!("no span {root}")),
        handling(first).unwrap_or_else(|| panic!("no handling span of {first}")),
        handling(second).unwrap_or_else(|| panic!("no handling span of {second}")),
    )
}

fn assert_one_trace(root: &SpanData, first: &SpanData, second: &SpanData) {
    let trace = root.span_context.trace_id();
    assert_eq!(
        first.span_context.trace_id(),
        trace,
        "the first handler is in the sender's trace"
    );
    assert_eq!(
        second.span_context.trace_id(),
        trace,
        "and so is the second"
    );
    assert_eq!(
        first.parent_span_id,
        root.span_context.span_id(),
        "first's parent is the send's span"
    );
    assert_eq!(
        second.parent_span_id,
        first.span_context.span_id(),
        "second's parent is first's handling"
    );
    assert_ne!(root.parent_span_id, first.span_context.span_id());
    assert_ne!(second.parent_span_id, SpanId::INVALID);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_its_handler_and_the_handlers_send_are_one_trace() {
    exporter();
    let probe = Probe::new();
    let bus = EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::default())
        .handler(HandlerSpec::new(
            "forward",
            "tc.orders",
            Forward { next: "tc.mails" },
        ))
        .handler(probe.handler("mail", "tc.mails", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let root = tracing::info_span!("tc.checkout");
    bus.send("tc.orders", b"order".to_vec())
        .instrument(root.clone())
        .await
        .unwrap();
    drop(root);
    probe.wait_for(1, WAIT).await;
    bus.wait_idle(WAIT).await.unwrap();
    bus.close().await.unwrap();
    let (root, first, second) = find("tc.checkout", "tc.orders", "tc.mails");
    assert_one_trace(&root, &first, &second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_carries_its_own_traceparent_keeps_it() {
    exporter();
    let probe = Probe::new();
    let bus = EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::default())
        .handler(probe.handler("h", "tc.given", |m| {
            assert_eq!(
                m.headers.get(MessageHeaders::TRACEPARENT),
                Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            );
            Ack::Ack
        }))
        .build()
        .await
        .unwrap();
    let msg = EMessage::standard("tc.given", b"x".to_vec()).with_header(
        MessageHeaders::TRACEPARENT,
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    );
    bus.send("tc.given", msg)
        .instrument(tracing::info_span!("tc.other"))
        .await
        .unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    bus.close().await.unwrap();
    let (exporter, provider) = exporter();
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let handling = spans
        .iter()
        .find(|s| s.name == "event_base.handle" && topic_of(s).as_deref() == Some("tc.given"))
        .expect("its handling span");
    assert_eq!(
        handling.span_context.trace_id().to_string(),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    assert_eq!(handling.parent_span_id.to_string(), "00f067aa0ba902b7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_two_buses_over_redis_the_trace_continues() {
    exporter();
    let server = event_base_test::redis_server::RedisServer::start();
    let probe = Probe::new();
    // The second bus runs the last handler; the first runs the forwarding one and has no
    // handler of `tc.r.mails`: its send goes through Redis to the second.
    let q2 = RedisQueueFactory::connect(&server.url()).await.unwrap();
    let second = EventBus::builder()
        .wal(q2.wal())
        .queue(q2)
        .handler(probe.handler("mail", "tc.r.mails", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let q1 = RedisQueueFactory::connect(&server.url()).await.unwrap();
    let first = EventBus::builder()
        .wal(q1.wal())
        .queue(q1)
        .handler(HandlerSpec::new(
            "forward",
            "tc.r.orders",
            Forward { next: "tc.r.mails" },
        ))
        .build()
        .await
        .unwrap();
    let root = tracing::info_span!("tc.r.checkout");
    first
        .send("tc.r.orders", b"order".to_vec())
        .instrument(root.clone())
        .await
        .unwrap();
    drop(root);
    probe.wait_for(1, WAIT).await;
    first.close().await.unwrap();
    second.close().await.unwrap();
    let (root, a, b) = find("tc.r.checkout", "tc.r.orders", "tc.r.mails");
    assert_one_trace(&root, &a, &b);
}
