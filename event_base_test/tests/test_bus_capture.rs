//! `TestBus::capture(topic)` replaces the topic's own handlers: a handler given by value or
//! registered with `#[handler]` for a captured topic is not started, and every message sent
//! to the topic is kept for `captured(topic)`, whichever order the builder calls come in.

use std::sync::Mutex;

use event_base::prelude::*;
use event_base::testing::TestBus;
use event_base_test::Probe;

/// Ids the registered `ledger` handler saw (tests here run in parallel: each looks for its
/// own ids only).
static LEDGER_SAW: Mutex<Vec<String>> = Mutex::new(Vec::new());

#[handler(topic = "ledger")]
async fn ledger(msg: &EMessage) -> Ack {
    LEDGER_SAW.lock().unwrap().push(msg.id.clone());
    Ack::Ack
}

/// The handler under test: books every payment on the ledger.
#[handler(topic = "payments")]
async fn book_payment(msg: &EMessage) -> Ack {
    match send_msg!(
        "ledger",
        EMessage::standard("ledger", msg.payload.0.clone())
    )
    .await
    {
        Ok(_) => Ack::Ack,
        Err(_) => Ack::dead(),
    }
}

fn ledger_saw(id: &str) -> bool {
    LEDGER_SAW.lock().unwrap().iter().any(|seen| seen == id)
}

#[tokio::test]
async fn a_captured_topics_registered_handler_does_not_run() {
    let t = TestBus::builder()
        .capture("ledger")
        .with_registered_handlers()
        .start()
        .await
        .unwrap();
    assert_eq!(t.bus().workers("ledger"), vec!["capture:ledger-0"]);
    assert_eq!(t.bus().workers("payments"), vec!["book_payment-0"]);

    let mut payments = Vec::new();
    for i in 0..10 {
        payments.push(t.publish("payments", vec![i]).await.unwrap());
    }
    let direct = t.publish("ledger", b"direct".to_vec()).await.unwrap();
    t.settle().await.unwrap();

    let booked = t.captured("ledger");
    assert_eq!(booked.len(), 11, "every message to `ledger` is captured");
    for id in &payments {
        assert!(t.acked(id));
        assert!(booked
            .iter()
            .any(|m| m.metadata.causation_id.as_deref() == Some(id.as_str())));
    }
    assert!(booked.iter().any(|m| m.id == direct));
    assert!(
        booked.iter().all(|m| !ledger_saw(&m.id)),
        "the real `ledger` handler ran beside the capture"
    );
    t.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_topics_handler_given_by_value_does_not_run() {
    let probe = Probe::new();
    let t = TestBus::builder()
        .handler(probe.handler("notify", "notify", |_| Ack::Ack))
        .handler(probe.handler("audit", "audit", |_| Ack::Ack))
        .capture("notify")
        .start()
        .await
        .unwrap();
    assert_eq!(t.bus().workers("notify"), vec!["capture:notify-0"]);
    let mut sent = Vec::new();
    for i in 0..10 {
        sent.push(t.publish("notify", vec![i]).await.unwrap());
    }
    let audited = t.publish("audit", b"kept".to_vec()).await.unwrap();
    t.settle().await.unwrap();

    let captured: Vec<String> = t.captured("notify").into_iter().map(|m| m.id).collect();
    assert_eq!(captured, sent, "captured in arrival order");
    assert_eq!(probe.count(), 1, "only `audit` ran: {:?}", probe.seen());
    assert_eq!(probe.seen()[0].id, audited);
    t.stop().await.unwrap();
}

#[tokio::test]
async fn a_topic_that_is_not_captured_keeps_its_handler() {
    let t = TestBus::builder()
        .with_registered_handlers()
        .capture("elsewhere")
        .start()
        .await
        .unwrap();
    assert_eq!(t.bus().workers("ledger"), vec!["ledger-0"]);
    let id = t.publish("ledger", b"real".to_vec()).await.unwrap();
    t.settle().await.unwrap();
    assert!(ledger_saw(&id));
    assert!(t.captured("ledger").is_empty());
    t.stop().await.unwrap();
}
