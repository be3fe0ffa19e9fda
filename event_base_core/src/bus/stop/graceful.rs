//! `Graceful`: one worker taken out of a running bus (scale down). It finishes its current
//! message and its inbox, then stops; the rest of the bus keeps running and accepting.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::bus::stop::worker_stop::{request_stop, stop_and_wait, Outcomes};
use crate::bus::tasks::BusTasks;
use crate::constant::SHUTDOWN_ACK;
use crate::error::CoreError;
use crate::shutdown::strategy::{ShutdownAck, ShutdownReport, WorkerOutcome, WorkerShutdown};
use crate::worker::registry::WorkerStatus;

/// Stops one worker once it is idle; the system keeps running.
pub(super) async fn graceful(
    tasks: &BusTasks,
    name: &str,
    poll_interval: Duration,
    started: Instant,
) -> Result<ShutdownReport, CoreError> {
    let shared = &tasks.shared;
    let state = shared
        .announcer
        .registry
        .state(name)
        .filter(|s| !matches!(s.status(), WorkerStatus::Stopped | WorkerStatus::Dead))
        .ok_or_else(|| CoreError::UnknownWorker {
            topic: "*".into(),
            worker: name.to_owned(),
        })?;
    if let Some(slot) = shared.sub_of(&state).and_then(|e| e.slot(state.index)) {
        slot.running.store(false, Ordering::Release);
    }
    let one = [state.clone()];
    request_stop(&one);
    let mut outcomes = Outcomes::new();
    stop_and_wait(tasks, &one, None, poll_interval, &mut outcomes).await;
    let (outcome, interrupted) = outcomes
        .get(&state.name)
        .cloned()
        .unwrap_or((WorkerOutcome::Completed, None));
    shared
        .delivery
        .announce(
            SHUTDOWN_ACK,
            &ShutdownAck {
                node: shared.announcer.node.name.to_string(),
                worker: state.name.clone(),
                topic: state.topic.0.clone(),
                outcome,
            },
        )
        .await;
    let mut workers = vec![WorkerShutdown {
        name: state.name.clone(),
        topic: state.topic.0.clone(),
        outcome,
        interrupted,
    }];
    for other in shared.announcer.registry.states() {
        if other.name != state.name
            && !other.topic.is_system()
            && !matches!(other.status(), WorkerStatus::Stopped | WorkerStatus::Dead)
        {
            workers.push(WorkerShutdown {
                name: other.name.clone(),
                topic: other.topic.0.clone(),
                outcome: WorkerOutcome::Running,
                interrupted: None,
            });
        }
    }
    Ok(ShutdownReport {
        strategy: "graceful".into(),
        drained: shared.delivery.in_flight.get() == 0,
        left_for_replay: 0,
        elapsed: started.elapsed(),
        workers,
        // The system keeps running: no final flush.
        wal_flush_error: None,
    })
}
