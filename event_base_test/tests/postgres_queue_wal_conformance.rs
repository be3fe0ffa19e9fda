//! `PostgresQueueWal` passes the WAL conformance cases a view of the queues' rows promises
//! (`event_base_test::conformance::wal`, `wal_view_conformance!`: the dead letters, and that
//! it holds no record of its own, since on PostgreSQL the queue's rows are the log) against
//! a real cluster, one per case.

use event_base_postgres::{PostgresQueueFactory, PostgresQueueWal};
use event_base_test::conformance::wal::WalBackend;
use event_base_test::postgres_server::PostgresServer;

/// One cluster for the whole case; each `open` is a new WAL over a new factory, with
/// connections of its own, as a restarted process would make.
#[derive(Debug)]
struct Postgres(PostgresServer);

impl WalBackend for Postgres {
    type Wal = PostgresQueueWal;
    fn open(&self) -> PostgresQueueWal {
        PostgresQueueFactory::open(&self.0.url())
            .expect("a valid URL")
            .wal()
    }
}

event_base_test::wal_view_conformance! {
    postgres_queue => Postgres(PostgresServer::start()),
}
