//! Retries with a delay on Redis queues wait in Redis, not in the process that handled the
//! message: the failed delivery's entry is settled and its next attempt (`attempts`
//! counted) goes into the subscription's delayed set, in one script, and is moved back to
//! that subscription's stream when the server's clock says it is due. So the backoff holds
//! no lease, a process that stops meanwhile loses neither the retry nor its count, and the
//! topic's other handlers do not see it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use event_base::{
    Ack, DeadReason, EMessage, EventBus, HandlerSpec, RedisQueueFactory, ShutdownStrategy,
};
use event_base_test::redis_cluster::until;
use event_base_test::redis_server::{RedisServer, Reply};
use event_base_test::{Probe, WAIT};

/// Longer than any test here runs: an entry taken over after it would show as a delivery
/// that came too late for `WAIT`.
const VISIBILITY: Duration = Duration::from_secs(120);

async fn bus(server: &RedisServer, handlers: Vec<HandlerSpec>) -> EventBus {
    let queue = RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .visibility_timeout(VISIBILITY)
        .block(Duration::from_millis(200));
    let mut builder = EventBus::builder().wal(queue.wal()).queue(queue);
    for h in handlers {
        builder = builder.handler(h);
    }
    builder.build().await.unwrap()
}

/// Fails the first delivery of each message with a retry after `delay`, acks the others,
/// and counts the deliveries that came before their `deliver_at` (a retry's is set to when
/// it is due).
fn fails_once(
    delay: Duration,
    early: &Arc<AtomicUsize>,
) -> impl Fn(&EMessage) -> Ack + Send + Sync + 'static {
    let early = early.clone();
    move |m: &EMessage| {
        if m.deliver_at.is_some_and(|at| SystemTime::now() < at) {
            early.fetch_add(1, Ordering::SeqCst);
        }
        if m.attempts <= 1 {
            Ack::NoAck {
                retry_after: Some(delay),
                max_retries: 3,
            }
        } else {
            Ack::Ack
        }
    }
}

/// How many members `key` (a sorted set) has.
fn members(server: &RedisServer, key: &str) -> i64 {
    server.query(&["ZCARD", key]).as_int().unwrap_or(-1)
}

/// How many entries `key` (a stream) has.
fn entries(server: &RedisServer, key: &str) -> i64 {
    server.query(&["XLEN", key]).as_int().unwrap_or(-1)
}

/// Waits until the retry of the one message sent to `handler` of `jobs` waits in Redis: a
/// member of the delayed set, and the failed delivery's entry settled.
async fn retry_in_redis(server: &RedisServer, handler: &str) {
    let (set, stream) = (
        format!("eb:{{jobs}}:d:{handler}"),
        format!("eb:{{jobs}}:s:{handler}"),
    );
    until(
        "the retry in the delayed set, its entry settled",
        async || members(server, &set) == 1 && entries(server, &stream) == 0,
    )
    .await;
}

fn attempts_of(probe: &Probe, label: &str) -> Vec<u32> {
    probe
        .seen()
        .iter()
        .filter(|s| s.label == label)
        .map(|s| s.attempts)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_delivery_is_retried_from_redis_after_its_delay_with_its_attempt_counted() {
    let server = RedisServer::start();
    let early = Arc::new(AtomicUsize::new(0));
    let probe = Probe::new();
    let delay = Duration::from_millis(1500);
    let b = bus(
        &server,
        vec![probe.handler("work", "jobs", fails_once(delay, &early))],
    )
    .await;
    let id = b.send("jobs", b"job".to_vec()).await.unwrap();
    probe.wait_for(1, WAIT).await;
    // Not held in this process: the entry is settled (no lease kept through the backoff)
    // and the next attempt is in the subscription's delayed set, with its fields.
    retry_in_redis(&server, "work").await;
    assert_eq!(server.command(&["HLEN", "eb:{jobs}:dm:work"]), ":2");
    let pending = server.query(&["XPENDING", "eb:{jobs}:s:work", "work"]);
    assert_eq!(
        pending.items().first().and_then(Reply::as_int),
        Some(0),
        "nothing pending in the group"
    );

    probe.wait_for(2, WAIT).await;
    b.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&id), 2);
    assert_eq!(
        attempts_of(&probe, "work"),
        vec![1, 2],
        "the retry counts its attempt"
    );
    assert_eq!(early.load(Ordering::SeqCst), 0, "not before its delay");
    assert_eq!(members(&server, "eb:{jobs}:d:work"), 0);
    assert_eq!(server.command(&["HLEN", "eb:{jobs}:dm:work"]), ":0");
    assert_eq!(
        entries(&server, "eb:{jobs}:s:work"),
        0,
        "acked once handled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_outlives_the_process_that_failed_and_keeps_its_attempts() {
    let server = RedisServer::start();
    let early = Arc::new(AtomicUsize::new(0));
    let delay = Duration::from_secs(2);
    let first = Probe::new();
    let a = bus(
        &server,
        vec![first.handler("work", "jobs", fails_once(delay, &early))],
    )
    .await;
    let id = a.send("jobs", b"job".to_vec()).await.unwrap();
    first.wait_for(1, WAIT).await;
    retry_in_redis(&server, "work").await;
    // Stopped during the backoff: an in-process timer would go with it, and its entry would
    // wait for the visibility timeout (far past `WAIT`) to be taken over, from attempt 1.
    a.shutdown(ShutdownStrategy::Force).await.unwrap();
    drop(a);

    let second = Probe::new();
    let b = bus(
        &server,
        vec![second.handler("work", "jobs", fails_once(delay, &early))],
    )
    .await;
    second.wait_for(1, WAIT).await;
    b.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        second.count_of(&id),
        1,
        "the retry, delivered by the other process"
    );
    assert_eq!(attempts_of(&second, "work"), vec![2], "with its attempts");
    assert_eq!(attempts_of(&first, "work"), vec![1]);
    assert_eq!(early.load(Ordering::SeqCst), 0, "not before its delay");
    until("the retry acked", async || {
        entries(&server, "eb:{jobs}:s:work") == 0
    })
    .await;
    assert_eq!(members(&server, "eb:{jobs}:d:work"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_handler_that_failed_gets_the_retry() {
    let server = RedisServer::start();
    let early = Arc::new(AtomicUsize::new(0));
    let probe = Probe::new();
    let b = bus(
        &server,
        vec![
            probe.handler("fails", "jobs", fails_once(Duration::from_secs(1), &early)),
            probe.handler("fine", "jobs", |_: &EMessage| Ack::Ack),
        ],
    )
    .await;
    let id = b.send("jobs", b"job".to_vec()).await.unwrap();
    retry_in_redis(&server, "fails").await;
    assert_eq!(
        members(&server, "eb:{jobs}:d:fine"),
        0,
        "in the failing handler's set only"
    );
    probe
        .wait_until("the retry of `fails`", WAIT, |seen| {
            seen.iter().filter(|s| s.label == "fails").count() == 2
        })
        .await;
    // The message is final once both handlers' copies are: the retry's included.
    b.wait_idle(WAIT).await.unwrap();
    assert_eq!(attempts_of(&probe, "fails"), vec![1, 2]);
    assert_eq!(
        attempts_of(&probe, "fine"),
        vec![1],
        "the other handler sees it once"
    );
    assert_eq!(probe.count_of(&id), 3);
    assert_eq!(early.load(Ordering::SeqCst), 0);
    for handler in ["fails", "fine"] {
        assert_eq!(entries(&server, &format!("eb:{{jobs}}:s:{handler}")), 0);
        assert_eq!(members(&server, &format!("eb:{{jobs}}:d:{handler}")), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_past_max_retries_is_a_dead_letter_as_before() {
    let server = RedisServer::start();
    let probe = Probe::new();
    let b = bus(
        &server,
        vec![probe.handler("work", "jobs", |_: &EMessage| Ack::NoAck {
            retry_after: Some(Duration::from_millis(200)),
            max_retries: 2,
        })],
    )
    .await;
    let id = b.send("jobs", b"doomed".to_vec()).await.unwrap();
    probe.wait_for(3, WAIT).await;
    b.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        attempts_of(&probe, "work"),
        vec![1, 2, 3],
        "1 + max_retries deliveries"
    );
    let dead = b.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, id.to_string());
    assert_eq!(dead[0].reason, DeadReason::MaxRetriesExceeded);
    assert_eq!(dead[0].attempts, 3);
    assert_eq!(dead[0].handlers, vec!["work".to_owned()]);
    assert_eq!(
        entries(&server, "eb:{jobs}:s:work"),
        0,
        "its entry settled once"
    );
    assert_eq!(
        members(&server, "eb:{jobs}:d:work"),
        0,
        "no retry left behind"
    );
    assert_eq!(entries(&server, "eb:{jobs}:dlq"), 1);
}
