//! `EventBus::cancel`: a delayed message taken back before its time is never delivered,
//! also after a restart between the cancel and its due time; its WAL record is withdrawn
//! (not a dead letter); an unknown or already delivered id answers `false`.

use std::time::{Duration, SystemTime};

use event_base::backend::Wal;
use event_base::prelude::*;
use event_base_test::{Probe, WAIT};

// A real clock: a delayed message is due at a wall-clock time, which a paused runtime clock
// does not move.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_delayed_message_is_never_delivered() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "remind", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let cancelled = bus
        .send(
            "remind",
            EMessage::standard("remind", b"no".to_vec()).with_delay(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert!(bus.cancel(&cancelled).await.unwrap());
    assert!(
        !bus.cancel(&cancelled).await.unwrap(),
        "a second cancel finds nothing to take back"
    );
    // A marker due after it: the scheduler fires in time order, so once the marker is
    // handled the cancelled message's time has passed too.
    let marker = bus
        .send(
            "remind",
            EMessage::standard("remind", b"yes".to_vec()).with_delay(Duration::from_millis(400)),
        )
        .await
        .unwrap();
    probe.wait_for(1, WAIT).await;
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&marker), 1);
    assert_eq!(
        probe.count_of(&cancelled),
        0,
        "a cancelled message was delivered"
    );
    assert!(
        bus.dead_letters().await.unwrap().is_empty(),
        "cancel is not a dead letter"
    );
    assert_eq!(bus.wal_stats().live, 0, "the cancelled record is withdrawn");
    assert_eq!(bus.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_or_delivered_id_is_not_cancelled() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "remind", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    assert!(!bus.cancel("no-such-id").await.unwrap());
    let delivered = bus
        .send(
            "remind",
            EMessage::standard("remind", b"x".to_vec()).with_delay(Duration::from_millis(100)),
        )
        .await
        .unwrap();
    probe.wait_for(1, WAIT).await;
    assert!(!bus.cancel(&delivered).await.unwrap());
    let immediate = bus.send("remind", b"now".to_vec()).await.unwrap();
    probe.wait_for(2, WAIT).await;
    assert!(
        !bus.cancel(&immediate).await.unwrap(),
        "not a delayed message"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_holds_across_a_restart_before_the_due_time() {
    let dir = tempfile::tempdir().unwrap();
    let due = SystemTime::now() + Duration::from_millis(800);
    let id = {
        let probe = Probe::new();
        let bus = EventBus::builder()
            .wal(PersistentWal::open(dir.path()).unwrap())
            .queue(FlumeQueueFactory::default())
            .handler(probe.handler("h", "remind", |_| Ack::Ack))
            .build()
            .await
            .unwrap();
        let id = bus
            .send(
                "remind",
                EMessage::standard("remind", b"no".to_vec()).with_deliver_at(due),
            )
            .await
            .unwrap();
        assert!(bus.cancel(&id).await.unwrap());
        bus.shutdown(ShutdownStrategy::Force).await.unwrap();
        assert_eq!(probe.count(), 0);
        id
    };
    let probe = Probe::new();
    let wal = PersistentWal::open(dir.path()).unwrap();
    assert!(
        !event_base_test::pending_ids(&wal)
            .await
            .iter()
            .any(|p| *p == *id),
        "the withdrawal reached the file"
    );
    let bus = EventBus::builder()
        .wal(wal)
        .queue(FlumeQueueFactory::default())
        .handler(probe.handler("h", "remind", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    // Due after the cancelled one: handled means the cancelled one's time has passed.
    let marker = bus
        .send(
            "remind",
            EMessage::standard("remind", b"yes".to_vec())
                .with_deliver_at(due + Duration::from_millis(100)),
        )
        .await
        .unwrap();
    probe.wait_for(1, WAIT).await;
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&marker), 1);
    assert_eq!(
        probe.count_of(&id),
        0,
        "replay delivered a cancelled message"
    );
    assert!(bus.wal().dead_letters().await.unwrap().is_empty());
}
