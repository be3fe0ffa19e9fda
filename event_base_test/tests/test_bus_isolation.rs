//! `TestBus` isolation: every `TestBus` is a bus of its own, so the tests of this file run in
//! parallel (plain `cargo test` threads, no `--test-threads=1`), one of them panics before it
//! stops its bus, and the others still pass. A handler's `send_msg!` and
//! `TopicRouter::global()` reach the bus that runs the handler, with or without a global bus
//! installed; outside a handler they still mean the global bus. A dropped `TestBus` (a
//! panicking test drops it too) refuses sends and cancels its workers.
//!
//! Run many times to see it is not flaky:
//! `for i in $(seq 20); do cargo test -p event_base_test --test test_bus_isolation || break; done`

use event_base::prelude::*;
use event_base::testing::TestBus;
use event_base_test::{Gate, Probe, WAIT};
use tokio::sync::mpsc;

/// Starts a `TestBus` with one handler, `orders`, on topic `orders` (the same name and topic
/// in every test here), sends `n` messages and checks that this bus, and only it, handled
/// exactly those.
async fn run_own_orders(n: u64) {
    let probe = Probe::new();
    let t = TestBus::builder()
        .handler(probe.handler("orders", "orders", |_| Ack::Ack))
        .start()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            t.publish("orders", i.to_string().into_bytes())
                .await
                .unwrap(),
        );
    }
    t.settle().await.unwrap();
    let orders = t.bus().metrics().topic("orders").unwrap();
    assert_eq!(
        orders.acked, n,
        "this bus acked what this test sent, no more"
    );
    assert_eq!(probe.count() as u64, n);
    assert!(ids.iter().all(|id| t.acked(id) && probe.count_of(id) == 1));
    let report = t.stop().await.unwrap();
    assert!(report.drained);
}

#[tokio::test]
async fn a_bus_of_three_messages() {
    run_own_orders(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_of_five_messages() {
    run_own_orders(5).await;
}

#[tokio::test]
async fn a_bus_of_seven_messages() {
    run_own_orders(7).await;
}

/// Panics with a message in flight (its handler held by a gate) and the bus never stopped.
/// Its bus goes with the test: the other tests of this file, running beside it, pass.
#[tokio::test]
#[should_panic(expected = "on purpose")]
async fn a_test_that_panics_before_stop_breaks_no_other_test() {
    let probe = Probe::new();
    let gate = Gate::new();
    let t = TestBus::builder()
        .handler(probe.gated_handler("orders", "orders", &gate, |_| Ack::Ack))
        .start()
        .await
        .unwrap();
    t.publish("orders", b"held".to_vec()).await.unwrap();
    probe.wait_for(1, WAIT).await;
    assert_eq!(t.bus().in_flight(), 1);
    panic!("on purpose, before t.stop()");
}

/// The order handler of the next tests: bills with `send_msg!` and notes with
/// `TopicRouter::global()`, the two ways application code reaches "the bus".
async fn bill_and_note(msg: EMessage) -> Ack {
    let bill = EMessage::standard("billing", msg.payload.0.clone());
    if send_msg!("billing", bill).await.is_err() {
        return Ack::dead();
    }
    let note = EMessage::standard("notes", msg.payload.0.clone());
    match TopicRouter::global().send("notes", note, None, None).await {
        Ok(_) => Ack::Ack,
        Err(_) => Ack::dead(),
    }
}

/// A `TestBus` running `bill_and_note` on `orders`, capturing `billing` and `notes`.
async fn billing_test_bus() -> TestBus {
    TestBus::builder()
        .handler(HandlerSpec::new(
            "orders",
            "orders",
            event_base::handler_fn(bill_and_note),
        ))
        .capture("billing")
        .capture("notes")
        .start()
        .await
        .unwrap()
}

/// One order through `t`: its handler's two sends arrive in `t`'s captured topics, caused by
/// the order, and the order is acked (a send that failed would have dead-lettered it).
async fn order_reaches_its_own_bus(t: &TestBus, payload: &[u8]) {
    let order = t.publish("orders", payload.to_vec()).await.unwrap();
    t.settle().await.unwrap();
    assert!(t.acked(&order), "history: {:?}", t.history(&order));
    assert!(t.dead_letters().await.unwrap().is_empty());
    for topic in ["billing", "notes"] {
        let sent: Vec<EMessage> = t
            .captured(topic)
            .into_iter()
            .filter(|m| m.metadata.causation_id.as_deref() == Some(&*order))
            .collect();
        assert_eq!(sent.len(), 1, "{topic}: {:?}", t.captured(topic));
        assert_eq!(sent[0].payload.0.as_ref(), payload);
    }
}

/// The only test of this file that installs a global bus; the others never look at it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handlers_send_msg_reaches_the_test_bus_that_runs_it() {
    // No global bus: the handler's sends still land in its TestBus.
    assert!(EventBus::global().is_none());
    let t = billing_test_bus().await;
    assert!(
        EventBus::global().is_none(),
        "a TestBus is not installed as the global bus"
    );
    order_reaches_its_own_bus(&t, b"first").await;
    // Outside a handler, `send_msg!` means the global bus, and there is none.
    assert!(matches!(
        send_msg!("billing", b"x".to_vec()).await,
        Err(CoreError::NotStarted)
    ));

    // A global bus with handlers of its own on the same topics: the TestBus's handler still
    // sends into the TestBus, not into it.
    let global_probe = Probe::new();
    let global = event_base::builder()
        .handler(global_probe.handler("g_billing", "billing", |_| Ack::Ack))
        .handler(global_probe.handler("g_notes", "notes", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    global.install_global().unwrap();
    order_reaches_its_own_bus(&t, b"second").await;
    assert_eq!(t.captured("billing").len(), 2);
    assert_eq!(global_probe.count(), 0, "{:?}", global_probe.seen());

    // Outside a handler, `send_msg!` and `TopicRouter::global()` reach the global bus.
    let to_global = send_msg!("billing", b"from the test".to_vec())
        .await
        .unwrap();
    global_probe.wait_for(1, WAIT).await;
    assert_eq!(global_probe.seen()[0].id, to_global);
    assert_eq!(t.captured("billing").len(), 2);

    global.shutdown(ShutdownStrategy::Force).await.unwrap();
    assert!(EventBus::global().is_none());
    t.stop().await.unwrap();
}

/// Many `TestBus`es in one test, each handler reaching its own.
#[tokio::test]
async fn side_by_side_test_buses_keep_their_handlers_sends_apart() {
    let a = billing_test_bus().await;
    let b = billing_test_bus().await;
    order_reaches_its_own_bus(&a, b"for a").await;
    order_reaches_its_own_bus(&b, b"for b").await;
    order_reaches_its_own_bus(&a, b"for a again").await;
    assert_eq!(a.captured("billing").len(), 2);
    assert_eq!(b.captured("billing").len(), 1);
}

/// Sends on `tx` when dropped: the handler future holding it was dropped (cancelled).
struct SignalOnDrop(mpsc::UnboundedSender<()>);

impl Drop for SignalOnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// A handler that never finishes and says when its future is dropped.
fn hanging_handler(dropped: mpsc::UnboundedSender<()>, started: Gate) -> HandlerSpec {
    HandlerSpec::new(
        "hangs",
        "hangs",
        event_base::handler_fn(move |_m: EMessage| {
            let guard = SignalOnDrop(dropped.clone());
            let started = started.clone();
            async move {
                let _guard = guard;
                started.open();
                std::future::pending::<Ack>().await
            }
        }),
    )
}

#[tokio::test]
async fn dropping_a_test_bus_ends_it() {
    let (dropped_tx, mut dropped) = mpsc::unbounded_channel();
    let started = Gate::new();
    let t = TestBus::builder()
        .handler(hanging_handler(dropped_tx, started.clone()))
        .start()
        .await
        .unwrap();
    let router = t.bus().router();
    router.publish("hangs", b"x".to_vec()).await.unwrap();
    started.wait().await;
    drop(t);
    assert!(matches!(
        router.publish("hangs", b"y".to_vec()).await,
        Err(CoreError::SystemShutdown)
    ));
    tokio::time::timeout(WAIT, dropped.recv())
        .await
        .expect("the running handler is cancelled when its TestBus is dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_before_stop_ends_the_test_bus() {
    let (dropped_tx, mut dropped) = mpsc::unbounded_channel();
    let started = Gate::new();
    let (router_tx, router_rx) = tokio::sync::oneshot::channel();
    let test = tokio::spawn(async move {
        let t = TestBus::builder()
            .handler(hanging_handler(dropped_tx, started.clone()))
            .start()
            .await
            .unwrap();
        t.publish("hangs", b"x".to_vec()).await.unwrap();
        started.wait().await;
        let _ = router_tx.send(t.bus().router());
        panic!("a failing assertion, before t.stop()");
    });
    let outcome = test.await;
    assert!(outcome.is_err_and(|e| e.is_panic()));
    let router = router_rx.await.unwrap();
    assert!(matches!(
        router.publish("hangs", b"y".to_vec()).await,
        Err(CoreError::SystemShutdown)
    ));
    tokio::time::timeout(WAIT, dropped.recv())
        .await
        .expect("the panicking test's handler is cancelled with its TestBus");
}
