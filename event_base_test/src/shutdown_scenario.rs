//! A shutdown scenario shared by the strategy tests: a system on a `MemoryWal` with a gated
//! handler that is mid-message when shutdown begins, and a second system on the same WAL that
//! must deliver whatever the first left unfinished.

use std::collections::HashSet;
use std::sync::Arc;

use event_base::{Ack, EventBus, FlumeQueueFactory, MemoryWal};

use crate::{Gate, Probe, WAIT};

/// The first system and what was sent to it.
#[derive(Debug)]
pub struct Scenario {
    /// The shared WAL.
    pub wal: Arc<MemoryWal>,
    /// The first system.
    pub bus: EventBus,
    /// Records the first system's deliveries.
    pub probe: Arc<Probe>,
    /// Holds the first system's handlers.
    pub gate: Gate,
    /// Every accepted message id.
    pub sent: Vec<String>,
}

impl Scenario {
    /// Starts a system with `workers` gated workers on topic `jobs`, sends `n` messages, and
    /// waits until every worker is mid-message.
    pub async fn start(workers: usize, n: usize) -> Scenario {
        let wal = Arc::new(MemoryWal::new());
        let probe = Probe::new();
        let gate = Gate::new();
        let bus = EventBus::builder()
            .wal(wal.clone())
            .queue(FlumeQueueFactory::default())
            .handler(
                probe
                    .gated_handler("jobs", "jobs", &gate, |_| Ack::Ack)
                    .workers(workers),
            )
            .build()
            .await
            .expect("build first system");
        let mut sent = Vec::with_capacity(n);
        for i in 0..n {
            sent.push(
                bus.send("jobs", (i as u32).to_le_bytes().to_vec())
                    .await
                    .expect("send")
                    .into(),
            );
        }
        probe.wait_for(workers.min(n), WAIT).await;
        Scenario {
            wal,
            bus,
            probe,
            gate,
            sent,
        }
    }

    /// Starts a second system on the same WAL and returns the ids it delivered once idle.
    /// Asserts that, together with what the first system finished, every sent message was
    /// handled, and that nothing the first system finished is delivered again.
    pub async fn restart_and_check(&self) -> Vec<String> {
        let probe = Probe::new();
        let bus = EventBus::builder()
            .wal(self.wal.clone())
            .queue(FlumeQueueFactory::default())
            .handler(probe.handler("jobs", "jobs", |_| Ack::Ack).workers(2))
            .build()
            .await
            .expect("build second system");
        bus.wait_idle(WAIT).await.expect("second system idle");
        let finished: HashSet<String> = self.probe.finished().into_iter().collect();
        let replayed: Vec<String> = probe.seen().into_iter().map(|s| s.id).collect();
        let replayed_set: HashSet<String> = replayed.iter().cloned().collect();
        assert_eq!(
            replayed.len(),
            replayed_set.len(),
            "each replayed message once"
        );
        for id in &self.sent {
            assert!(
                finished.contains(id) || replayed_set.contains(id),
                "message {id} was lost"
            );
        }
        assert!(
            finished.is_disjoint(&replayed_set),
            "a message the first system finished was delivered again"
        );
        replayed
    }
}
