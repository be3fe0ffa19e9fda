//! Retries and dead letters on Redis queues: a `NoAck` is retried (with a delay through the
//! subscription's delayed set, without one in the process; every entry acked once), a
//! message past its retries or answered `Dead` becomes a dead letter in the topic's
//! dead-letter stream, and the bus lists, replays and purges them there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use event_base::{Ack, DeadReason, EMessage, EventBus, RedisQueueFactory};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_then_dead_letters_listed_replayed_and_purged_in_redis() {
    let server = RedisServer::start();
    let probe = Probe::new();
    let fixed = Arc::new(AtomicBool::new(false));
    let handler = {
        let fixed = fixed.clone();
        probe.handler("work", "t", move |m: &EMessage| match &m.payload.0[..] {
            b"flaky" if m.attempts < 3 => Ack::NoAck {
                retry_after: Some(Duration::from_millis(20)),
                max_retries: 5,
            },
            b"doomed" if !fixed.load(Ordering::SeqCst) => Ack::NoAck {
                retry_after: None,
                max_retries: 1,
            },
            b"poison" => Ack::Dead {
                dead_reason: DeadReason::Other("bad input".into()),
            },
            _ => Ack::Ack,
        })
    };
    let queue = RedisQueueFactory::connect(&server.url()).await.unwrap();
    let bus = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(handler)
        .build()
        .await
        .unwrap();
    let flaky = bus.send("t", b"flaky".to_vec()).await.unwrap();
    let doomed = bus.send("t", b"doomed".to_vec()).await.unwrap();
    let poison = bus.send("t", b"poison".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();

    let attempts = |id: &str| -> Vec<u32> {
        probe
            .seen()
            .iter()
            .filter(|s| s.id == id)
            .map(|s| s.attempts)
            .collect()
    };
    assert_eq!(attempts(&flaky), vec![1, 2, 3], "retried until it acked");
    assert_eq!(attempts(&doomed), vec![1, 2], "1 + max_retries deliveries");
    assert_eq!(attempts(&poison), vec![1], "Dead is at once");

    // The dead letters are in Redis, in the topic's dead-letter stream.
    let mut dead = bus.dead_letters().await.unwrap();
    dead.sort_by(|a, b| a.message.id.cmp(&b.message.id));
    let mut want = vec![
        (doomed.to_string(), DeadReason::MaxRetriesExceeded),
        (poison.to_string(), DeadReason::Other("bad input".into())),
    ];
    want.sort_by(|a, b| a.0.cmp(&b.0));
    let got: Vec<(String, DeadReason)> = dead
        .iter()
        .map(|d| (d.message.id.clone(), d.reason.clone()))
        .collect();
    assert_eq!(got, want);
    assert!(dead.iter().all(|d| d.handlers == vec!["work".to_owned()]));
    assert_eq!(server.command(&["XLEN", "eb:{t}:dlq"]), ":2");
    // Every entry settled once its copy ended: retried ones too, dead ones too.
    assert_eq!(server.command(&["XLEN", "eb:{t}:s:work"]), ":0");

    // Replayed (the handler is fixed now): delivered again from the first attempt, and
    // gone from the dead letters.
    fixed.store(true, Ordering::SeqCst);
    bus.replay_dead_letter(&doomed).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(attempts(&doomed), vec![1, 2, 1]);
    let left: Vec<String> = bus
        .dead_letters()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.message.id)
        .collect();
    assert_eq!(left, vec![poison.to_string()]);

    assert_eq!(bus.purge_dead_letters().await.unwrap(), 1);
    assert!(bus.dead_letters().await.unwrap().is_empty());
    assert_eq!(server.command(&["XLEN", "eb:{t}:dlq"]), ":0");
}
