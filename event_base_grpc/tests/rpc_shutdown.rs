//! Shutdown over gRPC with each of the seven strategies returns the bus's report; afterwards
//! reads still work and sends are UNAVAILABLE. AddWorkers and RemoveWorker scale a handler.

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ack, start, Probe};
use event_base_grpc::pb;
use pb::shutdown_request::Strategy;

fn secs(s: i64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: s,
        nanos: 0,
    })
}

async fn shut_down_with(strategy: Strategy, name: &str) {
    let probe = Probe::new();
    let s = start(vec![probe.handler("jobs", "jobs", ack).workers(2)]).await;
    for i in 0..3u8 {
        s.bus.send("jobs", vec![i]).await.unwrap();
    }
    s.bus.wait_idle(common::WAIT).await.unwrap();
    let mut c = s.admin().await;
    let report = c
        .shutdown(pb::ShutdownRequest {
            strategy: Some(strategy),
            reason: "test".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .report
        .unwrap();
    assert_eq!(report.strategy, name);
    // Every job was done: nothing is left, though the watch feed's handler may still hold
    // the announcements the workers made as they left (system messages, not counted).
    assert_eq!(report.left_for_replay, 0, "{name}: {report:?}");
    assert!(report.drained, "{name}: {report:?}");
    assert_eq!(
        s.bus.metrics().topic("jobs").unwrap().in_flight,
        0,
        "{name}: the jobs were done"
    );
    let workers: Vec<&str> = report.workers.iter().map(|w| w.name.as_str()).collect();
    assert!(
        workers.contains(&"jobs-0") && workers.contains(&"jobs-1"),
        "{workers:?}"
    );
    assert!(report
        .workers
        .iter()
        .filter(|w| w.topic == "jobs")
        .all(|w| w.outcome == pb::WorkerOutcome::Completed as i32
            || w.outcome == pb::WorkerOutcome::Forced as i32));
    assert!(!s.bus.is_accepting());

    // Reads go on; sends are refused as the bus refuses them.
    let status = c
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!status.accepting);
    let refused = c
        .publish(pb::PublishRequest {
            topic: "jobs".into(),
            message: Some(pb::OutgoingMessage::default()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{name}");
    assert!(
        refused.message().contains("shutting down"),
        "{}",
        refused.message()
    );
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stage() {
    shut_down_with(
        Strategy::TwoStage(pb::TwoStageStrategy {
            poll_interval: secs(1),
            force_timeout: secs(5),
        }),
        "two_stage",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force() {
    shut_down_with(Strategy::Force(pb::ForceStrategy {}), "force").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout() {
    shut_down_with(
        Strategy::Timeout(pb::TimeoutStrategy { total: secs(5) }),
        "timeout",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_based_idle() {
    shut_down_with(
        Strategy::StateBasedIdle(pb::StateBasedIdleStrategy {}),
        "state_based_idle",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched() {
    shut_down_with(
        Strategy::Batched(pb::BatchedStrategy {
            batch_size: 1,
            interval: Some(prost_types::Duration {
                seconds: 0,
                nanos: 10_000_000,
            }),
        }),
        "batched",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain() {
    shut_down_with(
        Strategy::Drain(pb::DrainStrategy { timeout: secs(5) }),
        "drain",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_stops_one_worker_and_the_bus_runs_on() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("jobs", "jobs", ack).workers(2)]).await;
    let mut c = s.admin().await;
    let report = c
        .shutdown(pb::ShutdownRequest {
            strategy: Some(Strategy::Graceful(pb::GracefulStrategy {
                worker_name: "jobs-1".into(),
                poll_interval: None,
            })),
            reason: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .report
        .unwrap();
    assert_eq!(report.strategy, "graceful");
    assert_eq!(report.workers[0].name, "jobs-1");
    assert_eq!(
        report.workers[0].outcome,
        pb::WorkerOutcome::Completed as i32
    );
    assert!(s.bus.is_accepting());
    assert_eq!(s.bus.workers("jobs"), ["jobs-0"]);

    let unknown = c
        .shutdown(pb::ShutdownRequest {
            strategy: Some(Strategy::Graceful(pb::GracefulStrategy {
                worker_name: "ghost-0".into(),
                poll_interval: None,
            })),
            reason: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    let unset = c
        .shutdown(pb::ShutdownRequest::default())
        .await
        .unwrap_err();
    assert_eq!(unset.code(), tonic::Code::InvalidArgument);
    assert!(s.bus.is_accepting(), "refused requests stop nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_and_remove_workers() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("jobs", "jobs", ack)]).await;
    let mut c = s.admin().await;
    let added = c
        .add_workers(pb::AddWorkersRequest {
            handler: "jobs".into(),
            count: 2,
        })
        .await
        .unwrap()
        .into_inner()
        .names;
    assert_eq!(added.len(), 2);
    let mut live = s.bus.workers("jobs");
    live.sort();
    let mut want = vec!["jobs-0".to_owned()];
    want.extend(added.iter().cloned());
    want.sort();
    assert_eq!(live, want);

    let report = c
        .remove_worker(pb::RemoveWorkerRequest {
            name: added[0].clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .report
        .unwrap();
    assert_eq!(report.workers[0].name, added[0]);
    assert!(!s.bus.workers("jobs").contains(&added[0]));

    let no_handler = c
        .add_workers(pb::AddWorkersRequest {
            handler: "nope".into(),
            count: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(no_handler.code(), tonic::Code::InvalidArgument);
    assert!(no_handler.message().contains("nope"));
    let zero = c
        .add_workers(pb::AddWorkersRequest {
            handler: "jobs".into(),
            count: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(zero.code(), tonic::Code::InvalidArgument);
    let ghost = c
        .remove_worker(pb::RemoveWorkerRequest {
            name: "ghost-0".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(ghost.code(), tonic::Code::NotFound);
}
