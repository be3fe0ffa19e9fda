//! Dropping a public async call at any `.await` loses nothing and leaves nothing stuck:
//! a replay dropped while its queue is full keeps the dead letter, a batch dropped while it
//! waits for room is still delivered whole, a shutdown dropped half-way leaves its workers to
//! the next shutdown (which then really stops them), and concurrent shutdowns share one report.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use event_base::{
    Ack, EMessage, EventBus, FlumeQueueFactory, HandlerSpec, MemoryWal, ShutdownStrategy,
    WorkerOutcome,
};
use event_base_test::{Gate, WAIT};
use tokio::sync::Notify;

/// Polls `fut` once: it must not finish (it waits for something); then the caller drops it.
async fn poll_once<F: Future>(fut: &mut Pin<Box<F>>) {
    tokio::select! {
        biased;
        _ = fut.as_mut() => panic!("the call finished instead of waiting"),
        _ = std::future::ready(()) => {}
    }
}

/// A handler that dead-letters while `dead` is set, and otherwise waits at `gate`.
fn dead_or_gated(dead: Arc<AtomicBool>, gate: Gate, handled: Arc<AtomicUsize>) -> HandlerSpec {
    let handler = event_base::handler_fn(move |_m: EMessage| {
        let (dead, gate, handled) = (dead.clone(), gate.clone(), handled.clone());
        async move {
            if dead.load(Ordering::SeqCst) {
                return Ack::dead();
            }
            gate.wait().await;
            handled.fetch_add(1, Ordering::SeqCst);
            Ack::Ack
        }
    });
    HandlerSpec::new("jobs", "jobs", handler)
}

async fn bounded_bus(spec: HandlerSpec, bound: usize) -> EventBus {
    EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::bounded(bound))
        .handler(spec)
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_dropped_while_the_queue_is_full_keeps_the_dead_letter() {
    let (dead, gate, handled) = (
        Arc::new(AtomicBool::new(true)),
        Gate::new(),
        Arc::new(AtomicUsize::new(0)),
    );
    let bus = bounded_bus(
        dead_or_gated(dead.clone(), gate.clone(), handled.clone()),
        1,
    )
    .await;
    let id = bus.send("jobs", "to die").await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(bus.dead_letters().await.unwrap().len(), 1);

    // Now the worker blocks on the gate and the queue (bound 1) fills behind it.
    dead.store(false, Ordering::SeqCst);
    bus.send("jobs", "held by the worker").await.unwrap();
    bus.send("jobs", "fills the queue").await.unwrap();
    let in_flight = bus.in_flight();

    let mut replay = Box::pin(bus.replay_dead_letter(&id));
    poll_once(&mut replay).await;
    drop(replay);
    assert_eq!(
        bus.dead_letters().await.unwrap().len(),
        1,
        "the dead letter is still there"
    );
    assert_eq!(bus.in_flight(), in_flight, "nothing was left in flight");

    gate.open();
    bus.wait_idle(WAIT).await.unwrap();
    bus.replay_dead_letter(&id).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert!(bus.dead_letters().await.unwrap().is_empty());
    assert_eq!(
        handled.load(Ordering::SeqCst),
        3,
        "two sends and the replay"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_dropped_while_waiting_for_room_is_still_delivered_whole() {
    let (dead, gate, handled) = (
        Arc::new(AtomicBool::new(false)),
        Gate::new(),
        Arc::new(AtomicUsize::new(0)),
    );
    let bus = bounded_bus(dead_or_gated(dead, gate.clone(), handled.clone()), 4).await;
    let batch: Vec<EMessage> = (0..100u8)
        .map(|i| EMessage::standard("jobs", vec![i]))
        .collect();
    let mut send = Box::pin(bus.send_batch("jobs", batch));
    poll_once(&mut send).await;
    drop(send);
    gate.open();
    // All 100 were committed to the WAL as one batch before the drop: all are delivered.
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(handled.load(Ordering::SeqCst), 100);
    assert_eq!(bus.wal_stats().live, 0);
}

/// Sets its flag when dropped: a handler future holding one was cancelled or finished.
struct DropFlag(Arc<AtomicBool>, Arc<Notify>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
        self.1.notify_waiters();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_dropped_half_way_leaves_its_workers_to_the_next_one() {
    let dropped = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Notify::new());
    let (flag, start) = (dropped.clone(), started.clone());
    let stuck = event_base::handler_fn(move |_m: EMessage| {
        let guard = DropFlag(flag.clone(), Arc::new(Notify::new()));
        let start = start.clone();
        async move {
            let _guard = guard;
            start.notify_one();
            std::future::pending::<Ack>().await
        }
    });
    let bus = bounded_bus(HandlerSpec::new("jobs", "jobs", stuck), 16).await;
    bus.send("jobs", "x").await.unwrap();
    started.notified().await;

    let mut first = Box::pin(bus.shutdown(ShutdownStrategy::TwoStage {
        poll_interval: Duration::from_secs(1),
        force_timeout: Duration::from_secs(3600),
    }));
    poll_once(&mut first).await; // asked the worker to stop, and waits for it
    drop(first);

    let report = bus.shutdown(ShutdownStrategy::Force).await.unwrap();
    assert_eq!(
        report.worker("jobs-0").map(|w| w.outcome),
        Some(WorkerOutcome::Forced)
    );
    assert!(
        dropped.load(Ordering::SeqCst),
        "the handler was cancelled before shutdown returned, as the report says"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_shutdowns_share_the_first_ones_report() {
    let ok = event_base::handler_fn(|_m: EMessage| async { Ack::Ack });
    let bus = bounded_bus(HandlerSpec::new("jobs", "jobs", ok), 16).await;
    for i in 0..10u8 {
        bus.send("jobs", vec![i]).await.unwrap();
    }
    let (a, b) = tokio::join!(
        bus.shutdown(ShutdownStrategy::Drain {
            timeout: Duration::from_secs(5)
        }),
        bus.shutdown(ShutdownStrategy::Force)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.strategy, "drain");
    assert_eq!(a, b, "the second caller waited for the first one's report");
    assert!(a.drained);
    // A later call answers at once with the same report.
    let again = bus.shutdown(ShutdownStrategy::Force).await.unwrap();
    assert_eq!(again, a);
}
