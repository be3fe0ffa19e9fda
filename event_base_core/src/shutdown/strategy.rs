//! How a system stops: [`ShutdownStrategy`], and what it did: [`ShutdownReport`].
//!
//! No strategy loses a message the WAL holds. Whatever is not finished when the workers stop
//! stays `Pending` (queued, or waiting for a retry or its `deliver_at`) or `Processing` (a
//! handler was cancelled mid-message) in the WAL and is delivered again by the next system
//! started on the same WAL. Stopping early only means redelivery later.
//!
//! | strategy | new sends | queued messages | in-flight messages | ends |
//! |---|---|---|---|---|
//! | `Force` | refused | left in the WAL | cancelled now, left `Processing` | at once |
//! | `TwoStage { poll_interval, force_timeout }` | refused | left in the WAL | finished, until `force_timeout`; then cancelled | when every worker stopped, or at `force_timeout` |
//! | `Timeout { total }` | refused | handled while time remains | finished while time remains; then cancelled | when nothing is in flight, or at `total` |
//! | `Graceful { worker_name, poll_interval }` | still accepted | other workers go on | that worker finishes its current message and its inbox, then stops | when that worker stopped; the system keeps running |
//! | `StateBasedIdle` | refused | left in the WAL | each worker stops the moment it is idle; nothing is cancelled | when every worker stopped (no time limit: pair it with handler timeouts) |
//! | `Batched { batch_size, interval }` | refused | handled by the workers not yet stopped | each group finishes its current messages | groups of `batch_size` workers stopped every `interval` |
//! | `Drain { timeout }` | refused | all handled, with every retry and delayed message due before the deadline | finished | when only messages due after the deadline remain (left in the WAL), or at `timeout` |
//!
//! Which to pick: `Drain` for a planned restart where the backlog is small; `TwoStage` to stop
//! quickly without cutting handlers off (the backlog waits in the WAL); `Force` when the
//! process must go now; `Timeout` to work through the backlog within a deadline; `Batched` to
//! shed load gradually; `StateBasedIdle` when no handler may ever be interrupted; `Graceful`
//! to take one worker out of a running system (scale down).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How to stop a system (or, with `Graceful`, one worker).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ShutdownStrategy {
    /// Ask every worker to stop after its current message; after `force_timeout`, cancel the
    /// ones still working. `poll_interval` is how often progress is logged.
    TwoStage {
        /// How often progress is reported while waiting (1 ms to
        /// [`MAX_WAIT`](crate::constant::MAX_WAIT); clamped into that range).
        poll_interval: Duration,
        /// When to cancel the workers still working. [`MAX_WAIT`](crate::constant::MAX_WAIT)
        /// (30 years) or more: never (no time limit, as `StateBasedIdle`).
        force_timeout: Duration,
    },
    /// Stop now. In-flight handlers are cancelled at their next `.await`; their messages stay
    /// `Processing` in the WAL and are redelivered on the next start.
    Force,
    /// Keep working (the backlog too) until nothing is in flight or `total` has passed, then
    /// cancel whatever is still running.
    Timeout {
        /// The whole time allowed; clamped to [`MAX_WAIT`](crate::constant::MAX_WAIT)
        /// (30 years, so in practice no limit).
        total: Duration,
    },
    /// Stop one worker, by name, once it is idle; the rest of the system keeps running.
    Graceful {
        /// The worker to stop (see `EventBus::workers`).
        worker_name: String,
        /// How often progress is reported while waiting (1 ms to
        /// [`MAX_WAIT`](crate::constant::MAX_WAIT); clamped into that range).
        poll_interval: Duration,
    },
    /// Stop each worker as soon as it is idle; no time limit, so no handler is cancelled
    /// (unless its handler sets a `shutdown_timeout`).
    StateBasedIdle,
    /// Stop workers `batch_size` at a time, `interval` apart, each after its current message.
    Batched {
        /// Workers per group.
        batch_size: usize,
        /// Pause between groups; clamped to [`MAX_WAIT`](crate::constant::MAX_WAIT).
        interval: Duration,
    },
    /// Stop accepting, finish everything queued and due (retries included), then stop. After
    /// `timeout` the rest is left in the WAL, as with `Force`. On queues other processes
    /// share (Redis), "queued" is what this process holds: it stops claiming from them at
    /// once, and leaves what they still hold to the other nodes (or its next start).
    Drain {
        /// Longest time to wait for the backlog; clamped to
        /// [`MAX_WAIT`](crate::constant::MAX_WAIT) (30 years, so in practice no limit).
        timeout: Duration,
    },
}

impl ShutdownStrategy {
    /// A short name for logs and reports.
    pub fn name(&self) -> &'static str {
        match self {
            ShutdownStrategy::TwoStage { .. } => "two_stage",
            ShutdownStrategy::Force => "force",
            ShutdownStrategy::Timeout { .. } => "timeout",
            ShutdownStrategy::Graceful { .. } => "graceful",
            ShutdownStrategy::StateBasedIdle => "state_based_idle",
            ShutdownStrategy::Batched { .. } => "batched",
            ShutdownStrategy::Drain { .. } => "drain",
        }
    }
}

/// What happened to one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum WorkerOutcome {
    /// It stopped on its own: idle, or after finishing its current message.
    Completed,
    /// It was cancelled mid-message without being waited for (`Force`).
    Forced,
    /// It was asked to stop but was still working when the time ran out, and was cancelled.
    TimedOut,
    /// It was not asked to stop (`Graceful` on another worker).
    Running,
}

/// One worker's line in a [`ShutdownReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WorkerShutdown {
    /// Worker name.
    pub name: String,
    /// Its topic.
    pub topic: String,
    /// What happened.
    pub outcome: WorkerOutcome,
    /// The message it was handling when it was cancelled, if any.
    pub interrupted: Option<String>,
}

/// What a shutdown did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// The strategy's name.
    pub strategy: String,
    /// Whether every accepted message reached a final state before the workers stopped, and
    /// the WAL's final flush succeeded (so none of them comes back at the next start).
    pub drained: bool,
    /// Messages left `Pending`/`Processing` in the WAL for the next start. Only the user's
    /// count: the bus's own announcements on `_system.` topics still in flight at the end
    /// (the `Left` of each worker the shutdown stopped, shutdown acks) do not.
    pub left_for_replay: u64,
    /// How long the shutdown took.
    pub elapsed: Duration,
    /// Per worker, what happened (for `Graceful`: the stopped worker first, then the others
    /// as `Running`; `left_for_replay` is then 0, since the system keeps running).
    pub workers: Vec<WorkerShutdown>,
    /// The error of the WAL's final flush, if it failed: records written since the last
    /// successful sync (completions, say) may not be on disk, so messages this shutdown
    /// finished can be delivered again by the next system. `None` when the flush succeeded.
    /// `Drain`, which promises a clean end, returns [`CoreError::ShutdownFlush`] with this
    /// report instead of `Ok`.
    ///
    /// [`CoreError::ShutdownFlush`]: crate::CoreError::ShutdownFlush
    #[serde(default)]
    pub wal_flush_error: Option<String>,
}

impl ShutdownReport {
    /// The line of one worker.
    pub fn worker(&self, name: &str) -> Option<&WorkerShutdown> {
        self.workers.iter().find(|w| w.name == name)
    }
}

/// The payload of a message on `_system.shutdown` (JSON): asks the system to shut down.
///
/// ```
/// use event_base_core::{ShutdownCommand, ShutdownStrategy};
/// use std::time::Duration;
/// let cmd = ShutdownCommand {
///     strategy: ShutdownStrategy::Drain { timeout: Duration::from_secs(5) },
///     reason: Some("deploy".into()),
/// };
/// let bytes = serde_json::to_vec(&cmd).unwrap();
/// # let _ = bytes;
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownCommand {
    /// How to stop.
    pub strategy: ShutdownStrategy,
    /// Why (logged).
    pub reason: Option<String>,
}

/// What is announced for each worker on `_system.shutdown_ack` (JSON) once the workers have
/// stopped; the bus's own workers hand the acks out (for up to 2 s) before they stop too.
/// With a queue backend shared by several processes (Redis), the acks of every node reach
/// the subscribers of every node that is still running (see the shutdown guide).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ShutdownAck {
    /// The node (process) the worker ran on: its [`node_name`](crate::node_name), or the
    /// bus's own ([`EventBusBuilder::node_name`](crate::EventBusBuilder::node_name)).
    /// Empty in an ack from a version that did not send it.
    #[serde(default)]
    pub node: String,
    /// Worker name.
    pub worker: String,
    /// Its topic.
    pub topic: String,
    /// What happened to it.
    pub outcome: WorkerOutcome,
}
