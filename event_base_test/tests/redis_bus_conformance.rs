//! The bus behaves over Redis as over the in-process backends: the bus conformance cases
//! (`event_base_test::conformance::bus`) over a `RedisWal` and `RedisQueueFactory` on a real
//! `redis-server`, one server per case, started by the case and killed when it ends.

use std::time::Duration;

use event_base::{EventBus, EventBusBuilder, RedisQueueFactory};
use event_base_test::conformance::bus::BusBackend;
use event_base_test::redis_server::RedisServer;

/// Short, so that a node's registration and takeovers do not slow the cases.
const BEAT: Duration = Duration::from_millis(100);

/// A bus whose WAL and queues are on the case's own server.
#[derive(Debug)]
struct Redis(RedisServer);

impl BusBackend for Redis {
    async fn build(&self, builder: EventBusBuilder, bound: usize) -> EventBus {
        let queue = RedisQueueFactory::connect(&self.0.url())
            .await
            .expect("connect to the case's redis-server")
            .heartbeat(BEAT)
            .bound(bound);
        builder.wal(queue.wal()).queue(queue).build().await.unwrap()
    }
}

event_base_test::bus_conformance! {
    redis => Redis(RedisServer::start()),
}
