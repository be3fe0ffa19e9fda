//! Idempotent sends: a send whose id the bus still holds (pending, processing, a dead
//! letter) or completed within the dedup window is answered `Ok` with that id and not
//! delivered again.

use std::sync::Arc;
use std::time::Duration;

use event_base::{Ack, EMessage, EventBus, HandlerSpec};
use event_base_test::{Gate, Probe, WAIT};

fn order(id: &str) -> EMessage {
    EMessage::standard("orders", b"o".to_vec()).with_id(id)
}

async fn bus_with(spec: HandlerSpec, window: Option<Duration>) -> EventBus {
    let mut builder = event_base::builder().handler(spec);
    if let Some(w) = window {
        builder = builder.dedup_window(w);
    }
    builder.build().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_send_of_a_pending_id_is_answered_but_not_delivered() {
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = bus_with(
        probe.gated_handler("h", "orders", &gate, |_| Ack::Ack),
        None,
    )
    .await;
    let first = bus.send("orders", order("order-42")).await.unwrap();
    probe.wait_for(1, WAIT).await; // processing, held at the gate
    let again = bus.send("orders", order("order-42")).await.unwrap();
    assert_eq!(first, again, "answered with the same id");
    gate.open();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of("order-42"), 1);
    let m = bus.metrics().topic("orders").unwrap();
    assert_eq!((m.sent, m.duplicates), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_id_is_a_duplicate_within_the_window_and_new_after_it() {
    let probe = Probe::new();
    let window = Duration::from_millis(300);
    let bus = bus_with(probe.handler("h", "orders", |_| Ack::Ack), Some(window)).await;
    bus.send("orders", order("a")).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        bus.wal_stats().live,
        0,
        "completed: the WAL no longer holds it"
    );
    bus.send("orders", order("a")).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        probe.count_of("a"),
        1,
        "inside the window: not delivered again"
    );
    // The window is a span of time: wait it out (a wait for time itself, not for an event).
    // An id is kept for at least the window and at most one and a half windows.
    tokio::time::sleep(window * 3 / 2 + Duration::from_millis(100)).await;
    bus.send("orders", order("a")).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        probe.count_of("a"),
        2,
        "after the window the id is new again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_window_turns_deduplication_off() {
    let probe = Probe::new();
    let bus = bus_with(
        probe.handler("h", "orders", |_| Ack::Ack),
        Some(Duration::ZERO),
    )
    .await;
    for _ in 0..2 {
        bus.send("orders", order("same")).await.unwrap();
        bus.wait_idle(WAIT).await.unwrap();
    }
    assert_eq!(probe.count_of("same"), 2);
    assert_eq!(bus.metrics().topic("orders").unwrap().duplicates, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_id_is_a_duplicate_until_purged() {
    let probe = Probe::new();
    let bus = bus_with(probe.handler("h", "orders", |_| Ack::dead()), None).await;
    bus.send("orders", order("bad")).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(bus.dead_letters().await.unwrap().len(), 1);
    bus.send("orders", order("bad")).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of("bad"), 1, "the dead letter holds the id");
    assert_eq!(bus.purge_dead_letters().await.unwrap(), 1);
    bus.send("orders", order("bad")).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of("bad"), 2, "purged: the id is free again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_of_one_id_deliver_it_once() {
    let probe = Probe::new();
    let bus = Arc::new(bus_with(probe.handler("h", "orders", |_| Ack::Ack).workers(4), None).await);
    for round in 0..20 {
        let id = format!("race-{round}");
        let sends: Vec<_> = (0..8)
            .map(|_| {
                let (bus, id) = (bus.clone(), id.clone());
                tokio::spawn(async move { bus.send("orders", order(&id)).await })
            })
            .collect();
        for s in sends {
            assert_eq!(s.await.unwrap().unwrap().as_str(), id);
        }
    }
    bus.wait_idle(WAIT).await.unwrap();
    for round in 0..20 {
        assert_eq!(probe.count_of(&format!("race-{round}")), 1, "round {round}");
    }
    let m = bus.metrics().topic("orders").unwrap();
    assert_eq!((m.sent, m.duplicates), (20, 20 * 7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_drops_its_duplicates_and_returns_every_id() {
    let probe = Probe::new();
    let bus = bus_with(probe.handler("h", "orders", |_| Ack::Ack), None).await;
    bus.send("orders", order("done")).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let batch = vec![
        order("done"),
        order("new-1"),
        order("new-1"),
        order("new-2"),
    ];
    let ids = bus.send_batch("orders", batch).await.unwrap();
    let ids: Vec<&str> = ids.iter().map(|i| i.as_str()).collect();
    assert_eq!(ids, ["done", "new-1", "new-1", "new-2"]);
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of("done"), 1);
    assert_eq!(probe.count_of("new-1"), 1);
    assert_eq!(probe.count_of("new-2"), 1);
    assert_eq!(bus.metrics().topic("orders").unwrap().duplicates, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_on_a_topic_with_two_handlers_reaches_neither_again() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("billing", "orders", |_| Ack::Ack))
        .handler(probe.handler("notify", "orders", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    for _ in 0..3 {
        bus.send("orders", order("o-1")).await.unwrap();
        bus.wait_idle(WAIT).await.unwrap();
    }
    assert_eq!(probe.count_of("o-1"), 2, "one copy per handler, once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_survives_a_restart_with_the_file_wal() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Probe::new();
    let start = || async {
        event_base::builder()
            .wal(event_base::PersistentWal::open(dir.path()).unwrap())
            .handler(probe.handler("h", "orders", |_| Ack::Ack))
            .build()
            .await
            .unwrap()
    };
    {
        let bus = start().await;
        bus.send("orders", order("before-restart")).await.unwrap();
        bus.wait_idle(WAIT).await.unwrap();
        bus.shutdown(event_base::ShutdownStrategy::Drain { timeout: WAIT })
            .await
            .unwrap();
    }
    let bus = start().await;
    bus.send("orders", order("before-restart")).await.unwrap();
    bus.send("orders", order("after-restart")).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        probe.count_of("before-restart"),
        1,
        "completed before the restart: still a duplicate"
    );
    assert_eq!(probe.count_of("after-restart"), 1);
    assert_eq!(bus.metrics().topic("orders").unwrap().duplicates, 1);
}

/// Sends `first`, then enough traffic that its segment is compacted away, and restarts:
/// whether `first` is still a duplicate depends on the completion retention.
async fn after_compaction_and_restart(retention: Duration) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let probe = Probe::new();
    let open = || {
        event_base::PersistentWal::builder(dir.path())
            .segment_bytes(4096)
            .completion_retention(retention)
            .open()
            .unwrap()
    };
    {
        let bus = event_base::builder()
            .wal(open())
            .handler(probe.handler("h", "orders", |_| Ack::Ack))
            .build()
            .await
            .unwrap();
        bus.send("orders", order("first")).await.unwrap();
        bus.wait_idle(WAIT).await.unwrap();
        for i in 0..400 {
            let filler = EMessage::standard("orders", vec![0u8; 64]).with_id(format!("f-{i}"));
            bus.send("orders", filler).await.unwrap();
        }
        bus.wait_idle(WAIT).await.unwrap();
        bus.shutdown(event_base::ShutdownStrategy::Drain { timeout: WAIT })
            .await
            .unwrap();
    }
    let first_segment = dir.path().join("00000000000000000001.wal");
    assert!(
        !first_segment.exists(),
        "the first segment was compacted away"
    );
    let bus = event_base::builder()
        .wal(open())
        .handler(probe.handler("h", "orders", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    bus.send("orders", order("first")).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    probe.count_of("first")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_outlive_compaction_of_their_segment() {
    assert_eq!(
        after_compaction_and_restart(Duration::from_secs(120)).await,
        1,
        "kept in the completion log: still a duplicate"
    );
    assert_eq!(
        after_compaction_and_restart(Duration::ZERO).await,
        2,
        "with no retention the completion went with its segment"
    );
}

// Messages with the id `EMessage::new` minted: the first send of such an id skips the window's
// lookup (nothing can have been sent under it); every later send of it, however it is made,
// is checked in full.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minted_message_sent_again_as_a_clone_is_a_duplicate() {
    let probe = Probe::new();
    let bus = bus_with(probe.handler("h", "orders", |_| Ack::Ack), None).await;
    let message = EMessage::standard("orders", b"o".to_vec());
    let id = message.id.clone();
    bus.send("orders", message.clone()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        bus.wal_stats().live,
        0,
        "completed: only the window holds it"
    );
    assert_eq!(bus.send("orders", message.clone()).await.unwrap(), id);
    bus.send("orders", message).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&id), 1, "delivered once");
    assert_eq!(bus.metrics().topic("orders").unwrap().duplicates, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minted_id_first_sent_from_another_thread_is_a_duplicate_here() {
    let probe = Probe::new();
    let bus = Arc::new(bus_with(probe.handler("h", "orders", |_| Ack::Ack), None).await);
    let handle = tokio::runtime::Handle::current();
    for round in 0..2 {
        // Minted on this thread, first sent from a thread of its own, then sent here: or
        // minted there and sent there first.
        let message = if round == 0 {
            EMessage::standard("orders", b"o".to_vec())
        } else {
            std::thread::spawn(|| EMessage::standard("orders", b"o".to_vec()))
                .join()
                .unwrap()
        };
        let id = message.id.clone();
        let (there, copy, h) = (bus.clone(), message.clone(), handle.clone());
        std::thread::spawn(move || h.block_on(there.send("orders", copy)))
            .join()
            .unwrap()
            .unwrap();
        bus.wait_idle(WAIT).await.unwrap();
        bus.send("orders", message).await.unwrap();
        bus.wait_idle(WAIT).await.unwrap();
        assert_eq!(probe.count_of(&id), 1, "round {round}: delivered once");
    }
    assert_eq!(bus.metrics().topic("orders").unwrap().duplicates, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minted_id_set_by_hand_on_another_message_is_a_duplicate() {
    let probe = Probe::new();
    let bus = bus_with(probe.handler("h", "orders", |_| Ack::Ack), None).await;
    // The copy by hand goes first, the minted message second; then the other way round.
    let minted = EMessage::standard("orders", b"minted".to_vec());
    let by_hand = EMessage::standard("orders", b"by hand".to_vec()).with_id(&minted.id);
    bus.send("orders", by_hand).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    bus.send("orders", minted.clone()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&minted.id), 1);
    let minted = EMessage::standard("orders", b"minted".to_vec());
    let mut by_hand = EMessage::standard("orders", b"by hand".to_vec());
    by_hand.id = minted.id.clone();
    bus.send("orders", minted.clone()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    bus.send("orders", by_hand).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&minted.id), 1);
    assert_eq!(bus.metrics().topic("orders").unwrap().duplicates, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minted_message_an_outbox_released_is_a_duplicate_when_sent_again() {
    let probe = Probe::new();
    let sent: Arc<std::sync::Mutex<Option<EMessage>>> = Arc::default();
    let keep = sent.clone();
    let bus = event_base::builder()
        .handler(
            HandlerSpec::new(
                "bill",
                "orders",
                event_base::handler_fn(move |_msg: EMessage| {
                    let keep = keep.clone();
                    async move {
                        let mail = EMessage::standard("mail", b"m".to_vec());
                        *keep.lock().unwrap() = Some(mail.clone());
                        event_base::send_msg!("mail", mail)
                            .await
                            .expect("a held send answers Ok");
                        Ack::Ack
                    }
                }),
            )
            .outbox(true),
        )
        .handler(probe.handler("mail", "mail", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    bus.send("orders", b"o".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let mail = sent.lock().unwrap().take().expect("the handler sent one");
    assert_eq!(probe.count_of(&mail.id), 1, "released with the ack");
    bus.send("mail", mail.clone()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&mail.id), 1, "sent before, by the outbox");
    assert_eq!(bus.metrics().topic("mail").unwrap().duplicates, 1);
}
