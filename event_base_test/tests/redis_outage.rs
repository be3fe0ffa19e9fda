//! Redis going away while a bus sends and claims: a paused server (SIGSTOP) and a killed one
//! (SIGKILL, then started again without persistence). Nothing panics or hangs: sends are
//! accepted into the writer up to the bound and then refused with typed errors, calls that
//! need an answer fail with a typed error naming the server, and once Redis is back every
//! accepted message is delivered (at least once: a command whose reply was lost is written
//! again).

use std::collections::HashSet;
use std::time::Duration;

use event_base::{
    Ack, CoreError, EMessage, EventBus, MessageId, RedisError, RedisQueueFactory, SendOptions,
};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Probe, WAIT};

const BOUND: usize = 8;

async fn bus(server: &RedisServer, probe: &std::sync::Arc<Probe>) -> EventBus {
    let queue = RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .bound(BOUND);
    EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(probe.handler("work", "t", |_| Ack::Ack).workers(2))
        .build()
        .await
        .unwrap()
}

/// The Redis error under a bus error, if that is what it is.
fn redis_error(e: &CoreError) -> Option<&RedisError> {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<RedisError>() {
            return Some(r);
        }
        source = s.source();
    }
    None
}

async fn wait_for_all(probe: &Probe, ids: &[MessageId]) {
    let want: HashSet<String> = ids.iter().map(|i| i.to_string()).collect();
    probe
        .wait_until("every accepted message", WAIT * 2, |seen| {
            let got: HashSet<&str> = seen.iter().map(|s| s.id.as_str()).collect();
            want.iter().all(|id| got.contains(id.as_str()))
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_gives_typed_errors_and_delivery_resumes() {
    let server = RedisServer::start();
    let probe = Probe::new();
    let bus = bus(&server, &probe).await;
    let mut accepted = Vec::new();
    for i in 0..3u8 {
        accepted.push(bus.send("t", vec![i]).await.unwrap());
    }
    probe.wait_for(3, WAIT).await;
    // The acks reach Redis after the handlers return; let them land before the pause.
    bus.wal().flush().await.unwrap();

    server.pause();
    // Sends are taken into the writer (to be written when Redis answers) until the bound,
    // then refused at once: no send waits for a server that does not answer.
    let mut full = None;
    for i in 0..(BOUND as u8 * 2) {
        let send = bus.send_with(
            "t",
            EMessage::standard("t", vec![10 + i]),
            SendOptions::new().try_send(),
        );
        match tokio::time::timeout(Duration::from_secs(2), send)
            .await
            .expect("a try_send never waits")
        {
            Ok(id) => accepted.push(id),
            Err(e) => {
                full = Some(e);
                break;
            }
        }
    }
    assert!(
        matches!(full, Some(CoreError::QueueFull { .. })),
        "the bound holds while Redis is away: {full:?}"
    );
    // A send that may wait gives up at its timeout.
    let waited = bus
        .send_with(
            "t",
            EMessage::standard("t", b"late".to_vec()),
            SendOptions::new().timeout(Duration::from_millis(300)),
        )
        .await;
    assert!(
        matches!(waited, Err(CoreError::Timeout { .. })),
        "{waited:?}"
    );
    // What needs an answer from Redis fails, typed, naming the server, within the
    // connection's timeouts.
    let flushed = tokio::time::timeout(WAIT, bus.wal().flush())
        .await
        .expect("flush answers while Redis is paused");
    let err = CoreError::from(flushed.expect_err("nothing can be confirmed"));
    let redis = redis_error(&err).expect("a RedisError under it");
    assert!(redis.is_transient(), "{redis}");
    let port = server.port().to_string();
    assert!(
        redis.to_string().contains(&port),
        "names the server: {redis}"
    );
    let listed = tokio::time::timeout(WAIT, bus.dead_letters())
        .await
        .expect("dead_letters answers while Redis is paused");
    assert!(redis_error(&listed.expect_err("Redis is paused")).is_some());

    server.resume();
    wait_for_all(&probe, &accepted).await;
    // And it goes on: a send after the outage is delivered too.
    let after = bus.send("t", b"after".to_vec()).await.unwrap();
    wait_for_all(&probe, &[after]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_without_persistence_gets_its_group_back_and_delivers() {
    let mut server = RedisServer::start();
    let probe = Probe::new();
    let bus = bus(&server, &probe).await;
    let first = bus.send("t", b"before".to_vec()).await.unwrap();
    wait_for_all(&probe, &[first]).await;

    server.kill();
    // Accepted into the writer while Redis is down (up to the bound)...
    let mut accepted = Vec::new();
    for i in 0..3u8 {
        accepted.push(
            bus.send_with(
                "t",
                EMessage::standard("t", vec![i]),
                SendOptions::new().try_send(),
            )
            .await
            .unwrap(),
        );
    }
    // ...while what needs an answer says Redis is unreachable.
    let err = CoreError::from(bus.wal().flush().await.expect_err("Redis is down"));
    assert!(
        redis_error(&err).is_some_and(RedisError::is_transient),
        "{err:?}"
    );

    // Back, empty (no persistence): the stream and its group are made again, and what was
    // accepted meanwhile is written and delivered.
    server.restart();
    wait_for_all(&probe, &accepted).await;
}
