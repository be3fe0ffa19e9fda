//! `LoggerMiddleware` opens no span of its own: it records outcome and duration into the
//! worker's one span per delivery, `event_base.handle`, captured here by a test subscriber.

use event_base::{Ack, EMessage, LoggerMiddleware};
use event_base_test::span_capture::SpanCapture;
use event_base_test::{Probe, WAIT};
use tracing_subscriber::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_logger_records_into_the_one_delivery_span() {
    let (capture, spans) = SpanCapture::new("event_base.handle");
    let (second, seconds) = SpanCapture::new("event_base.message");
    tracing_subscriber::registry()
        .with(capture)
        .with(second)
        .init();

    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(
            probe
                .handler("h", "orders", |m| {
                    if m.payload.0.as_ref() == b"bad" {
                        Ack::dead()
                    } else {
                        Ack::Ack
                    }
                })
                .middleware(LoggerMiddleware),
        )
        .build()
        .await
        .unwrap();
    let good = bus
        .send("orders", EMessage::standard("orders", b"good".to_vec()))
        .await
        .unwrap();
    let bad = bus.send("orders", b"bad".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();

    let spans = spans.lock().unwrap().clone();
    let find = |id: &str| {
        spans
            .values()
            .find(|f| f.get("id") == Some(&id.to_string()))
            .cloned()
            .unwrap_or_else(|| panic!("no span for {id}: {spans:?}"))
    };
    let g = find(&good);
    assert_eq!(g["topic"], "orders");
    assert_eq!(g["attempt"], "1");
    assert_eq!(g["outcome"], "ack");
    assert!(g["duration_us"].parse::<u64>().is_ok());
    assert_eq!(find(&bad)["outcome"], "dead");
    // One span per delivery: two deliveries, two spans, and no nested one.
    assert_eq!(spans.len(), 2, "{spans:?}");
    assert!(seconds.lock().unwrap().is_empty());
}
