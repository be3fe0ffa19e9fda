//! Carries out a [`ShutdownStrategy`] (see the table in [`crate::shutdown::strategy`]).
//!
//! Order of events for the strategies that stop the whole system:
//!
//! 1. sends are refused (`CoreError::SystemShutdown`), and the routers of the user's
//!    handlers on queues shared with other processes stop claiming (`Drain` and `Timeout`
//!    then wait for what this process holds, not for what those queues still hold);
//! 2. the user's workers are stopped as the strategy says: asked to stop (they finish their
//!    current message and their inbox, take nothing new, and end), or cancelled;
//! 3. one [`ShutdownAck`] per worker is published on `_system.shutdown_ack`, and the bus waits
//!    briefly for the bus's own system workers to hand them out (with a shared backend and a
//!    subscriber here, for [`ACK_GRACE`], so the acks of other nodes reach it too);
//! 4. the audit records so far are handed to the audit writers and flushed; every remaining
//!    task (routers, scheduler, monitor, system workers) is cancelled, the WAL flushed, and
//!    the global default uninstalled if it was this system.
//!
//! Waiting is done on join handles, timers and the in-flight counter's notifications; nothing
//! polls. `poll_interval` only sets how often progress is logged. A handler's
//! `shutdown_timeout` caps how long any strategy waits for each of its workers; past it the
//! worker is cancelled and reported as timed out.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::bus::global;
use crate::bus::shared::BusShared;
use crate::bus::stop::graceful::graceful;
use crate::bus::stop::plan::{plan, Settle, ShutdownPlan, Stop};
use crate::bus::stop::worker_stop::{stop_workers, Outcomes};
use crate::bus::tasks::BusTasks;
use crate::constant::SHUTDOWN_ACK;
use crate::error::CoreError;
use crate::shutdown::strategy::{
    ShutdownAck, ShutdownReport, ShutdownStrategy, WorkerOutcome, WorkerShutdown,
};
use crate::worker::registry::{WorkerState, WorkerStatus};

/// How long the bus waits for its own workers to hand out the shutdown acks.
const ACK_GRACE: Duration = Duration::from_secs(2);

/// Carries out `strategy` on the bus of `tasks`.
///
/// One shutdown runs at a time: a second caller waits for the first, and once the bus has
/// stopped every caller gets that shutdown's report. A caller dropped part-way leaves what it
/// had not finished to the next one (workers it was waiting for are still there to stop).
pub(crate) async fn shutdown(
    tasks: &BusTasks,
    strategy: ShutdownStrategy,
) -> Result<ShutdownReport, CoreError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(CoreError::NoRuntime);
    }
    let mut stopped = tasks.stopped.lock().await;
    if let Some(report) = stopped.as_ref() {
        return Ok(report.clone());
    }
    let started = Instant::now();
    match plan(&strategy, started) {
        ShutdownPlan::OneWorker {
            name,
            poll_interval,
        } => graceful(tasks, &name, poll_interval, started).await,
        ShutdownPlan::Bus { settle, stop } => {
            let report = stop_bus(tasks, strategy.name(), settle, stop, started).await;
            *stopped = Some(report.clone());
            // `Drain` promises a clean end; a log that could not be flushed breaks it.
            match (&strategy, &report.wal_flush_error) {
                (ShutdownStrategy::Drain { .. }, Some(error)) => Err(CoreError::ShutdownFlush {
                    error: error.clone(),
                    report: Box::new(report),
                }),
                _ => Ok(report),
            }
        }
    }
}

/// Stops the whole bus: refuse sends, settle, stop the workers, hand out the acks, end.
async fn stop_bus(
    tasks: &BusTasks,
    strategy: &str,
    settle: Settle,
    stop: Stop,
    started: Instant,
) -> ShutdownReport {
    let shared = &tasks.shared;
    shared.delivery.stop_accepting();
    tracing::info!(target: crate::constant::target::SHUTDOWN,
        strategy,
        in_flight = shared.delivery.in_flight.get(),
        "shutting down"
    );
    let user: Vec<Arc<WorkerState>> = shared
        .announcer
        .registry
        .states()
        .into_iter()
        .filter(|s| {
            !s.topic.is_system()
                && !matches!(s.status(), WorkerStatus::Stopped | WorkerStatus::Dead)
        })
        .collect();
    wait_to_settle(shared, settle).await;
    let outcomes = stop_workers(tasks, &user, stop).await;
    announce_acks(shared, &user, &outcomes).await;
    // Stopped, not dead: whoever evicts this process later does not announce its workers so.
    shared.announcer.unlist_workers().await;
    let wal_flush_error = end_tasks(tasks).await;
    let left = user_messages_left(shared);
    let report = ShutdownReport {
        strategy: strategy.to_owned(),
        drained: left == 0 && wal_flush_error.is_none(),
        wal_flush_error,
        left_for_replay: left,
        elapsed: started.elapsed(),
        workers: user
            .iter()
            .map(|w| {
                let (outcome, interrupted) = outcomes
                    .get(&w.name)
                    .cloned()
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
    tracing::info!(target: crate::constant::target::SHUTDOWN, strategy = %report.strategy, left_for_replay = report.left_for_replay, elapsed = ?report.elapsed, "shutdown complete");
    report
}

/// The user's messages still in flight once every task has ended: what the report calls
/// `left_for_replay`. The bus's own announcements on `_system.` topics are not counted:
/// the `Left` of each worker a shutdown stops and the shutdown acks are published while it
/// stops the system workers that would hand them out, so some are always still in flight at
/// the end, and they are no work of the user's left undone.
fn user_messages_left(shared: &BusShared) -> u64 {
    // A shared queue's messages count where they are claimed, not in the topic's counters.
    let system: u64 = shared
        .delivery
        .topics
        .iter()
        .filter(|(topic, route)| topic.is_system() && !route.claim_counted)
        .map(|(_, route)| route.counters().in_flight())
        .sum();
    shared.delivery.in_flight.get().saturating_sub(system)
}

/// Waits, before any worker is asked to stop, for what the plan's [`Settle`] says: first for
/// the routers of shared queues to stop claiming, then for what this process holds.
async fn wait_to_settle(shared: &BusShared, settle: Settle) {
    match settle {
        Settle::Nothing => {}
        Settle::Idle { deadline } => {
            claims_stopped(shared, deadline).await;
            shared
                .delivery
                .in_flight
                .wait_until(|n, _| n == 0, deadline)
                .await;
        }
        Settle::DueBefore { deadline } => {
            claims_stopped(shared, deadline).await;
            let next_due = shared.delivery.scheduler.next_due();
            shared
                .delivery
                .in_flight
                .wait_until(
                    |n, timers| n == 0 || (n <= timers && next_due.all_after(timers, deadline)),
                    deadline,
                )
                .await;
        }
    }
}

/// With a shared queue backend: until the routers of this node's handlers on shared queues
/// have stopped claiming, or `deadline`. Each stops as the bus stops accepting, and ends once
/// it has routed what its last claims returned (counted in flight from then on: the wait for
/// what this process holds that follows covers them). What those queues still hold is not
/// waited for: it is the other nodes' (or this node's next start's), never this drain's.
async fn claims_stopped(shared: &BusShared, deadline: Instant) {
    if tokio::time::timeout_at(deadline, shared.delivery.stopping.claimers.closed())
        .await
        .is_err()
    {
        tracing::info!(target: crate::constant::target::SHUTDOWN, "a router of a shared queue was still routing its last claim at the deadline; what it holds is given back");
    }
}

/// One [`ShutdownAck`] per worker on `_system.shutdown_ack`, handed out by the bus's own
/// workers (for up to [`ACK_GRACE`]) before they stop too.
///
/// With a shared backend the acks also go to the subscribers other processes run, and a
/// subscriber here gets theirs while the bus's own workers run: so a bus that subscribes
/// keeps them running until [`ACK_GRACE`] after its own acks went out, for the acks of the
/// nodes that stop at the same time (a shutdown command stops every node). It does not
/// wait for particular nodes: it does not know which nodes there are, and a node with no
/// worker of its own sends no ack.
async fn announce_acks(shared: &BusShared, user: &[Arc<WorkerState>], outcomes: &Outcomes) {
    // A node's cache of the registry may be older than a subscriber elsewhere: ask.
    shared.delivery.look_up_subscribers(&[SHUTDOWN_ACK]).await;
    let subscribed_here = shared.delivery.topics.contains_key(SHUTDOWN_ACK);
    let others = shared.delivery.remote.is_some() && subscribed_here;
    if !shared.delivery.subscribed(SHUTDOWN_ACK) {
        return;
    }
    let began = Instant::now();
    let before = shared.delivery.in_flight.get();
    for w in user {
        let outcome = outcomes
            .get(&w.name)
            .map_or(WorkerOutcome::Completed, |o| o.0);
        let ack = ShutdownAck {
            node: shared.announcer.node.name.to_string(),
            worker: w.name.clone(),
            topic: w.topic.0.clone(),
            outcome,
        };
        shared.delivery.announce(SHUTDOWN_ACK, &ack).await;
    }
    if !user.is_empty() && subscribed_here {
        shared
            .delivery
            .in_flight
            .wait_until(|n, _| n <= before, began + ACK_GRACE)
            .await;
    }
    if others {
        // The other nodes' acks come from Redis, with nothing here to count or await.
        tokio::time::sleep_until(began + ACK_GRACE).await;
    }
}

/// The end of a bus: audit records handed to the writers, every task cancelled, the WAL
/// flushed, and the global default uninstalled if it was this bus. Returns the flush's error.
async fn end_tasks(tasks: &BusTasks) -> Option<String> {
    let shared = &tasks.shared;
    // Hand every audit record to the writers before their feeder is cancelled.
    shared.delivery.audit.flush().await;
    tasks.abort_all().await;
    for s in shared.announcer.registry.states() {
        if s.status() != WorkerStatus::Dead {
            s.set_status(WorkerStatus::Stopped);
        }
    }
    let flushed = shared.delivery.wal.flush().await;
    if let Err(e) = &flushed {
        tracing::error!(target: crate::constant::target::SHUTDOWN, error = %e, "WAL flush at shutdown failed; messages finished since the last sync may be delivered again");
    }
    global::uninstall(&tasks.shared);
    flushed.err().map(|e| e.to_string())
}
