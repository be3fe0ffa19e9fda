//! A shutdown scenario shared by the strategy tests: a system with a gated handler that is
//! mid-message when shutdown begins, and a second system on the same WAL that must deliver
//! whatever the first left unfinished. The WAL is a `MemoryWal` shared by both systems, or a
//! `PersistentWal` whose directory the second system opens again (a real restart over
//! files).

use std::collections::HashSet;
use std::sync::Arc;

use event_base::backend::Wal;
use event_base::constant::SHUTDOWN;
use event_base::{
    Ack, EMessage, EventBus, FlumeQueueFactory, MemoryWal, PersistentWal, ShutdownCommand,
    ShutdownStrategy,
};

use crate::{Gate, Probe, WAIT};

/// Where the scenario's WAL lives.
#[derive(Debug)]
pub enum Storage {
    /// A `MemoryWal` both systems share.
    Memory,
    /// A `PersistentWal` in a temporary directory, opened again by the second system.
    Files,
}

/// The first system and what was sent to it.
pub struct Scenario {
    /// The first system's WAL.
    pub wal: Arc<dyn Wal>,
    /// The directory of a file WAL (`Storage::Files`).
    pub dir: Option<tempfile::TempDir>,
    /// The first system.
    pub bus: EventBus,
    /// Records the first system's deliveries.
    pub probe: Arc<Probe>,
    /// Holds the first system's handlers.
    pub gate: Gate,
    /// Every accepted message id.
    pub sent: Vec<String>,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("dir", &self.dir)
            .field("sent", &self.sent.len())
            .finish_non_exhaustive()
    }
}

impl Scenario {
    /// Starts a system on a `MemoryWal` with `workers` gated workers on topic `jobs`, sends
    /// `n` messages, and waits until every worker is mid-message.
    pub async fn start(workers: usize, n: usize) -> Scenario {
        Scenario::start_on(Storage::Memory, workers, n).await
    }

    /// A scenario on a `MemoryWal` a test set up itself.
    pub fn from_parts(
        wal: Arc<MemoryWal>,
        bus: EventBus,
        probe: Arc<Probe>,
        gate: Gate,
        sent: Vec<String>,
    ) -> Scenario {
        Scenario {
            wal,
            dir: None,
            bus,
            probe,
            gate,
            sent,
        }
    }

    /// [`start`](Self::start), with the WAL in `storage`.
    pub async fn start_on(storage: Storage, workers: usize, n: usize) -> Scenario {
        let (wal, dir): (Arc<dyn Wal>, _) = match storage {
            Storage::Memory => (Arc::new(MemoryWal::new()), None),
            Storage::Files => {
                let dir = tempfile::tempdir().expect("a temporary directory");
                let wal = PersistentWal::open(dir.path()).expect("open the file WAL");
                (Arc::new(wal), Some(dir))
            }
        };
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
            dir,
            bus,
            probe,
            gate,
            sent,
        }
    }

    /// Starts a second system on the same WAL (a file WAL: its directory opened again, once
    /// the first system is gone) and returns the ids it delivered once idle. Asserts that,
    /// together with what the first system finished, every sent message was handled, and
    /// that nothing the first system finished is delivered again. Call it after the first
    /// system's shutdown.
    pub async fn restart_and_check(self) -> Vec<String> {
        let Scenario {
            wal,
            dir,
            bus,
            probe: first,
            sent,
            ..
        } = self;
        let wal: Arc<dyn Wal> = match &dir {
            None => wal,
            Some(dir) => {
                // The last handles on the old WAL go; its writer syncs and unlocks.
                drop(bus);
                drop(wal);
                Arc::new(PersistentWal::open(dir.path()).expect("reopen the file WAL"))
            }
        };
        let probe = Probe::new();
        let bus = EventBus::builder()
            .wal(wal)
            .queue(FlumeQueueFactory::default())
            .handler(probe.handler("jobs", "jobs", |_| Ack::Ack).workers(2))
            .build()
            .await
            .expect("build second system");
        bus.wait_idle(WAIT).await.expect("second system idle");
        let finished: HashSet<String> = first.finished().into_iter().collect();
        let replayed: Vec<String> = probe.seen().into_iter().map(|s| s.id).collect();
        let replayed_set: HashSet<String> = replayed.iter().cloned().collect();
        assert_eq!(
            replayed.len(),
            replayed_set.len(),
            "each replayed message once"
        );
        for id in &sent {
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

/// Sends, through `bus`, a [`ShutdownCommand`] on `_system.shutdown` asking every node that
/// handles it to drain for up to 5 s (reason `deploy`), as an operator's tool would.
pub async fn send_drain_command(bus: &EventBus) {
    let command = ShutdownCommand {
        strategy: ShutdownStrategy::Drain {
            timeout: std::time::Duration::from_secs(5),
        },
        reason: Some("deploy".into()),
    };
    bus.send(SHUTDOWN, EMessage::json(SHUTDOWN, &command).unwrap())
        .await
        .unwrap();
}
