//! `deliver_at` on Redis queues: a message due later waits in Redis (the subscription's
//! delayed set), not in the sending process, and is moved to the stream by whichever node
//! looks once the server's clock says it is due. So a sender that stops meanwhile loses
//! nothing, and another process delivers it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use event_base::{Ack, EMessage, EventBus, HandlerSpec, RedisQueueFactory, ShutdownStrategy};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Probe, WAIT};

async fn bus(server: &RedisServer, handler: HandlerSpec) -> EventBus {
    let queue = RedisQueueFactory::connect(&server.url()).await.unwrap();
    EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(handler)
        .build()
        .await
        .unwrap()
}

/// Counts handlings that came before the message's `deliver_at`.
fn early_counter(early: &Arc<AtomicUsize>) -> impl Fn(&EMessage) -> Ack + Send + Sync + 'static {
    let early = early.clone();
    move |m: &EMessage| {
        if m.deliver_at.is_some_and(|at| SystemTime::now() < at) {
            early.fetch_add(1, Ordering::SeqCst);
        }
        Ack::Ack
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_message_waits_in_redis_and_outlives_its_sender() {
    let server = RedisServer::start();
    let early = Arc::new(AtomicUsize::new(0));
    let first = Probe::new();
    let a = bus(
        &server,
        first.handler("work", "jobs", early_counter(&early)),
    )
    .await;
    let message = EMessage::standard("jobs", b"later".to_vec()).with_delay(Duration::from_secs(2));
    let id = a.send("jobs", message).await.unwrap();
    // The send took it for the writer; written once this answers.
    a.wal().flush().await.unwrap();
    // In Redis, not in the sender: a member of the delayed set, nothing in the stream yet.
    assert_eq!(server.command(&["ZCARD", "eb:{jobs}:d:work"]), ":1");
    assert_eq!(server.command(&["HLEN", "eb:{jobs}:dm:work"]), ":2");
    assert_eq!(server.command(&["XLEN", "eb:{jobs}:s:work"]), ":0");
    // The sender stops before it is due; its scheduler, if it had one, goes with it.
    a.shutdown(ShutdownStrategy::Force).await.unwrap();
    drop(a);
    assert_eq!(first.count(), 0);

    let second = Probe::new();
    let b = bus(
        &server,
        second.handler("work", "jobs", early_counter(&early)),
    )
    .await;
    second.wait_for(1, WAIT).await;
    assert_eq!(second.count_of(&id), 1, "delivered by the other process");
    assert_eq!(early.load(Ordering::SeqCst), 0, "not before its deliver_at");
    assert_eq!(first.count(), 0);
    b.wait_idle(WAIT).await.unwrap();
    assert_eq!(server.command(&["ZCARD", "eb:{jobs}:d:work"]), ":0");
    assert_eq!(server.command(&["HLEN", "eb:{jobs}:dm:work"]), ":0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_messages_are_delivered_in_the_order_they_fall_due() {
    let server = RedisServer::start();
    let early = Arc::new(AtomicUsize::new(0));
    let probe = Probe::new();
    let b = bus(
        &server,
        probe
            .handler("work", "jobs", early_counter(&early))
            .workers(1),
    )
    .await;
    let mut ids = Vec::new();
    for (ms, label) in [(600u64, "third"), (200, "first"), (400, "second")] {
        let m = EMessage::standard("jobs", label.as_bytes().to_vec())
            .with_delay(Duration::from_millis(ms));
        ids.push((ms, b.send("jobs", m).await.unwrap()));
    }
    // And one due now, which does not wait behind them.
    let now = b.send("jobs", b"now".to_vec()).await.unwrap();
    probe.wait_for(4, WAIT).await;
    ids.sort();
    let mut want: Vec<String> = vec![now.to_string()];
    want.extend(ids.into_iter().map(|(_, id)| id.to_string()));
    let got: Vec<String> = probe.seen().into_iter().map(|s| s.id).collect();
    assert_eq!(got, want, "in the order they fell due");
    assert_eq!(
        early.load(Ordering::SeqCst),
        0,
        "none before its deliver_at"
    );
}
