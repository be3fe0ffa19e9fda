//! The restart half of the crash tests: a new bus on a file WAL's directory delivers what
//! the killed process left there.

use std::path::Path;

use event_base::{Ack, EventBus, FlumeQueueFactory, PersistentWal, ShutdownStrategy};

use crate::{Probe, WAIT};

/// Opens the WAL in `dir` under a bus whose `workers` acking workers handle topic `jobs`,
/// waits until it is idle, drains it, and returns the id of every delivery made, in order
/// (a message delivered twice appears twice).
pub async fn replay_jobs(dir: &Path, workers: usize) -> Vec<String> {
    let probe = Probe::new();
    let bus = EventBus::builder()
        .wal(PersistentWal::open(dir).expect("reopen the file WAL"))
        .queue(FlumeQueueFactory::default())
        .handler(probe.handler("jobs", "jobs", |_| Ack::Ack).workers(workers))
        .build()
        .await
        .expect("start on the reopened WAL");
    bus.wait_idle(WAIT).await.expect("the replay finishes");
    bus.shutdown(ShutdownStrategy::Drain { timeout: WAIT })
        .await
        .expect("drain after the replay");
    probe.seen().into_iter().map(|s| s.id).collect()
}
