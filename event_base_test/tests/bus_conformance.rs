//! The bus behaves the same over every in-process backend
//! (`event_base_test::conformance::bus`): the default in-memory one, the file WAL, and the
//! kanal queues. A new backend is one line in the list at the bottom.

use event_base::{
    EventBus, EventBusBuilder, FlumeQueueFactory, MemoryWal, MpmcQueueFactory, PersistentWal,
};
use event_base_test::conformance::bus::BusBackend;

/// What `event_base::builder()` uses: a `MemoryWal` and flume queues.
#[derive(Debug)]
struct Memory;

impl BusBackend for Memory {
    async fn build(&self, builder: EventBusBuilder, bound: usize) -> EventBus {
        builder
            .wal(MemoryWal::new())
            .queue(FlumeQueueFactory::bounded(bound))
            .build()
            .await
            .unwrap()
    }
}

/// A `PersistentWal` in a fresh temporary directory, over flume queues.
#[derive(Debug)]
struct Persistent(tempfile::TempDir);

impl Persistent {
    fn new() -> Persistent {
        Persistent(tempfile::tempdir().unwrap())
    }
}

impl BusBackend for Persistent {
    async fn build(&self, builder: EventBusBuilder, bound: usize) -> EventBus {
        builder
            .wal(PersistentWal::open(self.0.path()).unwrap())
            .queue(FlumeQueueFactory::bounded(bound))
            .build()
            .await
            .unwrap()
    }
}

/// A `MemoryWal` over the kanal queues.
#[derive(Debug)]
struct Kanal;

impl BusBackend for Kanal {
    async fn build(&self, builder: EventBusBuilder, bound: usize) -> EventBus {
        builder
            .wal(MemoryWal::new())
            .queue(MpmcQueueFactory::bounded(bound))
            .build()
            .await
            .unwrap()
    }
}

event_base_test::bus_conformance! {
    memory => Memory,
    persistent => Persistent::new(),
    kanal => Kanal,
}
