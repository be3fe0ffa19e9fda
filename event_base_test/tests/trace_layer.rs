//! `TraceLayer` turns tracing events into `TraceRecord`s on `_system.trace`, tagged with the
//! message being handled and its trace and correlation ids.

use event_base::constant::TRACE;
use event_base::{Ack, EMessage, TraceLayer, TraceRecord};
use event_base_test::{Probe, WAIT};
use tracing_subscriber::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_events_reach_the_trace_topic_with_their_message() {
    let probe = Probe::new();
    let traces = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "orders", |m| {
            let _pricing = tracing::info_span!("pricing", items = 3).entered();
            tracing::info!(order = 7, "processing order");
            tracing::debug!("below the layer's level");
            let _ = m;
            Ack::Ack
        }))
        .handler(traces.handler("traces", TRACE, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    tracing_subscriber::registry()
        .with(TraceLayer::new(&bus, tracing::Level::INFO))
        .init();

    let msg = EMessage::standard("orders", b"x".to_vec())
        .with_trace_id("t-1")
        .with_correlation_id("c-1");
    let id = bus.send("orders", msg).await.unwrap();
    // The event and the closed span may come in one batch or in two.
    let decode = |seen: Vec<event_base_test::Seen>| -> Vec<TraceRecord> {
        seen.iter()
            .flat_map(|s| {
                EMessage::standard("x", s.payload.clone())
                    .json_payload::<Vec<TraceRecord>>()
                    .unwrap()
            })
            .collect()
    };
    let mut batches = 1;
    let records = loop {
        traces.wait_for(batches, WAIT).await;
        let records = decode(traces.seen());
        if records.len() >= 2 {
            break records;
        }
        batches += 1;
    };
    bus.wait_idle(WAIT).await.unwrap();
    let r = records
        .iter()
        .find(|r| r.message.as_deref() == Some("processing order"))
        .expect("the info event");
    assert_eq!(r.level, "INFO");
    assert_eq!(r.fields.get("order").map(String::as_str), Some("7"));
    assert_eq!(r.message_id, Some(id.to_string()));
    assert_eq!(r.trace_id.as_deref(), Some("t-1"));
    assert_eq!(r.correlation_id.as_deref(), Some("c-1"));
    assert_eq!(r.span.as_deref(), Some("pricing"), "the innermost span");
    assert!(records
        .iter()
        .all(|r| r.message.as_deref() != Some("below the layer's level")));
    let span = records
        .iter()
        .find(|r| r.span_duration.is_some())
        .expect("the closed span");
    assert_eq!(span.message.as_deref(), Some("pricing"));
    assert_eq!(span.fields.get("items").map(String::as_str), Some("3"));
    assert_eq!(span.message_id, Some(id.to_string()));
}
