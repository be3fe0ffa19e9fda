//! A worker stuck on a message past the stale limit is declared dead; its message is handled
//! by another worker, and a replacement worker takes its place.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use event_base::{async_trait, Ack, EHandler, EMessage, HandlerSpec, WorkerStatus};
use event_base_test::WAIT;
use tokio::sync::Notify;

/// The first delivery hangs forever; later ones succeed.
struct HangsOnce {
    hung: AtomicBool,
    handled: Notify,
}

#[async_trait]
impl EHandler for HangsOnce {
    async fn handler(&self, _msg: &EMessage) -> Ack {
        if !self.hung.swap(true, Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.handled.notify_one();
        Ack::Ack
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_workers_message_is_delivered_again() {
    let handler = Arc::new(HangsOnce {
        hung: AtomicBool::new(false),
        handled: Notify::new(),
    });
    let bus = event_base::builder()
        .heartbeat(Duration::from_millis(20), Duration::from_millis(100))
        .handler(HandlerSpec::new("job", "job", handler.clone()).workers(2))
        .build()
        .await
        .unwrap();
    let id = bus.send("job", b"x".to_vec()).await.unwrap();
    tokio::time::timeout(WAIT, handler.handled.notified())
        .await
        .expect("redelivered and handled");
    bus.wait_idle(WAIT).await.unwrap();

    let workers = bus.registry().list();
    let dead: Vec<_> = workers
        .iter()
        .filter(|w| w.status == WorkerStatus::Dead)
        .collect();
    assert_eq!(dead.len(), 1, "{workers:?}");
    assert_eq!(
        bus.workers("job").len(),
        2,
        "a replacement keeps the worker count"
    );
    assert!(bus.workers("job").contains(&"job-2".to_owned()));
    assert!(bus.dead_letters().await.unwrap().is_empty());
    let m = bus.metrics().topic("job").unwrap();
    assert_eq!((m.acked, m.dead), (1, 0));
    let _ = id;
}
