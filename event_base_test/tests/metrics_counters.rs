//! The metrics snapshot equals the known traffic of a test: per topic, per worker, and for
//! the node, with latency histograms that counted every delivery.

use std::time::Duration;

use event_base::{handler_fn, Ack, DeliveryMode, EMessage, HandlerSpec};
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_match_the_traffic() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("ok", "ok", |_| Ack::Ack).workers(2))
        .handler(probe.handler("flaky", "flaky", |m| {
            if m.attempts < 2 {
                Ack::retry()
            } else {
                Ack::Ack
            }
        }))
        .handler(probe.handler("bad", "bad", |_| Ack::dead()))
        .build()
        .await
        .unwrap();
    for _ in 0..50 {
        bus.send("ok", b"x".to_vec()).await.unwrap();
    }
    bus.send(
        "ok",
        EMessage::new("ok", b"b".to_vec(), DeliveryMode::Broadcast, None),
    )
    .await
    .unwrap();
    for _ in 0..5 {
        bus.send("flaky", b"x".to_vec()).await.unwrap();
    }
    for _ in 0..3 {
        bus.send("bad", b"x".to_vec()).await.unwrap();
    }
    bus.send(
        "ok",
        EMessage::standard("ok", b"later".to_vec()).with_delay(Duration::from_millis(20)),
    )
    .await
    .unwrap();
    bus.wait_idle(WAIT).await.unwrap();

    let m = bus.metrics();
    let ok = m.topic("ok").unwrap();
    assert_eq!(
        (
            ok.sent,
            ok.handled,
            ok.acked,
            ok.retried,
            ok.dead,
            ok.in_flight
        ),
        (52, 53, 53, 0, 0, 0)
    );
    assert_eq!(ok.handler_time.count, 53, "every delivery timed");
    assert_eq!(
        ok.queue_wait.count, 53,
        "every first delivery's wait recorded"
    );
    let flaky = m.topic("flaky").unwrap();
    assert_eq!(
        (
            flaky.sent,
            flaky.handled,
            flaky.acked,
            flaky.retried,
            flaky.dead
        ),
        (5, 10, 5, 5, 0)
    );
    assert_eq!(flaky.queue_wait.count, 5, "retries are not queue waits");
    let bad = m.topic("bad").unwrap();
    assert_eq!((bad.sent, bad.handled, bad.acked, bad.dead), (3, 3, 0, 3));

    let w0 = m.worker("ok-0").unwrap();
    let w1 = m.worker("ok-1").unwrap();
    assert_eq!(w0.handled + w1.handled, 53);
    assert_eq!(w0.acked + w1.acked, 53);
    assert_eq!(m.worker("flaky-0").unwrap().retried, 5);
    assert_eq!(m.worker("bad-0").unwrap().dead, 3);
    assert_eq!(m.node.in_flight, 0);
    assert_eq!(m.node.waiting_on_timers, 0);
    assert!(m.node.workers >= 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_send_is_not_counted_as_sent() {
    let probe = Probe::new();
    let gate = event_base_test::Gate::new();
    let bus = event_base::EventBus::builder()
        .wal(event_base::MemoryWal::new())
        .queue(event_base::FlumeQueueFactory::bounded(1))
        .batch_size(1)
        .handler(probe.gated_handler("slow", "slow", &gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let mut accepted = 0;
    let mut refused = 0;
    for _ in 0..50 {
        match bus
            .send_with(
                "slow",
                EMessage::standard("slow", b"x".to_vec()),
                event_base::SendOptions::new().try_send(),
            )
            .await
        {
            Ok(_) => accepted += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(refused > 0);
    let m = bus.metrics().topic("slow").unwrap();
    assert_eq!(m.sent, accepted);
    assert_eq!(m.in_flight, accepted);
    gate.open();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(bus.metrics().topic("slow").unwrap().in_flight, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_percentiles_follow_the_handler_times() {
    // 98 deliveries return at once, 2 take at least SLOW: the median is a fast one, the
    // 99th percentile (the 99th of 100) and the maximum a slow one. Percentiles report
    // their bucket's upper bound, never less than the samples in it.
    const SLOW: Duration = Duration::from_millis(200);
    let bus = event_base::builder()
        .handler(
            HandlerSpec::new(
                "timed",
                "timed",
                handler_fn(|m: EMessage| async move {
                    if m.payload.0[0] == 1 {
                        tokio::time::sleep(SLOW).await; // the work being measured
                    }
                    Ack::Ack
                }),
            )
            .workers(4),
        )
        .build()
        .await
        .unwrap();
    for i in 0..100u8 {
        let slow = u8::from(i % 50 == 49);
        bus.send("timed", vec![slow]).await.unwrap();
    }
    bus.wait_idle(WAIT).await.unwrap();
    let t = bus.metrics().topic("timed").unwrap().handler_time;
    assert_eq!(t.count, 100);
    assert!(t.p99 >= SLOW, "{t:?}");
    assert!(t.max >= SLOW, "{t:?}");
    assert!(t.p50 < SLOW / 2, "the median is a fast delivery: {t:?}");
    assert!(t.p90 < SLOW / 2, "so is the 90th percentile: {t:?}");
    assert!(t.p50 <= t.p90 && t.p90 <= t.p99 && t.p99 <= t.max, "{t:?}");
}
