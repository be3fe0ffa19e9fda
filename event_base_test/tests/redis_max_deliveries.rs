//! `max_deliveries`: an entry taken over again and again (every consumer that claimed it died
//! or stopped before settling it) is dead-lettered, with a reason saying so, instead of being
//! delivered once more.
//!
//! The consumers that "die" are simulated: each claims through the queue contract and is
//! dropped without settling, so nothing renews its lease, as when its process is killed.

use std::sync::Arc;
use std::time::Duration;

use event_base::backend::{Claimed, QueueFactory, TopicQueue, Wal};
use event_base::{Ack, DeadReason, EMessage, EventBus, MessageTopic, RedisQueueFactory};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Probe, WAIT};

/// A consumer of subscription `work` of topic `jobs` (a new consumer name each time).
fn consumer(factory: &RedisQueueFactory) -> TopicQueue {
    factory
        .create_subscription(&MessageTopic::from("jobs"), "work")
        .unwrap()
}

/// Delivers the entry of `message` `n` times in all: a first claim, then `n - 1` takeovers,
/// each by a new consumer, the previous one gone. Returns the first consumer (kept alive, to
/// try its late ack) and its claim.
async fn deliver(
    factory: &RedisQueueFactory,
    message: &Arc<EMessage>,
    n: usize,
) -> (TopicQueue, Vec<Claimed>) {
    let first = consumer(factory);
    first.producer.send(message.clone()).await.unwrap();
    let mut claimed = Vec::new();
    first.consumer.claim_batch(10, &mut claimed).await.unwrap();
    assert_eq!(claimed.len(), 1);
    for _ in 1..n {
        let next = consumer(factory);
        let mut out = Vec::new();
        let got = next
            .consumer
            .claim_stale(Duration::ZERO, 10, &mut out)
            .await
            .unwrap();
        assert_eq!(got, 1, "taken over while under max_deliveries");
        assert_eq!(out[0].message.id, message.id);
    }
    (first, claimed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_past_max_deliveries_dead_letters_the_entry() {
    let server = RedisServer::start();
    let factory = RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .max_deliveries(3);
    let wal = factory.wal();
    let message = Arc::new(EMessage::standard("jobs", b"crashes its process".to_vec()));
    let (first, claimed) = deliver(&factory, &message, 3).await;
    let delivered = server.command(&["XPENDING", "eb:{jobs}:s:work", "work", "-", "+", "1"]);
    assert!(
        delivered.starts_with('*'),
        "the entry is pending: {delivered}"
    );

    // The fourth delivery would pass max_deliveries: dead-lettered instead.
    let last = consumer(&factory);
    let mut out = Vec::new();
    let got = last
        .consumer
        .claim_stale(Duration::ZERO, 10, &mut out)
        .await
        .unwrap();
    assert_eq!(got, 0, "not delivered a fourth time");
    assert!(out.is_empty());
    // Counted as this process's dead letter, as one made by the WAL's `fail` is.
    assert_eq!(
        wal.stats().dead,
        1,
        "stats().dead counts the max_deliveries dead letter"
    );

    let dead = wal.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, message.id);
    assert_eq!(dead[0].message.payload, message.payload);
    assert_eq!(dead[0].handlers, vec!["work".to_owned()]);
    let DeadReason::Other(reason) = &dead[0].reason else {
        panic!("reason {:?}", dead[0].reason)
    };
    assert!(
        reason.contains("delivered 4 times") && reason.contains("max_deliveries (3)"),
        "{reason}"
    );
    // Gone from the subscription: acked and deleted with the dead letter.
    assert_eq!(server.command(&["XLEN", "eb:{jobs}:s:work"]), ":0");
    assert_eq!(
        server.command(&["XPENDING", "eb:{jobs}:s:work", "work", "-", "+", "10"]),
        "*0"
    );

    // The first consumer waking up and acking late is fenced: nothing changes.
    first.consumer.ack(&claimed).await.unwrap();
    assert_eq!(wal.dead_letters().await.unwrap().len(), 1);
    assert_eq!(wal.stats().dead, 1);
    drop(last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_dead_letters_an_entry_its_sweep_finds_past_max_deliveries() {
    const VISIBILITY: Duration = Duration::from_millis(300);
    let server = RedisServer::start();
    let factory = || async {
        RedisQueueFactory::connect(&server.url())
            .await
            .unwrap()
            .max_deliveries(2)
            .visibility_timeout(VISIBILITY)
    };
    // Delivered twice already; both consumers are gone.
    let message = Arc::new(EMessage::standard("jobs", b"poison pill".to_vec()));
    let (first, _) = deliver(&factory().await, &message, 2).await;
    drop(first);

    let probe = Probe::new();
    let queue = factory().await;
    let bus = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(probe.handler("work", "jobs", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let fine = bus.send("jobs", b"fine".to_vec()).await.unwrap();
    probe.wait_for(1, WAIT).await;

    // The bus's sweep takes the entry over once its lease ran out, and dead-letters it.
    let deadline = tokio::time::Instant::now() + WAIT;
    let dead = loop {
        let dead = bus.dead_letters().await.unwrap();
        if !dead.is_empty() {
            break dead;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the entry past max_deliveries was not dead-lettered"
        );
        // Redis offers nothing to wait on.
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, message.id);
    assert_eq!(probe.count(), 1, "only the fine message was handled");
    assert_eq!(probe.count_of(&fine), 1);
    assert_eq!(probe.count_of(&message.id), 0, "never handled a third time");
    assert_eq!(server.command(&["XLEN", "eb:{jobs}:s:work"]), ":0");

    // Replayed: the same id is delivered again, from a fresh entry.
    bus.replay_dead_letter(&message.id).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&message.id), 1);
    assert!(bus.dead_letters().await.unwrap().is_empty());
}

/// Kills the child process if the test ends early.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `redis_crash_child`; returns it and a channel of its output lines.
fn crash_child(
    server: &RedisServer,
    visibility: Duration,
    max: u32,
) -> (KillOnDrop, tokio::sync::mpsc::UnboundedReceiver<String>) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_redis_crash_child"))
        .args([
            server.url(),
            visibility.as_millis().to_string(),
            max.to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start redis_crash_child");
    let out = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in out.lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (KillOnDrop(child), rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_crashes_every_process_reaches_the_dead_letters_after_max_deliveries() {
    const VISIBILITY: Duration = Duration::from_millis(300);
    const MAX: u32 = 3;
    let server = RedisServer::start();
    let factory = RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .max_deliveries(MAX);
    let message = Arc::new(EMessage::standard("jobs", b"crashes its handler".to_vec()));
    consumer(&factory)
        .producer
        .send(message.clone())
        .await
        .unwrap();

    // Each process claims it (the first by reading it, the next ones by taking it over from
    // the dead one) and dies handling it: MAX times.
    for round in 1..=MAX {
        let (mut child, mut lines) = crash_child(&server, VISIBILITY, MAX);
        let handling = format!("handling {}", message.id);
        let saw = tokio::time::timeout(WAIT, async {
            while let Some(line) = lines.recv().await {
                if line == handling {
                    return true;
                }
            }
            false
        })
        .await
        .unwrap_or(false);
        assert!(saw, "process {round} handled the message");
        let status = tokio::task::spawn_blocking(move || child.0.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(!status.success(), "process {round} crashed: {status}");
    }
    assert_eq!(factory.wal().dead_letters().await.unwrap().len(), 0);

    // The next process takes it over once more: past MAX, so a dead letter, not a crash.
    let (mut child, mut lines) = crash_child(&server, VISIBILITY, MAX);
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.command(&["XLEN", "eb:{jobs}:dlq"]) != ":1" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the message did not reach the dead letters"
        );
        // Redis offers nothing to wait on.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "the last process is alive"
    );
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let mut last_lines = Vec::new();
    while let Ok(line) = lines.try_recv() {
        last_lines.push(line);
    }
    assert!(
        !last_lines.iter().any(|l| l.starts_with("handling")),
        "the last process never handled it: {last_lines:?}"
    );
    let dead = factory.wal().dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, message.id);
    assert!(
        matches!(&dead[0].reason, DeadReason::Other(r) if r.contains("delivered 4 times")),
        "{:?}",
        dead[0].reason
    );
    assert_eq!(server.command(&["XLEN", "eb:{jobs}:s:work"]), ":0");
}
