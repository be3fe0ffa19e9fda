//! Redis itself dies: under `appendonly yes` + `appendfsync always`, Redis writes and fsyncs
//! its append-only file before it answers, so a send that `send` confirmed survives a SIGKILL
//! of `redis-server`. Senders write while the server is killed; it is started again on the
//! same directory and port, and every message whose send had been confirmed is delivered.
//!
//! What this can and cannot tell: a SIGKILL of the Redis process leaves the operating
//! system's page cache alone, so `appendfsync everysec` would pass too (Redis writes the AOF
//! before it answers, in every mode; only `appendonly no` loses the sends here). What `always`
//! adds, surviving a power loss, needs the machine to lose power and is not tested.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use event_base::backend::QueueFactory;
use event_base::{Ack, EMessage, EventBus, MessageTopic, RedisQueueFactory};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Probe, WAIT};

const SENDERS: usize = 8;
/// Confirmed sends before the server is killed (the senders go on until it is).
const BEFORE_KILL: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_confirmed_send_survives_a_killed_redis_under_appendfsync_always() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    // A sender with no handler of its own: it writes to the subscription's stream.
    let queue = RedisQueueFactory::connect(&server.url()).await.unwrap();
    let producer = queue
        .create_subscription(&MessageTopic::from("jobs"), "work")
        .unwrap()
        .producer;
    let confirmed = Arc::new(Mutex::new(Vec::new()));
    let enough = Arc::new(tokio::sync::Notify::new());
    let mut tasks = Vec::new();
    for t in 0..SENDERS {
        let producer = producer.clone();
        let confirmed = confirmed.clone();
        let enough = enough.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0u32.. {
                let message = Arc::new(EMessage::standard("jobs", format!("{t}-{i}")));
                let id = message.id.clone();
                if producer.send(message).await.is_err() {
                    return; // the server is gone: this one is unconfirmed
                }
                let mut c = confirmed.lock().unwrap();
                c.push(id);
                if c.len() == BEFORE_KILL {
                    enough.notify_one();
                }
            }
        }));
    }
    enough.notified().await;
    // Mid-send: some sends are on the wire, unanswered.
    server.kill();
    for t in tasks {
        t.await.unwrap();
    }
    let confirmed: HashSet<String> = confirmed.lock().unwrap().iter().cloned().collect();
    assert!(confirmed.len() >= BEFORE_KILL);
    drop(producer);
    drop(queue);

    server.restart();
    let probe = Probe::new();
    let queue = RedisQueueFactory::connect(&server.url()).await.unwrap();
    let bus = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(probe.handler("work", "jobs", |_| Ack::Ack).workers(4))
        .build()
        .await
        .unwrap();
    probe
        .wait_until("every confirmed send", WAIT * 2, |seen| {
            let got: HashSet<&str> = seen.iter().map(|s| s.id.as_str()).collect();
            confirmed.iter().all(|id| got.contains(id.as_str()))
        })
        .await;
    drop(bus);
}
