//! Every handler on a topic is a subscription: it receives every message sent to the topic,
//! and the delivery mode applies within each handler. The WAL record completes once every
//! handler's copy has; retries and dead letters are per handler, and a dead letter names the
//! handler whose copy died.

use std::time::Duration;

use event_base::{Ack, DeadReason, DeliveryMode, EMessage, EventBus, HandlerSpec, PersistentWal};
use event_base_test::{Gate, Probe, Seen, WAIT};

/// How many times the handler `label` saw message `id`.
fn times(seen: &[Seen], label: &str, id: &str) -> usize {
    seen.iter()
        .filter(|s| s.label == label && s.id == id)
        .count()
}

async fn two_handlers(billing: HandlerSpec, notify: HandlerSpec) -> EventBus {
    event_base::builder()
        .handler(billing)
        .handler(notify)
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_gives_each_handler_one_copy_handled_by_one_of_its_workers() {
    let probe = Probe::new();
    let bus = two_handlers(
        probe.handler("billing", "orders", |_| Ack::Ack).workers(3),
        probe.handler("notify", "orders", |_| Ack::Ack),
    )
    .await;
    let mut ids = Vec::new();
    for i in 0..4u8 {
        ids.push(bus.send("orders", vec![i]).await.unwrap());
    }
    bus.wait_idle(WAIT).await.unwrap();
    let seen = probe.seen();
    for id in &ids {
        assert_eq!(times(&seen, "billing", id), 1, "billing handles {id} once");
        assert_eq!(times(&seen, "notify", id), 1, "notify handles {id} once");
    }
    assert_eq!(bus.wal_stats().live, 0, "every record completed");
    let m = bus.metrics();
    let topic = m.topic("orders").unwrap();
    assert_eq!(topic.sent, 4, "the topic counts messages, not copies");
    assert_eq!(topic.in_flight, 0);
    assert_eq!(topic.handled, 8, "deliveries are summed over the handlers");
    for handler in ["billing", "notify"] {
        let h = m.handler(handler).unwrap();
        assert_eq!((h.sent, h.handled, h.acked), (4, 4, 4), "{handler}");
        assert_eq!(h.in_flight, 0, "{handler}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_reaches_every_worker_of_every_handler() {
    let probe = Probe::new();
    let bus = two_handlers(
        probe.handler("billing", "orders", |_| Ack::Ack).workers(2),
        probe.handler("notify", "orders", |_| Ack::Ack).workers(3),
    )
    .await;
    let msg = EMessage::new("orders", b"b".to_vec(), DeliveryMode::Broadcast, None);
    let id = bus.send("orders", msg).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let seen = probe.seen();
    assert_eq!(times(&seen, "billing", &id), 2, "both billing workers");
    assert_eq!(times(&seen, "notify", &id), 3, "all three notify workers");
    assert_eq!(bus.wal_stats().live, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_n_is_n_handlings_per_handler() {
    let probe = Probe::new();
    let bus = two_handlers(
        probe.handler("billing", "orders", |_| Ack::Ack).workers(2),
        probe.handler("notify", "orders", |_| Ack::Ack),
    )
    .await;
    let msg = EMessage::new("orders", b"r".to_vec(), DeliveryMode::Repeated(3), None);
    let id = bus.send("orders", msg).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let seen = probe.seen();
    assert_eq!(times(&seen, "billing", &id), 3);
    assert_eq!(times(&seen, "notify", &id), 3);
    assert_eq!(bus.wal_stats().live, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn to_worker_reaches_that_worker_only_not_the_other_handlers() {
    let probe = Probe::new();
    let bus = two_handlers(
        probe.handler("billing", "orders", |_| Ack::Ack).workers(2),
        probe.handler("notify", "orders", |_| Ack::Ack).workers(2),
    )
    .await;
    let notify_worker = bus
        .workers("orders")
        .into_iter()
        .find(|w| w.starts_with("notify"))
        .unwrap();
    let msg = EMessage::new(
        "orders",
        b"w".to_vec(),
        DeliveryMode::Standard,
        Some(notify_worker.clone()),
    );
    let id = bus.send("orders", msg).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let seen = probe.seen();
    assert_eq!(times(&seen, "notify", &id), 1);
    assert_eq!(
        times(&seen, "billing", &id),
        0,
        "addressed to a notify worker"
    );
    assert_eq!(bus.wal_stats().live, 0);
    let worker = bus.metrics().worker(&notify_worker).unwrap();
    assert_eq!(worker.handled, 1, "that very worker handled it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_completes_only_when_the_slowest_handler_is_done() {
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = two_handlers(
        probe.handler("billing", "orders", |_| Ack::Ack),
        probe.gated_handler("notify", "orders", &gate, |_| Ack::Ack),
    )
    .await;
    let id = bus.send("orders", b"slow".to_vec()).await.unwrap();
    // Both have it (notify waits at its gate); billing has acked.
    probe.wait_for(2, WAIT).await;
    let billing = bus.metrics().handler("billing").unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut billing_acked = billing.acked;
    while billing_acked == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "billing never acked"
        );
        tokio::task::yield_now().await;
        billing_acked = bus.metrics().handler("billing").unwrap().acked;
    }
    assert_eq!(bus.wal_stats().live, 1, "notify still has its copy");
    assert!(
        bus.wait_idle(Duration::from_millis(50)).await.is_err(),
        "not idle while a handler's copy is out"
    );
    gate.open();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(bus.wal_stats().live, 0);
    assert_eq!(probe.finished().iter().filter(|f| **f == id).count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_and_dead_letters_are_per_handler_and_replay_goes_to_that_handler() {
    let probe = Probe::new();
    let bus = two_handlers(
        probe.handler("billing", "orders", |_| Ack::Ack),
        probe.handler("notify", "orders", |m| {
            if m.payload.0.as_ref() == b"fixed" {
                Ack::Ack
            } else {
                Ack::NoAck {
                    retry_after: None,
                    max_retries: 1,
                }
            }
        }),
    )
    .await;
    let id = bus.send("orders", b"bad".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let seen = probe.seen();
    assert_eq!(times(&seen, "billing", &id), 1, "billing acked at once");
    assert_eq!(
        times(&seen, "notify", &id),
        2,
        "notify: first delivery + 1 retry"
    );

    let dead = bus.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, id);
    assert_eq!(dead[0].reason, DeadReason::MaxRetriesExceeded);
    assert_eq!(dead[0].handlers, vec!["notify".to_owned()]);
    let m = bus.metrics();
    assert_eq!(m.handler("notify").unwrap().retried, 1);
    assert_eq!(m.handler("notify").unwrap().dead, 1);
    assert_eq!(m.handler("billing").unwrap().retried, 0);
    assert_eq!(m.handler("billing").unwrap().dead, 0);

    // Replayed, it goes to notify alone: billing already has it handled.
    bus.replay_dead_letter(&id).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let seen = probe.seen();
    assert_eq!(
        times(&seen, "billing", &id),
        1,
        "billing is not asked again"
    );
    assert_eq!(
        times(&seen, "notify", &id),
        4,
        "notify has it again (and fails again)"
    );
    let dead = bus.dead_letters().await.unwrap();
    assert_eq!(dead[0].handlers, vec!["notify".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_names_every_handler_whose_copy_died() {
    let probe = Probe::new();
    let dead = || Ack::Dead {
        dead_reason: DeadReason::Explicit,
    };
    let bus = event_base::builder()
        .handler(probe.handler("billing", "orders", move |_| dead()))
        .handler(probe.handler("audit", "orders", |_| Ack::Ack))
        .handler(probe.handler("notify", "orders", move |_| dead()))
        .build()
        .await
        .unwrap();
    let id = bus.send("orders", b"x".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let letters = bus.dead_letters().await.unwrap();
    assert_eq!(letters.len(), 1, "one message, one dead letter");
    let mut handlers = letters[0].handlers.clone();
    handlers.sort();
    assert_eq!(handlers, vec!["billing".to_owned(), "notify".to_owned()]);
    assert_eq!(bus.metrics().topic("orders").unwrap().dead, 2);
    assert_eq!(times(&probe.seen(), "audit", &id), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_dead_letter_keeps_its_handler_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Probe::new();
    let id = {
        let bus = event_base::builder()
            .wal(PersistentWal::open(dir.path()).unwrap())
            .handler(probe.handler("billing", "orders", |_| Ack::Ack))
            .handler(probe.handler("notify", "orders", |_| Ack::Dead {
                dead_reason: DeadReason::Other("no address".into()),
            }))
            .build()
            .await
            .unwrap();
        let id = bus.send("orders", b"p".to_vec()).await.unwrap();
        bus.wait_idle(WAIT).await.unwrap();
        bus.shutdown(event_base::ShutdownStrategy::Force)
            .await
            .unwrap();
        id
    };
    let wal = PersistentWal::open(dir.path()).unwrap();
    let bus = event_base::builder()
        .wal(wal)
        .handler(probe.handler("billing2", "orders", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let dead = bus.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, id);
    assert_eq!(dead[0].handlers, vec!["notify".to_owned()]);
    assert_eq!(dead[0].reason, DeadReason::Other("no address".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_send_refused_by_one_full_handler_queue_is_withdrawn_from_all_handlers() {
    let probe = Probe::new();
    let (billing_gate, notify_gate) = (Gate::new(), Gate::new());
    let bus = event_base::builder()
        .queue(event_base::FlumeQueueFactory::bounded(2))
        .handler(probe.gated_handler("billing", "orders", &billing_gate, |_| Ack::Ack))
        .handler(probe.gated_handler("notify", "orders", &notify_gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    // Each handler's only worker takes m1 and waits at its gate.
    let m1 = bus.send("orders", b"1".to_vec()).await.unwrap();
    probe.wait_for(2, WAIT).await;
    // m2 waits in both queues; one more, addressed to notify's worker, fills notify's queue.
    let m2 = bus.send("orders", b"2".to_vec()).await.unwrap();
    let to_notify = EMessage::standard("orders", b"n".to_vec()).with_to_worker("notify-0");
    let n = bus.send("orders", to_notify).await.unwrap();
    // billing's queue has room for m3, notify's has none: the send is refused whole.
    let m3 = EMessage::standard("orders", b"3".to_vec());
    let m3_id = m3.id.clone();
    let refused = bus
        .send_with("orders", m3, event_base::SendOptions::new().try_send())
        .await;
    assert!(
        matches!(refused, Err(event_base::CoreError::QueueFull { .. })),
        "{refused:?}"
    );
    billing_gate.open();
    notify_gate.open();
    bus.wait_idle(WAIT).await.unwrap();
    let seen = probe.seen();
    for id in [&m1, &m2] {
        assert_eq!(times(&seen, "billing", id), 1);
        assert_eq!(times(&seen, "notify", id), 1);
    }
    assert_eq!(times(&seen, "notify", &n), 1);
    assert_eq!(times(&seen, "billing", &n), 0);
    assert_eq!(
        times(&seen, "billing", &m3_id),
        0,
        "billing's queued copy of the refused message is never handled"
    );
    assert_eq!(times(&seen, "notify", &m3_id), 0);
    assert_eq!(bus.wal_stats().live, 0);
    let topic = bus.metrics().topic("orders").unwrap();
    assert_eq!((topic.sent, topic.refused, topic.in_flight), (3, 1, 0));
}

/// Many messages at once through a topic log's state words (three handlers of two workers
/// each; one retries a tenth of its copies once, one dead-letters a fiftieth): every record
/// ends once, complete or a dead letter naming exactly the handler that failed it, and the
/// WAL holds nothing live afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_fanned_out_messages_each_end_once_with_their_own_failures() {
    const N: u8 = 200;
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("billing", "orders", |_| Ack::Ack).workers(2))
        .handler(
            probe
                .handler("notify", "orders", |m| {
                    if m.payload.0[0] % 10 == 0 && m.attempts == 1 {
                        Ack::NoAck {
                            retry_after: None,
                            max_retries: 3,
                        }
                    } else {
                        Ack::Ack
                    }
                })
                .workers(2),
        )
        .handler(
            probe
                .handler("audit", "orders", |m| {
                    if m.payload.0[0] % 50 == 0 {
                        Ack::Dead {
                            dead_reason: DeadReason::Explicit,
                        }
                    } else {
                        Ack::Ack
                    }
                })
                .workers(2),
        )
        .build()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..N {
        ids.push(bus.send("orders", vec![i]).await.unwrap().to_string());
    }
    bus.wait_idle(WAIT).await.unwrap();
    let seen = probe.seen();
    for (i, id) in ids.iter().enumerate() {
        let retried = i % 10 == 0;
        assert_eq!(times(&seen, "billing", id), 1, "billing once: {id}");
        assert_eq!(
            times(&seen, "notify", id),
            1 + usize::from(retried),
            "notify: {id}"
        );
        assert_eq!(times(&seen, "audit", id), 1, "audit once: {id}");
    }
    let dead = bus.dead_letters().await.unwrap();
    let mut dead_ids: Vec<&str> = dead.iter().map(|d| d.message.id.as_str()).collect();
    dead_ids.sort_unstable();
    let mut want: Vec<&str> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 50 == 0)
        .map(|(_, id)| id.as_str())
        .collect();
    want.sort_unstable();
    assert_eq!(
        dead_ids, want,
        "a dead letter for each message audit failed, once"
    );
    assert!(
        dead.iter().all(|d| d.handlers == ["audit"]),
        "each names audit alone: {:?}",
        dead.iter().map(|d| &d.handlers).collect::<Vec<_>>()
    );
    let stats = bus.wal().stats();
    assert_eq!(stats.live, 0, "nothing left live: {stats:?}");
    assert_eq!(
        stats.completed,
        u64::from(N) - want.len() as u64,
        "every other message completed once: {stats:?}"
    );
}
