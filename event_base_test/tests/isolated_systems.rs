//! Systems built with `EventBus::builder()` in one process do not see each other's messages.

use event_base::Ack;
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_systems_with_the_same_topic_stay_apart() {
    let (pa, pb) = (Probe::new(), Probe::new());
    let a = event_base::builder()
        .handler(pa.handler("h", "orders", |_| Ack::Ack).workers(2))
        .build()
        .await
        .unwrap();
    let b = event_base::builder()
        .handler(pb.handler("h", "orders", |_| Ack::Ack).workers(2))
        .build()
        .await
        .unwrap();
    for _ in 0..30 {
        a.send("orders", b"a".to_vec()).await.unwrap();
    }
    for _ in 0..12 {
        b.send("orders", b"b".to_vec()).await.unwrap();
    }
    a.wait_idle(WAIT).await.unwrap();
    b.wait_idle(WAIT).await.unwrap();
    assert_eq!(pa.count(), 30);
    assert_eq!(pb.count(), 12);
    assert!(pa.seen().iter().all(|s| s.payload == b"a"));
    assert!(pb.seen().iter().all(|s| s.payload == b"b"));
    assert!(
        !event_base::EventBus::global_is_running(),
        "builder systems are not global"
    );
}
