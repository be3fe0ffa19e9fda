//! `Graceful`: one worker stops once it has finished its current message; the rest of the
//! system keeps running and takes the following messages.

use std::time::Duration;

use event_base::{CoreError, EMessage, ShutdownStrategy, WorkerOutcome};
use event_base_test::shutdown_scenario::Scenario;
use event_base_test::WAIT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_stops_and_the_others_go_on() {
    let s = Scenario::start(2, 2).await; // both workers mid-message
    let bus = s.bus.clone();
    let stopping = tokio::spawn(async move {
        bus.shutdown(ShutdownStrategy::Graceful {
            worker_name: "jobs-1".into(),
            poll_interval: Duration::from_millis(20),
        })
        .await
    });
    s.gate.open();
    let report = stopping.await.unwrap().unwrap();
    assert_eq!(
        report.worker("jobs-1").unwrap().outcome,
        WorkerOutcome::Completed
    );
    assert_eq!(
        report.worker("jobs-0").unwrap().outcome,
        WorkerOutcome::Running
    );
    assert_eq!(s.bus.workers("jobs"), vec!["jobs-0".to_owned()]);
    assert!(s.bus.is_accepting(), "the system keeps running");

    // New work goes to the remaining worker; the stopped one cannot be addressed.
    for _ in 0..10 {
        s.bus.send("jobs", b"more".to_vec()).await.unwrap();
    }
    let err = s
        .bus
        .send(
            "jobs",
            EMessage::standard("jobs", b"x".to_vec()).with_to_worker("jobs-1"),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, CoreError::UnknownWorker { .. }), "{err:?}");
    s.bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(s.probe.finished().len(), 12);

    // Scale back up.
    let added = s.bus.add_workers("jobs", 1).await.unwrap();
    assert_eq!(added, vec!["jobs-2".to_owned()]);
    assert_eq!(s.bus.workers("jobs").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_past_the_shutdown_timeout_cancels_and_redelivers() {
    use event_base::{Ack, EventBus, FlumeQueueFactory, MemoryWal};
    use event_base_test::{Gate, Probe};
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::default())
        .handler(
            probe
                .gated_handler("jobs", "jobs", &gate, |_| Ack::Ack)
                .workers(2)
                .shutdown_timeout(Duration::from_millis(100)),
        )
        .build()
        .await
        .unwrap();
    let id = bus.send("jobs", b"x".to_vec()).await.unwrap();
    probe.wait_for(1, WAIT).await;
    let holder = bus
        .registry()
        .list()
        .into_iter()
        .find(|w| w.current_message.as_deref() == Some(&*id))
        .unwrap()
        .name;
    let report = bus
        .shutdown(ShutdownStrategy::Graceful {
            worker_name: holder.clone(),
            poll_interval: Duration::from_millis(20),
        })
        .await
        .unwrap();
    let line = report.worker(&holder).unwrap();
    assert_eq!(
        (line.outcome, line.interrupted.clone()),
        (WorkerOutcome::TimedOut, Some(id.to_string()))
    );
    assert_eq!(
        bus.registry().get(&holder).unwrap().status,
        event_base::WorkerStatus::Stopped
    );
    // The other worker gets the message again.
    gate.open();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&id), 2);
    assert_eq!(probe.finished(), vec![id]);
}
