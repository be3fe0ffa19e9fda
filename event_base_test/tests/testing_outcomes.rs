//! `TestBus` answers about typed handlers and the outbox: `outcome` and `failures` give a
//! typed handler's `Err` text and a `Json<T>` decode failure's reason per delivery;
//! `released` and `sent_by` give what a handler run sent, and show that a failed run of an
//! outbox handler released nothing.

use std::time::Duration;

use event_base::prelude::*;
use event_base::testing::{Failure, TestBus};
use event_base::{AuditOutcome, Backoff};

#[derive(Debug, serde::Deserialize)]
struct Order {
    qty: u32,
}

/// `Err` for an order of nothing (retried once, then dead), dead at once for bad JSON.
#[handler(topic = "orders", retries = 1)]
async fn place(Json(order): Json<Order>) -> Result<(), String> {
    if order.qty == 0 {
        return Err(format!("qty {} is not an order", order.qty));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_handlers_outcome_and_failures_carry_its_text() {
    let t = TestBus::builder()
        .with_registered_handlers()
        .start()
        .await
        .unwrap();
    let good = t.publish("orders", br#"{"qty":3}"#.to_vec()).await.unwrap();
    let zero = t.publish("orders", br#"{"qty":0}"#.to_vec()).await.unwrap();
    let bad = t.publish("orders", b"three".to_vec()).await.unwrap();
    t.settle().await.unwrap();

    assert_eq!(t.outcome(&good), Some(AuditOutcome::Acked));
    assert!(t.failures(&good).is_empty());

    let text = "qty 0 is not an order".to_owned();
    assert_eq!(
        t.outcome(&zero),
        Some(AuditOutcome::Dead {
            reason: DeadReason::Other(text.clone())
        })
    );
    let failures = t.failures(&zero);
    let seen: Vec<(u32, Option<&str>, bool)> = failures
        .iter()
        .map(|f: &Failure| (f.attempt, f.reason.as_deref(), f.dead))
        .collect();
    assert_eq!(
        seen,
        [
            (1, Some(text.as_str()), false),
            (2, Some(text.as_str()), true)
        ]
    );

    let failures = t.failures(&bad);
    assert_eq!(failures.len(), 1, "bad input is not retried: {failures:?}");
    let reason = failures[0].reason.clone().unwrap_or_default();
    assert!(failures[0].dead);
    assert!(
        reason.starts_with("could not decode the payload as") && reason.contains("Order"),
        "{reason}"
    );
    assert!(
        matches!(t.outcome(&bad), Some(AuditOutcome::Dead { reason: DeadReason::Other(r) }) if r == reason)
    );
    assert_eq!(t.outcome("no-such-id"), None);
    t.stop().await.unwrap();
}

/// Sends two receipts naming the attempt, then answers by the payload: "ok" acks, "flaky"
/// panics on the first delivery, "never" is always refused, "late" times out once.
fn biller(outbox: bool) -> HandlerSpec {
    HandlerSpec::new(
        "bill",
        "bills",
        event_base::handler_fn(|msg: EMessage| async move {
            for n in 0..2 {
                let receipt = format!("{n}@{}", msg.attempts);
                if send_msg!("receipts", receipt.into_bytes()).await.is_err() {
                    return Ack::retry();
                }
            }
            match (&msg.payload.0[..], msg.attempts) {
                (b"flaky", 1) => panic!("first delivery"),
                (b"late", 1) => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ack::Ack
                }
                (b"never", _) => Ack::dead(),
                _ => Ack::Ack,
            }
        }),
    )
    .outbox(outbox)
    .retries(2)
    .timeout(Duration::from_millis(200))
    .backoff(Backoff::fixed(Duration::from_millis(1)))
}

fn payloads(messages: &[EMessage]) -> Vec<String> {
    messages
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload.0).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_is_what_the_acking_run_sent_and_nothing_of_failed_runs() {
    let t = TestBus::builder()
        .handler(biller(true))
        .capture("receipts")
        .start()
        .await
        .unwrap();
    let ok = t.publish("bills", b"ok".to_vec()).await.unwrap();
    let flaky = t.publish("bills", b"flaky".to_vec()).await.unwrap();
    let late = t.publish("bills", b"late".to_vec()).await.unwrap();
    let never = t.publish("bills", b"never".to_vec()).await.unwrap();
    t.settle().await.unwrap();

    assert_eq!(payloads(&t.released(&ok)), ["0@1", "1@1"]);
    // The panicking and the timed-out first runs released nothing; the second runs did.
    assert_eq!(payloads(&t.released(&flaky)), ["0@2", "1@2"]);
    assert_eq!(payloads(&t.released(&late)), ["0@2", "1@2"]);
    assert!(t.released(&never).is_empty(), "a dead run releases nothing");
    for id in [&ok, &flaky, &late, &never] {
        assert_eq!(
            t.sent_by(id),
            t.released(id),
            "{id}: only released sends went out"
        );
    }
    let released = t.released(&ok);
    assert!(released
        .iter()
        .all(|m| m.metadata.causation_id.as_deref() == Some(ok.as_ref())));
    assert_eq!(t.captured("receipts").len(), 6);
    t.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_outbox_every_run_sends_and_nothing_is_released() {
    let t = TestBus::builder()
        .handler(biller(false))
        .capture("receipts")
        .start()
        .await
        .unwrap();
    let flaky = t.publish("bills", b"flaky".to_vec()).await.unwrap();
    t.settle().await.unwrap();
    assert!(t.released(&flaky).is_empty());
    assert_eq!(payloads(&t.sent_by(&flaky)), ["0@1", "1@1", "0@2", "1@2"]);
    assert!(t.failures(&flaky)[0]
        .reason
        .as_deref()
        .is_some_and(|r| r.starts_with("panic: first delivery")));
    t.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_handlers_messages_each_have_an_outcome() {
    let spec = HandlerSpec::batch(
        "store",
        "points",
        event_base::batch_fn(|batch: Vec<EMessage>| async move {
            batch
                .iter()
                .map(|m| {
                    if m.payload.0.is_empty() {
                        Ack::dead()
                    } else {
                        Ack::Ack
                    }
                })
                .collect::<Vec<_>>()
        }),
        10,
        Duration::from_millis(5),
    );
    let t = TestBus::builder().handler(spec).start().await.unwrap();
    let ids = t
        .bus()
        .send_batch(
            "points",
            vec![
                EMessage::standard("points", b"1".to_vec()),
                EMessage::standard("points", Vec::<u8>::new()),
            ],
        )
        .await
        .unwrap();
    t.settle().await.unwrap();
    assert_eq!(t.outcome(&ids[0]), Some(AuditOutcome::Acked));
    assert_eq!(
        t.outcome(&ids[1]),
        Some(AuditOutcome::Dead {
            reason: DeadReason::Explicit
        })
    );
    t.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_publish_shows_as_one_delivery() {
    let t = TestBus::builder()
        .handler(biller(true))
        .capture("receipts")
        .start()
        .await
        .unwrap();
    let first = t
        .publish(
            "bills",
            EMessage::standard("bills", b"ok".to_vec()).with_id("bill-7"),
        )
        .await
        .unwrap();
    t.settle().await.unwrap();
    let again = t
        .publish(
            "bills",
            EMessage::standard("bills", b"ok".to_vec()).with_id("bill-7"),
        )
        .await
        .unwrap();
    t.settle().await.unwrap();
    assert_eq!((&*first, &*again), ("bill-7", "bill-7"));
    assert_eq!(t.outcome("bill-7"), Some(AuditOutcome::Acked));
    assert_eq!(
        t.history("bill-7").len(),
        2,
        "one start, one finish: delivered once"
    );
    assert_eq!(t.released("bill-7").len(), 2, "its receipts released once");
    t.stop().await.unwrap();
}
