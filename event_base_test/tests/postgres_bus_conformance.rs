//! The bus behaves the same with its WAL in PostgreSQL (`event_base_test::conformance::bus`):
//! a `PostgresWal` on a real cluster, one per case, over the in-process flume queues.

use event_base::{EventBus, EventBusBuilder, FlumeQueueFactory};
use event_base_postgres::PostgresWal;
use event_base_test::conformance::bus::BusBackend;
use event_base_test::postgres_server::PostgresServer;

/// One cluster for the whole case.
#[derive(Debug)]
struct Postgres(PostgresServer);

impl BusBackend for Postgres {
    async fn build(&self, builder: EventBusBuilder, bound: usize) -> EventBus {
        builder
            .wal(PostgresWal::connect(&self.0.url()).await.unwrap())
            .queue(FlumeQueueFactory::bounded(bound))
            .build()
            .await
            .unwrap()
    }
}

event_base_test::bus_conformance! {
    postgres => Postgres(PostgresServer::start()),
}
