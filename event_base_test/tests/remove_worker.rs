//! `EventBus::remove_worker` takes one worker out of a running bus: it finishes the message in
//! hand (not cancelled, not delivered twice), takes nothing new, and stops, while the other
//! workers go on delivering and the bus goes on accepting.

use event_base::{Ack, CoreError, WorkerOutcome, WorkerStatus};
use event_base_test::{Gate, Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_worker_finishes_its_message_and_takes_nothing_new() {
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = event_base::builder()
        .handler(
            probe
                .gated_handler("h", "orders", &gate, |_| Ack::Ack)
                .workers(2),
        )
        .build()
        .await
        .unwrap();
    let first = bus.send("orders", "held").await.unwrap();
    probe.wait_for(1, WAIT).await;
    let holder = |id: &str| {
        bus.registry()
            .list()
            .into_iter()
            .find(|w| w.current_message.as_deref() == Some(id))
            .map(|w| w.name)
    };
    let removed = holder(&first).expect("a worker holds the message");
    let other = if removed == "h-0" { "h-1" } else { "h-0" };

    let removal = {
        let bus = bus.clone();
        let name = removed.clone();
        tokio::spawn(async move { bus.remove_worker(&name).await })
    };
    // While the removed worker still holds its message, the bus accepts and delivers the
    // rest with the other worker.
    let mut later = Vec::new();
    for _ in 0..10 {
        later.push(bus.send("orders", "later").await.unwrap().to_string());
    }
    gate.release(later.iter().cloned());
    probe
        .wait_until("the other worker's deliveries", WAIT, |seen| {
            later.iter().all(|id| seen.iter().any(|s| &s.id == id))
        })
        .await;
    assert_eq!(holder(&first).as_deref(), Some(removed.as_str()));
    assert!(!removal.is_finished(), "the removal waits for the message");

    gate.open();
    let report = removal.await.unwrap().unwrap();
    let line = report.worker(&removed).expect("the removed worker's line");
    assert_eq!(line.outcome, WorkerOutcome::Completed, "{report:?}");
    assert_eq!(line.interrupted, None);
    assert_eq!(
        report.worker(other).map(|w| w.outcome),
        Some(WorkerOutcome::Running)
    );
    assert_eq!(probe.count_of(&first), 1, "finished once, not redelivered");
    assert!(probe.finished().contains(&first.to_string()));
    assert_eq!(
        bus.registry().get(&removed).map(|w| w.status),
        Some(WorkerStatus::Stopped)
    );
    assert_eq!(bus.workers("orders"), vec![other.to_owned()]);
    assert!(bus.is_accepting());

    // From now on everything goes to the other worker.
    for _ in 0..10 {
        bus.send("orders", "after").await.unwrap();
    }
    bus.wait_idle(WAIT).await.unwrap();
    let m = bus.metrics();
    assert_eq!(m.worker(&removed).map(|w| w.handled), Some(1));
    assert_eq!(m.worker(other).map(|w| w.handled), Some(20));
    assert_eq!(probe.count(), 21);

    // A worker that is gone, or never was, is a typed error.
    for name in [removed.as_str(), "nobody-3"] {
        let err = bus.remove_worker(name).await.unwrap_err();
        assert!(
            matches!(&err, CoreError::UnknownWorker { worker, .. } if worker == name),
            "{err:?}"
        );
    }
}
