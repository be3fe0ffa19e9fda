//! `PostgresWal` passes every WAL conformance case (`event_base_test::conformance::wal`): it
//! keeps records of its own, a row each, against a real PostgreSQL cluster, one per case,
//! made by the case and stopped when it ends.

use event_base_postgres::PostgresWal;
use event_base_test::conformance::wal::WalBackend;
use event_base_test::postgres_server::PostgresServer;

/// One cluster for the whole case; each `open` connects a new `PostgresWal` to it, as a
/// restarted process would (it loads the records' states from the table).
#[derive(Debug)]
struct Postgres {
    server: PostgresServer,
}

impl Postgres {
    fn start() -> Postgres {
        Postgres {
            server: PostgresServer::start(),
        }
    }
}

impl WalBackend for Postgres {
    type Wal = PostgresWal;
    fn open(&self) -> PostgresWal {
        // `open` is not async: connect on this runtime's thread, which the case's
        // multi-thread runtime lets block.
        let url = self.server.url();
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(PostgresWal::connect(&url))
        })
        .expect("connect to the test cluster")
    }
}

event_base_test::wal_conformance! {
    postgres => Postgres::start(),
}
