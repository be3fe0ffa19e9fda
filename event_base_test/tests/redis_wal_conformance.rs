//! `RedisWal` passes the WAL conformance cases a view of the queues' entries promises
//! (`event_base_test::conformance::wal`, `wal_view_conformance!`: the dead letters, and that
//! it holds no record of its own, since on Redis the stream is the log) against a real
//! `redis-server`, one server per case, started by the case and killed when it ends.

use event_base::{RedisQueueFactory, RedisWal};
use event_base_test::conformance::wal::WalBackend;
use event_base_test::redis_server::RedisServer;

/// One `redis-server` for the whole case; each `open` is a new `RedisWal` over it, with a
/// connection of its own, as a restarted process would make.
#[derive(Debug)]
struct Redis {
    server: RedisServer,
}

impl Redis {
    fn start() -> Redis {
        Redis {
            server: RedisServer::start(),
        }
    }
}

impl WalBackend for Redis {
    type Wal = RedisWal;
    fn open(&self) -> RedisWal {
        RedisWal::over(&RedisQueueFactory::open(&self.server.url()).expect("a valid URL"))
    }
}

event_base_test::wal_view_conformance! {
    redis => Redis::start(),
}
