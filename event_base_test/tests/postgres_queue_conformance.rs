//! The PostgreSQL queues pass the queue conformance cases
//! (`event_base_test::conformance::queue`) against a real cluster, one per case, started
//! by the case and stopped when it ends.

use event_base_postgres::PostgresQueueFactory;
use event_base_test::postgres_server::PostgresServer;

event_base_test::queue_conformance! {
    postgres => {
        let server = PostgresServer::start();
        move |bound| {
            PostgresQueueFactory::open(&server.url())
                .expect("a valid URL")
                .bound(bound)
        }
    },
}
