//! Carries out a [`ShutdownStrategy`] (see the table in [`crate::shutdown::strategy`]).
//!
//! Order of events for the strategies that stop the whole system:
//!
//! 1. sends are refused (`CoreError::SystemShutdown`);
//! 2. the user's workers are stopped as the strategy says: asked to stop (they finish their
//!    current message and their inbox, take nothing new, and end), or cancelled;
//! 3. one [`ShutdownAck`] per worker is published on `_system.shutdown_ack`, and the bus waits
//!    briefly for the bus's own system workers to hand them out;
//! 4. the audit records so far are handed to the audit writers and flushed; every remaining
//!    task (routers, scheduler, monitor, system workers) is cancelled, the WAL flushed, and
//!    the global default uninstalled if it was this system.
//!
//! Waiting is done on join handles, timers and the in-flight counter's notifications; nothing
//! polls. `poll_interval` only sets how often progress is logged. A handler's
//! `shutdown_timeout` caps how long any strategy waits for each of its workers; past it the
//! worker is cancelled and reported as timed out.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::bus::global;
use crate::bus::tasks::BusTasks;
use crate::constant::SHUTDOWN_ACK;
use crate::error::CoreError;
use crate::shutdown::strategy::{
    ShutdownAck, ShutdownReport, ShutdownStrategy, WorkerOutcome, WorkerShutdown,
};
use crate::worker::registry::{WorkerState, WorkerStatus};

/// How long the bus waits for its own workers to hand out the shutdown acks.
const ACK_GRACE: Duration = Duration::from_secs(2);

pub(crate) async fn shutdown(
    tasks: &BusTasks,
    strategy: ShutdownStrategy,
) -> Result<ShutdownReport, CoreError> {
    let started = Instant::now();
    if let ShutdownStrategy::Graceful {
        worker_name,
        poll_interval,
    } = &strategy
    {
        return graceful(tasks, worker_name, *poll_interval, started).await;
    }
    let shared = &tasks.shared;
    shared.accepting.store(false, Ordering::Release);
    tracing::info!(
        strategy = strategy.name(),
        in_flight = shared.in_flight.get(),
        "shutting down"
    );

    let user: Vec<Arc<WorkerState>> = shared
        .registry
        .states()
        .into_iter()
        .filter(|s| {
            !s.topic.is_system()
                && !matches!(s.status(), WorkerStatus::Stopped | WorkerStatus::Dead)
        })
        .collect();
    let mut outcomes: HashMap<String, (WorkerOutcome, Option<Uuid>)> = HashMap::new();

    match &strategy {
        ShutdownStrategy::Force => {
            for w in &user {
                let interrupted = w.current_id();
                let outcome = if interrupted.is_some() {
                    WorkerOutcome::Forced
                } else {
                    WorkerOutcome::Completed
                };
                if let Some(h) = tasks.take_worker(&w.name) {
                    h.abort();
                    let _ = h.await;
                }
                outcomes.insert(w.name.clone(), (outcome, interrupted));
            }
        }
        ShutdownStrategy::TwoStage {
            poll_interval,
            force_timeout,
        } => {
            request_stop(&user);
            stop_and_wait(
                tasks,
                &user,
                Some(started + *force_timeout),
                *poll_interval,
                &mut outcomes,
            )
            .await;
        }
        ShutdownStrategy::Timeout { total } => {
            let deadline = started + *total;
            shared.in_flight.wait_until(|n, _| n == 0, deadline).await;
            request_stop(&user);
            stop_and_wait(
                tasks,
                &user,
                Some(deadline),
                Duration::from_secs(1),
                &mut outcomes,
            )
            .await;
        }
        ShutdownStrategy::StateBasedIdle => {
            request_stop(&user);
            stop_and_wait(tasks, &user, None, Duration::from_secs(1), &mut outcomes).await;
        }
        ShutdownStrategy::Batched {
            batch_size,
            interval,
        } => {
            let groups: Vec<&[Arc<WorkerState>]> = user.chunks((*batch_size).max(1)).collect();
            let last = groups.len().saturating_sub(1);
            for (i, group) in groups.into_iter().enumerate() {
                request_stop(group);
                stop_and_wait(tasks, group, None, Duration::from_secs(1), &mut outcomes).await;
                tracing::info!(
                    stopped = group.len(),
                    "shutdown: a batch of workers stopped"
                );
                if i < last {
                    tokio::time::sleep(*interval).await;
                }
            }
        }
        ShutdownStrategy::Drain { timeout } => {
            let deadline = started + *timeout;
            // Everything queued and due before the deadline (retries in backoff included):
            // only messages whose timer fires after it may remain.
            let next_due = shared.scheduler.next_due();
            shared
                .in_flight
                .wait_until(
                    |n, timers| n == 0 || (n <= timers && next_due.all_after(timers, deadline)),
                    deadline,
                )
                .await;
            request_stop(&user);
            stop_and_wait(
                tasks,
                &user,
                Some(deadline.max(Instant::now())),
                Duration::from_secs(1),
                &mut outcomes,
            )
            .await;
        }
        ShutdownStrategy::Graceful { .. } => {}
    }

    // Acks, handed out by the bus's own workers before they stop too.
    let before = shared.in_flight.get();
    let mut acks = 0;
    for w in &user {
        let outcome = outcomes
            .get(&w.name)
            .map_or(WorkerOutcome::Completed, |o| o.0);
        if shared.topics.contains_key(SHUTDOWN_ACK) {
            shared
                .announce(
                    SHUTDOWN_ACK,
                    &ShutdownAck {
                        worker: w.name.clone(),
                        topic: w.topic.0.clone(),
                        outcome,
                    },
                )
                .await;
            acks += 1;
        }
    }
    if acks > 0 {
        shared
            .in_flight
            .wait_until(|n, _| n <= before, Instant::now() + ACK_GRACE)
            .await;
    }

    // Hand every audit record to the writers before their feeder is cancelled.
    shared.audit.flush().await;
    tasks.abort_all().await;
    for s in shared.registry.states() {
        if s.status() != WorkerStatus::Dead {
            s.set_status(WorkerStatus::Stopped);
        }
    }
    if let Err(e) = shared.wal.flush().await {
        tracing::error!(error = %e, "WAL flush at shutdown failed");
    }
    global::uninstall(&tasks.shared);
    let left = shared.in_flight.get();
    let report = ShutdownReport {
        strategy: strategy.name().to_owned(),
        drained: left == 0,
        left_for_replay: left,
        elapsed: started.elapsed(),
        workers: user
            .iter()
            .map(|w| {
                let (outcome, interrupted) = outcomes
                    .get(&w.name)
                    .copied()
                    .unwrap_or((WorkerOutcome::Completed, None));
                WorkerShutdown {
                    name: w.name.clone(),
                    topic: w.topic.0.clone(),
                    outcome,
                    interrupted,
                }
            })
            .collect(),
    };
    tracing::info!(strategy = %report.strategy, left_for_replay = report.left_for_replay, elapsed = ?report.elapsed, "shutdown complete");
    Ok(report)
}

fn request_stop(workers: &[Arc<WorkerState>]) {
    for w in workers {
        w.set_status_if_idle_stopping();
        w.request_stop();
    }
}

/// Waits for the workers to end, until `deadline` (if any, and each worker's handler
/// `shutdown_timeout`, counted from now for all of them alike); cancels the rest. A worker
/// cancelled in the middle of a message is `TimedOut`; one cancelled while idle has lost
/// nothing and is `Completed`. When the system keeps running (`Graceful`), the message a
/// cancelled worker held is delivered again to another worker at once.
async fn stop_and_wait(
    tasks: &BusTasks,
    workers: &[Arc<WorkerState>],
    deadline: Option<Instant>,
    poll_interval: Duration,
    outcomes: &mut HashMap<String, (WorkerOutcome, Option<Uuid>)>,
) {
    let poll_interval = poll_interval.max(Duration::from_millis(1));
    let now = Instant::now();
    let deadlines: Vec<Option<Instant>> = workers
        .iter()
        .map(|w| {
            let own = tasks
                .handlers
                .get(&w.handler)
                .and_then(|h| h.shutdown_timeout)
                .map(|t| now + t);
            match (deadline, own) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        })
        .collect();
    for (w, deadline) in workers.iter().zip(deadlines) {
        let Some(mut handle) = tasks.take_worker(&w.name) else {
            outcomes.insert(w.name.clone(), (WorkerOutcome::Completed, None));
            continue;
        };
        loop {
            let tick = Instant::now() + poll_interval;
            let until = deadline.map_or(tick, |d| d.min(tick));
            match tokio::time::timeout_at(until, &mut handle).await {
                Ok(_) => {
                    outcomes.insert(w.name.clone(), (WorkerOutcome::Completed, None));
                    break;
                }
                Err(_) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    handle.abort();
                    let _ = handle.await;
                    let job = w.take_current();
                    let interrupted = job.as_ref().map(|j| j.message.id);
                    if let Some(slot) = tasks
                        .shared
                        .topics
                        .get(&w.topic)
                        .and_then(|e| e.slot(w.index))
                    {
                        slot.running.store(false, Ordering::Release);
                    }
                    w.set_status(WorkerStatus::Stopped);
                    if let Some(job) = job {
                        tracing::warn!(worker = %w.name, id = %job.message.id, "worker did not stop in time; cancelled mid-message");
                        if tasks.shared.is_accepting() {
                            crate::worker::monitor::redeliver(&tasks, w, job).await;
                        }
                        outcomes.insert(w.name.clone(), (WorkerOutcome::TimedOut, interrupted));
                    } else {
                        outcomes.insert(w.name.clone(), (WorkerOutcome::Completed, None));
                    }
                    break;
                }
                Err(_) => {
                    tracing::info!(worker = %w.name, current = ?w.current_id(), "shutdown: waiting for worker to finish");
                }
            }
        }
    }
}

/// Stops one worker once it is idle; the system keeps running.
async fn graceful(
    tasks: &BusTasks,
    name: &str,
    poll_interval: Duration,
    started: Instant,
) -> Result<ShutdownReport, CoreError> {
    let shared = &tasks.shared;
    let state = shared
        .registry
        .state(name)
        .filter(|s| !matches!(s.status(), WorkerStatus::Stopped | WorkerStatus::Dead))
        .ok_or_else(|| CoreError::UnknownWorker {
            topic: "*".into(),
            worker: name.to_owned(),
        })?;
    if let Some(slot) = shared
        .topics
        .get(&state.topic)
        .and_then(|e| e.slot(state.index))
    {
        slot.running.store(false, Ordering::Release);
    }
    let one = [state.clone()];
    request_stop(&one);
    let mut outcomes = HashMap::new();
    stop_and_wait(tasks, &one, None, poll_interval, &mut outcomes).await;
    let (outcome, interrupted) = outcomes
        .get(&state.name)
        .copied()
        .unwrap_or((WorkerOutcome::Completed, None));
    shared
        .announce(
            SHUTDOWN_ACK,
            &ShutdownAck {
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
    for other in shared.registry.states() {
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
        drained: shared.in_flight.get() == 0,
        left_for_replay: 0,
        elapsed: started.elapsed(),
        workers,
    })
}
