//! Trace and correlation ids flow from a message to the messages its handler sends, and the
//! follow-up's `causation_id` names the message that caused it.

use std::sync::{Arc, Mutex, OnceLock};

use event_base::{handler_fn, Ack, EMessage, HandlerSpec, TopicRouter};
use event_base_test::WAIT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_follow_a_chain_of_events() {
    let router: Arc<OnceLock<TopicRouter>> = Arc::new(OnceLock::new());
    let seen: Arc<Mutex<Vec<EMessage>>> = Arc::default();

    let r = router.clone();
    let s = seen.clone();
    let orders = handler_fn(move |msg: EMessage| {
        let r = r.clone();
        let s = s.clone();
        async move {
            assert_eq!(
                event_base::current_message().map(|m| m.id.clone()),
                Some(msg.id.clone())
            );
            s.lock().unwrap().push(msg.clone());
            // A follow-up without ids of its own, and one that sets its own correlation id.
            let follow = EMessage::standard("billing", b"invoice".to_vec());
            r.get()
                .unwrap()
                .send("billing", follow, None, None)
                .await
                .unwrap();
            let own = EMessage::standard("billing", b"audit".to_vec()).with_correlation_id("own");
            r.get()
                .unwrap()
                .send("billing", own, None, None)
                .await
                .unwrap();
            Ack::Ack
        }
    });
    let s = seen.clone();
    let billing = handler_fn(move |msg: EMessage| {
        let s = s.clone();
        async move {
            s.lock().unwrap().push(msg);
            Ack::Ack
        }
    });
    let bus = event_base::builder()
        .handler(HandlerSpec::new("orders", "orders", orders))
        .handler(HandlerSpec::new("billing", "billing", billing))
        .build()
        .await
        .unwrap();
    router.set(bus.router()).unwrap();

    let first = EMessage::standard("orders", b"o-1".to_vec())
        .with_trace_id("trace-7")
        .with_correlation_id("req-42");
    let first_id = bus.send("orders", first).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();

    let handled = seen;
    let seen = handled.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    let invoice = seen
        .iter()
        .find(|m| m.payload.0.as_ref() == b"invoice")
        .unwrap();
    assert_eq!(invoice.metadata.trace_id.as_deref(), Some("trace-7"));
    assert_eq!(invoice.metadata.correlation_id.as_deref(), Some("req-42"));
    assert_eq!(invoice.metadata.causation_id, Some(first_id.to_string()));
    let audit = seen
        .iter()
        .find(|m| m.payload.0.as_ref() == b"audit")
        .unwrap();
    assert_eq!(
        audit.metadata.correlation_id.as_deref(),
        Some("own"),
        "an explicit id is kept"
    );
    assert_eq!(audit.metadata.trace_id.as_deref(), Some("trace-7"));
    assert_eq!(audit.metadata.causation_id, Some(first_id.to_string()));
    // Outside a handler nothing is inherited: not from the message handled last, nor on
    // the thread that handled it.
    assert!(event_base::current_message().is_none());
    let plain = bus.send("billing", b"plain".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let seen = handled.lock().unwrap().clone();
    let plain = seen
        .iter()
        .find(|m| m.id == plain.as_str())
        .expect("the plain message was handled");
    assert_eq!(plain.metadata.trace_id, None);
    assert_eq!(plain.metadata.correlation_id, None);
    assert_eq!(plain.metadata.causation_id, None);
}
