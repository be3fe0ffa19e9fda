//! The bus behaves on PostgreSQL queues as over the in-process backends: the bus conformance
//! cases (`event_base_test::conformance::bus`) over a `PostgresQueueFactory` and its
//! `PostgresQueueWal` on a real cluster, one per case.

use std::time::Duration;

use event_base::{EventBus, EventBusBuilder};
use event_base_postgres::PostgresQueueFactory;
use event_base_test::conformance::bus::BusBackend;
use event_base_test::postgres_server::PostgresServer;

/// A bus whose WAL and queues are on the case's own cluster.
#[derive(Debug)]
struct Postgres(PostgresServer);

impl BusBackend for Postgres {
    async fn build(&self, builder: EventBusBuilder, bound: usize) -> EventBus {
        let queue = PostgresQueueFactory::connect(&self.0.url())
            .await
            .expect("connect to the case's cluster")
            .visibility_timeout(Duration::from_secs(5))
            .bound(bound);
        builder.wal(queue.wal()).queue(queue).build().await.unwrap()
    }
}

event_base_test::bus_conformance! {
    postgres_queue => Postgres(PostgresServer::start()),
}
