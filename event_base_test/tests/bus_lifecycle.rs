//! A bus ends when its owners are done with it: a `TopicRouter` kept after the last
//! `EventBus` went does not keep the bus (or its WAL directory) alive; `close().await` ends it
//! explicitly and releases the WAL; and a send from outside a runtime that has to wait says
//! so with a typed error instead of panicking.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use event_base::{
    Ack, CoreError, EMessage, EventBus, FlumeQueueFactory, PersistentWal, SendOptions,
};
use event_base_test::{Gate, Probe, WAIT};

/// Runs a future to completion on this thread, with no tokio runtime around it.
fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_ends_the_bus_and_releases_the_wal_while_a_router_lives_on() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Probe::new();
    let bus = EventBus::builder()
        .wal(PersistentWal::open(dir.path()).unwrap())
        .queue(FlumeQueueFactory::default())
        .handler(probe.handler("h", "jobs", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let router = bus.router();
    router.publish("jobs", "x").await.unwrap();
    let report = bus.close().await.unwrap();
    assert!(report.drained, "{report:?}");
    assert_eq!(probe.count(), 1);
    // The WAL directory is free again although `router` still exists.
    let reopened = PersistentWal::open(dir.path()).expect("the WAL was released");
    drop(reopened);
    let err = router.publish("jobs", "late").await.unwrap_err();
    assert!(
        matches!(err, CoreError::NotStarted | CoreError::SystemShutdown),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_does_not_keep_a_dropped_bus_alive() {
    let dir = tempfile::tempdir().unwrap();
    let bus = EventBus::builder()
        .wal(PersistentWal::open(dir.path()).unwrap())
        .queue(FlumeQueueFactory::default())
        .handler(Probe::new().handler("h", "jobs", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let router = bus.router();
    drop(bus);
    // Sends are refused at once; the bus's tasks end as the runtime gets to them.
    assert!(router.publish("jobs", "x").await.is_err());
    let mut reopened = None;
    for _ in 0..10_000 {
        match PersistentWal::open(dir.path()) {
            Ok(wal) => {
                reopened = Some(wal);
                break;
            }
            Err(_) => tokio::task::yield_now().await,
        }
    }
    assert!(
        reopened.is_some(),
        "the WAL directory stayed locked by a router"
    );
}

#[test]
fn a_send_that_must_wait_outside_a_runtime_is_a_typed_error() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let gate = Gate::new();
    let probe = Probe::new();
    let bus = rt.block_on(async {
        EventBus::builder()
            .wal(event_base::MemoryWal::new())
            .queue(FlumeQueueFactory::bounded(1))
            .handler(probe.gated_handler("h", "jobs", &gate, |_| Ack::Ack))
            .build()
            .await
            .unwrap()
    });
    rt.block_on(async {
        bus.send("jobs", "held").await.unwrap();
        probe.wait_for(1, WAIT).await;
        bus.send("jobs", "fills the queue").await.unwrap();
    });
    // From a thread with no runtime: a send with a timeout has to wait for room.
    let outside = bus.clone();
    let result = std::thread::spawn(move || {
        block_on(outside.send_with(
            "jobs",
            EMessage::standard("jobs", "no runtime"),
            SendOptions::new().timeout(Duration::from_millis(50)),
        ))
    })
    .join()
    .expect("no panic");
    assert!(matches!(result, Err(CoreError::NoRuntime)), "{result:?}");
    let waited = std::thread::spawn({
        let bus = bus.clone();
        move || block_on(bus.wait_idle(Duration::from_millis(10)))
    })
    .join()
    .expect("no panic");
    assert!(matches!(waited, Err(CoreError::NoRuntime)), "{waited:?}");
    gate.open();
    rt.block_on(async { bus.wait_idle(WAIT).await.unwrap() });
    assert_eq!(probe.count(), 2, "the refused send left nothing behind");
}
