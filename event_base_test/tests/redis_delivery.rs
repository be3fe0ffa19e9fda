//! A bus on Redis queues (`RedisQueueFactory` + `RedisWal`, a real `redis-server`) delivers
//! every accepted message, gives each handler of a topic its own copy, and acks an entry only
//! once its handler's copy has ended: the streams end empty.

use std::collections::HashMap;
use std::time::Duration;

use event_base::{Ack, EventBus, HandlerSpec, RedisQueueFactory};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Probe, WAIT};

async fn bus(server: &RedisServer, handlers: Vec<HandlerSpec>) -> EventBus {
    let queue = RedisQueueFactory::connect(&server.url())
        .await
        .expect("the test server passes the checks");
    let mut b = EventBus::builder().wal(queue.wal()).queue(queue);
    for h in handlers {
        b = b.handler(h);
    }
    b.build().await.unwrap()
}

/// Waits until the stream `key` is empty: every entry acked (and so deleted). Redis offers
/// nothing to wait on, so this looks every few milliseconds, up to [`WAIT`].
async fn drained(server: &RedisServer, key: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let len = server.command(&["XLEN", key]);
        if len == ":0" {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "`{key}` still holds {len} entries"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_accepted_message_is_handled_once_and_then_acked() {
    let server = RedisServer::start();
    let probe = Probe::new();
    let bus = bus(
        &server,
        vec![probe.handler("work", "orders", |_| Ack::Ack).workers(4)],
    )
    .await;
    let mut ids = Vec::new();
    for i in 0..500u32 {
        ids.push(bus.send("orders", i.to_be_bytes().to_vec()).await.unwrap());
    }
    probe.wait_for(500, WAIT).await;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for s in probe.seen() {
        *seen.entry(s.id).or_default() += 1;
    }
    for id in &ids {
        assert_eq!(seen.get(id.as_str()), Some(&1), "message {id}");
    }
    assert_eq!(seen.len(), 500, "nothing but what was sent");
    // Acked once handled (the ack deletes the entry): the subscription's stream ends empty.
    drained(&server, "eb:{orders}:s:work").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handlers_of_a_topic_each_get_every_message() {
    let server = RedisServer::start();
    let probe = Probe::new();
    let bus = bus(
        &server,
        vec![
            probe.handler("billing", "orders", |_| Ack::Ack).workers(2),
            probe.handler("shipping", "orders", |_| Ack::Ack),
        ],
    )
    .await;
    let mut ids = Vec::new();
    for i in 0..200u32 {
        ids.push(bus.send("orders", i.to_be_bytes().to_vec()).await.unwrap());
    }
    probe.wait_for(400, WAIT).await;
    for label in ["billing", "shipping"] {
        let mut mine: Vec<String> = probe
            .seen()
            .into_iter()
            .filter(|s| s.label == label)
            .map(|s| s.id)
            .collect();
        mine.sort();
        let mut want: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        want.sort();
        assert_eq!(mine, want, "{label} got every message once");
    }
    drained(&server, "eb:{orders}:s:billing").await;
    drained(&server, "eb:{orders}:s:shipping").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_evicts_keys_is_refused_at_connect() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let err = RedisQueueFactory::connect(&server.url())
        .await
        .expect_err("allkeys-lru may evict a stream and lose its messages");
    let text = err.to_string();
    assert!(
        text.contains("allkeys-lru") && text.contains("noeviction"),
        "{text}"
    );
}
