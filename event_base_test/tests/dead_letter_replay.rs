//! Dead letters can be replayed (delivered again with attempts reset) and purged.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use event_base::Ack;
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_a_dead_letter_delivers_it_again_and_purge_removes_the_rest() {
    let probe = Probe::new();
    let healthy = Arc::new(AtomicBool::new(false));
    let h = healthy.clone();
    let bus = event_base::builder()
        .handler(probe.handler("h", "t", move |_| {
            if h.load(Ordering::Acquire) {
                Ack::Ack
            } else {
                Ack::dead()
            }
        }))
        .build()
        .await
        .unwrap();
    let a = bus.send("t", b"a".to_vec()).await.unwrap();
    let b = bus.send("t", b"b".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(bus.dead_letters().await.unwrap().len(), 2);

    healthy.store(true, Ordering::Release);
    bus.replay_dead_letter(&a).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&a), 2);
    let replayed = probe.seen().into_iter().rfind(|s| s.id == a).unwrap();
    assert_eq!(replayed.attempts, 1, "attempts reset on replay");
    let left = bus.dead_letters().await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].message.id, b);

    assert_eq!(bus.purge_dead_letters().await.unwrap(), 1);
    assert!(bus.dead_letters().await.unwrap().is_empty());
    assert!(
        bus.replay_dead_letter(&b).await.is_err(),
        "a purged letter cannot be replayed"
    );
    assert_eq!(probe.count_of(&b), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_dead_letter_can_be_deleted_without_replaying_it() {
    let probe = event_base_test::Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "jobs", |_| event_base::Ack::dead()))
        .build()
        .await
        .unwrap();
    let keep = bus.send("jobs", "keep").await.unwrap();
    let gone = bus.send("jobs", "delete").await.unwrap();
    bus.wait_idle(event_base_test::WAIT).await.unwrap();
    let deleted = bus.delete_dead_letter(&gone).await.unwrap();
    assert_eq!(deleted.message.id, gone);
    let left = bus.dead_letters().await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].message.id, keep);
    let err = bus.delete_dead_letter(&gone).await.unwrap_err();
    assert!(matches!(err, event_base::CoreError::NotFound(_)), "{err}");
    assert_eq!(probe.count(), 2, "nothing was delivered again");
}
