//! With a subscriber that wants it, every delivery runs inside an `event_base.handle` span
//! carrying the message's id, topic and attempt. (Without one, the worker skips wrapping the
//! handler in the span; that path is what every other test runs.)

use std::sync::{Arc, Mutex};

use event_base::{Ack, EMessage};
use event_base_test::span_capture::SpanCapture;
use event_base_test::{Probe, WAIT};
use tracing_subscriber::prelude::*;

/// Message id, and the id of the span the handler ran in.
type Seen = Arc<Mutex<Vec<(String, Option<u64>)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_delivery_runs_in_its_span() {
    let (capture, spans) = SpanCapture::new("event_base.handle");
    tracing_subscriber::registry().with(capture).init();

    // The handler notes the span it runs in, by message id.
    let seen: Seen = Arc::default();
    let probe = Probe::new();
    let noted = seen.clone();
    let bus = event_base::builder()
        .handler(probe.handler("h", "orders", move |m| {
            let current = tracing::Span::current().id().map(|id| id.into_u64());
            noted.lock().unwrap().push((m.id.to_string(), current));
            Ack::Ack
        }))
        .build()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..5u8 {
        ids.push(
            bus.send("orders", EMessage::standard("orders", vec![i]))
                .await
                .unwrap()
                .to_string(),
        );
    }
    bus.wait_idle(WAIT).await.unwrap();

    let spans = spans.lock().unwrap().clone();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 5);
    for (id, span) in seen {
        assert!(ids.contains(&id));
        let span = span.expect("the handler runs inside a span");
        let fields = spans
            .get(&span)
            .expect("the handler's span is an event_base.handle span");
        assert_eq!(fields.get("id"), Some(&id));
        assert_eq!(fields.get("topic").map(String::as_str), Some("orders"));
        assert_eq!(fields.get("attempt").map(String::as_str), Some("1"));
    }
}
