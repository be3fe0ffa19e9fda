//! W3C trace context across messages (feature `otel`): a send made inside a span, its
//! handler, the message that handler sends and that message's handler are one trace, each
//! `event_base.handle` span the child of the span that sent its message; in one process, and
//! across two processes sharing Redis (the headers travel in the stream entries; the other
//! process, `trace_child`, prints the spans it exported).

use event_base::prelude::*;
use event_base::RedisQueueFactory;
use event_base_test::otel_memory::{exporter, finished_spans, topic_of};
use event_base_test::{Probe, WAIT};
use opentelemetry::trace::SpanId;
use opentelemetry_sdk::trace::SpanData;
use tracing::Instrument;

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

/// The exported spans: the root called `root`, and the handling spans of `first`, `second`.
fn find(root: &str, first: &str, second: &str) -> (SpanData, SpanData, SpanData) {
    let spans = finished_spans();
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
    let spans = finished_spans();
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
async fn across_two_processes_over_redis_the_trace_continues() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    exporter();
    let server = event_base_test::redis_server::RedisServer::start();
    // The other process runs the last handler; this one runs the forwarding handler and has
    // no handler of `tc.r.mails`: its send goes through Redis to the child.
    let mut child = Command::new(env!("CARGO_BIN_EXE_trace_child"))
        .args([server.url().as_str(), "tc.r.mails", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start trace_child");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::task::spawn_blocking(move || {
        let first = lines.next();
        (first, lines)
    });
    let (first, lines) = tokio::time::timeout(WAIT, ready).await.unwrap().unwrap();
    assert_eq!(first.unwrap().unwrap(), "ready");

    let queue = RedisQueueFactory::connect(&server.url()).await.unwrap();
    let bus = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(HandlerSpec::new(
            "forward",
            "tc.r.orders",
            Forward { next: "tc.r.mails" },
        ))
        .build()
        .await
        .unwrap();
    let root = tracing::info_span!("tc.r.checkout");
    bus.send("tc.r.orders", b"order".to_vec())
        .instrument(root.clone())
        .await
        .unwrap();
    drop(root);
    // The child handles the one message, stops, and prints its spans.
    let out = tokio::time::timeout(
        WAIT,
        tokio::task::spawn_blocking(move || lines.map_while(Result::ok).collect::<Vec<_>>()),
    )
    .await
    .expect("the child handled the message and exited")
    .unwrap();
    assert!(child.wait().unwrap().success());
    bus.close().await.unwrap();

    let spans = finished_spans();
    let root = spans
        .iter()
        .find(|s| s.name == "tc.r.checkout")
        .expect("the root span");
    let forward = spans
        .iter()
        .find(|s| s.name == "event_base.handle" && topic_of(s).as_deref() == Some("tc.r.orders"))
        .expect("the forwarding handler's span");
    assert_eq!(
        forward.span_context.trace_id(),
        root.span_context.trace_id()
    );
    assert_eq!(forward.parent_span_id, root.span_context.span_id());
    let field = |line: &str, name: &str| {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")).map(str::to_owned))
    };
    let theirs: Vec<&String> = out.iter().filter(|l| l.starts_with("span ")).collect();
    assert_eq!(theirs.len(), 1, "the child's spans: {out:?}");
    let line = theirs[0];
    assert_eq!(field(line, "topic").as_deref(), Some("tc.r.mails"));
    assert_eq!(
        field(line, "trace"),
        Some(root.span_context.trace_id().to_string()),
        "the other process's handler is in the sender's trace"
    );
    assert_eq!(
        field(line, "parent"),
        Some(forward.span_context.span_id().to_string()),
        "its parent is the forwarding handler's span, in this process"
    );
}
