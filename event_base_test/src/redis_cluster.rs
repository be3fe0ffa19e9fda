//! Nodes of a Redis cluster inside one test process: each [`node`] is a
//! [`RedisQueueFactory`] of its own (a node with its own id), and a bus over it stands for a
//! process ([`bus_over`]). [`registered`] waits until the registry of handlers lists a
//! handler, [`until`] polls a condition Redis offers nothing to wait on.

use std::time::Duration;

use event_base::{EventBus, HandlerSpec, RedisQueueFactory};

use crate::redis_server::RedisServer;

/// A node on `server` that beats (and reads the registry of handlers) every `beat`.
pub async fn node(server: &RedisServer, beat: Duration) -> RedisQueueFactory {
    RedisQueueFactory::connect(&server.url())
        .await
        .expect("connect to the test's redis-server")
        .heartbeat(beat)
}

/// A bus over `queue` (its WAL the queue's: the stream is the log) with `handlers`.
pub async fn bus_over(queue: RedisQueueFactory, handlers: Vec<HandlerSpec>) -> EventBus {
    let mut builder = EventBus::builder().wal(queue.wal()).queue(queue);
    for h in handlers {
        builder = builder.handler(h);
    }
    builder.build().await.expect("build the bus")
}

pub use crate::until;

/// Waits until the registry lists `handler` of `topic` (its node registers it with its
/// first claim).
pub async fn registered(queue: &RedisQueueFactory, topic: &str, handler: &str) {
    until(
        &format!("`{handler}` of `{topic}` registered"),
        async || {
            queue
                .handlers_of(topic, Duration::from_secs(60))
                .await
                .expect("read the registry")
                .iter()
                .any(|h| h == handler)
        },
    )
    .await;
}

/// Waits until the registry lists some handler of `topic` (a node running one registered it
/// with its first claim).
pub async fn any_registered(queue: &RedisQueueFactory, topic: &str) {
    until(&format!("a handler of `{topic}` registered"), async || {
        !queue
            .handlers_of(topic, Duration::from_secs(60))
            .await
            .expect("read the registry")
            .is_empty()
    })
    .await;
}

/// Waits until `bus` routes sends to `topic` to exactly `handlers` in other processes
/// (its cache of the registry is read again every heartbeat).
pub async fn routes_to(bus: &EventBus, topic: &str, handlers: &[&str]) {
    until(
        &format!("the bus routes `{topic}` to {handlers:?} elsewhere"),
        async || bus.handlers_elsewhere(topic) == handlers,
    )
    .await;
}
