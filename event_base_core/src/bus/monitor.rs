//! The monitor: samples every worker's liveness once per heartbeat interval, publishes the
//! samples on `_system.worker_heartbeat`, and replaces workers stuck past the stale limit.
//!
//! A stuck worker is declared dead: its current job is taken from it (so that, should its
//! handler ever return, the worker drops the outcome and ends), its task is cancelled, the job
//! is delivered again (to any worker of the topic; a copy that only this worker could take
//! becomes a dead letter naming it), and a fresh worker of the same handler takes its place.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::bus::tasks::BusTasks;
use crate::constant::WORKER_HEARTBEAT;
use crate::delivery::subscription::job::Target;
use crate::message::ack::DeadReason;
use crate::message::delivery_mode::DeliveryMode;
use crate::worker::registry::{WorkerInfo, WorkerState, WorkerStatus};

pub(crate) async fn run_monitor(tasks: Weak<BusTasks>, interval: Duration, stale_after: Duration) {
    let mut ticker = tokio::time::interval(crate::clock::period(interval));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Per worker: the processed count last seen, and since when it has not moved.
    let mut progress: HashMap<String, (u64, Instant)> = HashMap::new();
    loop {
        ticker.tick().await;
        let Some(tasks) = tasks.upgrade() else {
            return;
        };
        let now = Instant::now();
        let mut beats: Vec<WorkerInfo> = Vec::new();
        let states = tasks.shared.announcer.registry.states();
        // Forget the workers the registry no longer lists (pruned once ended).
        let listed: HashSet<&str> = states.iter().map(|s| s.name.as_str()).collect();
        progress.retain(|name, _| listed.contains(name.as_str()));
        for state in states {
            if !tasks
                .shared
                .delivery
                .accepting
                .load(std::sync::atomic::Ordering::Acquire)
            {
                // Shutting down: the coordinator decides what happens to workers now.
                break;
            }
            let processed = state.processed();
            let seen = progress
                .entry(state.name.clone())
                .or_insert((processed, now));
            match state.status() {
                WorkerStatus::Idle | WorkerStatus::Stopping => {
                    *seen = (processed, now);
                    state.beat();
                }
                WorkerStatus::Working if seen.0 != processed => {
                    *seen = (processed, now);
                    state.beat();
                }
                WorkerStatus::Working => {
                    let limit = stale_limit(&tasks, &state, interval, stale_after);
                    if now.duration_since(seen.1) >= limit {
                        declare_dead(&tasks, &state).await;
                        progress.remove(&state.name);
                        continue;
                    }
                }
                WorkerStatus::Stopped | WorkerStatus::Dead => {
                    progress.remove(&state.name);
                    continue;
                }
            }
            beats.push(state.info());
        }
        if tasks.shared.delivery.topics.contains_key(WORKER_HEARTBEAT) && !beats.is_empty() {
            tasks
                .shared
                .delivery
                .announce(WORKER_HEARTBEAT, &beats)
                .await;
        }
    }
}

/// A handler with its own `timeout` is never declared dead before that timeout could fire.
fn stale_limit(
    tasks: &BusTasks,
    state: &WorkerState,
    interval: Duration,
    stale_after: Duration,
) -> Duration {
    let own = tasks
        .handlers
        .get(&state.handler)
        .and_then(|h| h.timeout)
        .map(|t| t.saturating_add(interval))
        .unwrap_or_default();
    stale_after.max(own)
}

async fn declare_dead(tasks: &Arc<BusTasks>, state: &Arc<WorkerState>) {
    let jobs = state.take_in_hand();
    let Some(first) = jobs.first() else {
        return; // it finished just now
    };
    let first_id = first.message.id.clone();
    let shared = &tasks.shared;
    state.set_status(WorkerStatus::Dead);
    tracing::error!(target: crate::constant::target::WORKER, worker = %state.name, topic = %state.topic, id = %first_id, messages = jobs.len(), "worker stuck past the stale limit: declared dead, its message is delivered again");
    let Some(entry) = shared.sub_of(state).cloned() else {
        return;
    };
    if let Some(slot) = entry.slot(state.index) {
        slot.running
            .store(false, std::sync::atomic::Ordering::Release);
    }
    if let Some(worker) = tasks.take_worker(&state.name) {
        worker.abort_now();
    }
    shared
        .announcer
        .announce_worker(crate::worker::registry::DiscoveryEvent::Dead, state)
        .await;
    for job in jobs {
        redeliver(tasks, state, job).await;
    }
    if let Some(runtime) = tasks.handlers.get(&state.handler).cloned() {
        match tasks.spawn_worker(&runtime) {
            Ok(new) => {
                tracing::info!(target: crate::constant::target::WORKER, worker = %new.name, replaces = %state.name, "replacement worker started");
                shared
                    .announcer
                    .announce_worker(crate::worker::registry::DiscoveryEvent::Joined, &new)
                    .await;
            }
            Err(e) => {
                tracing::error!(target: crate::constant::target::WORKER, error = %e, "could not start a replacement worker")
            }
        }
    }
}

/// Delivers again the job a worker lost (declared dead, or cancelled by a graceful stop).
/// It counts as a failed delivery: past the handler's retries it becomes a dead letter, so a
/// message that hangs every worker cannot circulate for ever. A copy that only that worker
/// could take (addressed to it, or its share of a broadcast) becomes a dead letter at once.
pub(crate) async fn redeliver(
    tasks: &BusTasks,
    state: &WorkerState,
    job: crate::delivery::subscription::job::Job,
) {
    let shared = &tasks.shared;
    let Some(entry) = shared.sub_of(state).cloned() else {
        return;
    };
    let pinned =
        job.message.to_worker.is_some() || job.message.delivery_mode == DeliveryMode::Broadcast;
    let max = tasks
        .handlers
        .get(&state.handler)
        .and_then(|h| h.retries)
        .unwrap_or(crate::constant::DEFAULT_MAX_RETRIES);
    if pinned || job.message.attempts > max {
        let reason = DeadReason::Other(format!(
            "worker `{}` stopped or died while handling it (delivery {})",
            state.name, job.message.attempts
        ));
        shared.delivery.dead_letter(&entry, &job, reason).await;
        return;
    }
    let mut next = (*job.message).clone();
    next.attempts = next.attempts.saturating_add(1);
    let next = Arc::new(next);
    if let Err(e) = shared.delivery.wal.retry(&next) {
        tracing::error!(target: crate::constant::target::DELIVERY, id = %next.id, error = %e, "could not record redelivery in the WAL");
    }
    entry.counters.retried();
    entry.push_detached(
        crate::delivery::subscription::job::Job {
            message: next,
            group: job.group,
            claim: job.claim,
            copies: job.copies,
        },
        Target::Any,
    );
}
