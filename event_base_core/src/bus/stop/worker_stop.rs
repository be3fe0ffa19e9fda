//! Stopping workers, the part every strategy shares: ask them to stop after their current
//! message, wait for each (up to a deadline and the handler's own `shutdown_timeout`), and
//! cancel the ones that do not stop in time.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::bus::stop::plan::Stop;
use crate::bus::tasks::BusTasks;
use crate::shutdown::strategy::WorkerOutcome;
use crate::worker::registry::{WorkerState, WorkerStatus};

/// Every outcome so far, by worker name, with the message a cancelled worker was handling.
pub(super) type Outcomes = HashMap<String, (WorkerOutcome, Option<String>)>;

/// Stops the user's workers as the plan's [`Stop`] says.
pub(super) async fn stop_workers(
    tasks: &BusTasks,
    user: &[Arc<WorkerState>],
    stop: Stop,
) -> Outcomes {
    let mut outcomes = Outcomes::new();
    match stop {
        Stop::Abort => {
            for w in user {
                let interrupted = w.current_id();
                let outcome = if interrupted.is_some() {
                    WorkerOutcome::Forced
                } else {
                    WorkerOutcome::Completed
                };
                if let Some(worker) = tasks.take_worker(&w.name) {
                    worker.abort().await;
                }
                outcomes.insert(w.name.clone(), (outcome, interrupted));
            }
        }
        Stop::Request {
            deadline,
            poll_interval,
            group,
            pause,
        } => {
            let groups: Vec<&[Arc<WorkerState>]> = user.chunks(group.max(1)).collect();
            let last = groups.len().saturating_sub(1);
            for (i, workers) in groups.into_iter().enumerate() {
                request_stop(workers);
                stop_and_wait(tasks, workers, deadline, poll_interval, &mut outcomes).await;
                if group != usize::MAX {
                    tracing::info!(target: crate::constant::target::SHUTDOWN,
                        stopped = workers.len(),
                        "shutdown: a batch of workers stopped"
                    );
                }
                if i < last && !pause.is_zero() {
                    tokio::time::sleep(pause.min(crate::constant::MAX_WAIT)).await;
                }
            }
        }
    }
    outcomes
}

pub(super) fn request_stop(workers: &[Arc<WorkerState>]) {
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
pub(super) async fn stop_and_wait(
    tasks: &BusTasks,
    workers: &[Arc<WorkerState>],
    deadline: Option<Instant>,
    poll_interval: Duration,
    outcomes: &mut Outcomes,
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
                .and_then(|t| crate::clock::deadline_after(now, t));
            match (deadline, own) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        })
        .collect();
    for (w, deadline) in workers.iter().zip(deadlines) {
        let Some(mut worker) = tasks.take_worker(&w.name) else {
            outcomes.insert(w.name.clone(), (WorkerOutcome::Completed, None));
            continue;
        };
        loop {
            let tick = crate::clock::instant_after(Instant::now(), poll_interval);
            let until = deadline.map_or(tick, |d| d.min(tick));
            match worker.wait_until(until).await {
                true => {
                    outcomes.insert(w.name.clone(), (WorkerOutcome::Completed, None));
                    break;
                }
                false if deadline.is_some_and(|d| Instant::now() >= d) => {
                    worker.abort().await;
                    let jobs = w.take_in_hand();
                    let interrupted = jobs.first().map(|j| j.message.id.clone());
                    if let Some(slot) = tasks.shared.sub_of(w).and_then(|e| e.slot(w.index)) {
                        slot.running.store(false, Ordering::Release);
                    }
                    w.set_status(WorkerStatus::Stopped);
                    if let Some(id) = &interrupted {
                        tracing::warn!(target: crate::constant::target::SHUTDOWN, worker = %w.name, %id, messages = jobs.len(), "worker did not stop in time; cancelled mid-message");
                        if tasks.shared.delivery.is_accepting() {
                            for job in jobs {
                                crate::bus::monitor::redeliver(tasks, w, job).await;
                            }
                        }
                        outcomes.insert(w.name.clone(), (WorkerOutcome::TimedOut, interrupted));
                    } else {
                        outcomes.insert(w.name.clone(), (WorkerOutcome::Completed, None));
                    }
                    break;
                }
                false => {
                    tracing::info!(target: crate::constant::target::SHUTDOWN, worker = %w.name, current = ?w.current_id(), "shutdown: waiting for worker to finish");
                }
            }
        }
    }
}
