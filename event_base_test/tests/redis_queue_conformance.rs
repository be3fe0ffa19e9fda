//! The Redis Streams queue passes the queue conformance cases
//! (`event_base_test::conformance::queue`) against a real `redis-server`, one server per
//! case, started by the case and killed when it ends.

use event_base::RedisQueueFactory;
use event_base_test::redis_server::RedisServer;

event_base_test::queue_conformance! {
    redis => {
        let server = RedisServer::start();
        move |bound| {
            RedisQueueFactory::open(&server.url())
                .expect("a valid URL")
                .bound(bound)
        }
    },
}
