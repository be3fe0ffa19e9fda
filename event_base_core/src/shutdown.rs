//! How a system stops: [`ShutdownStrategy`] and the [`ShutdownReport`] it returns.
//!
//! No strategy loses a message the WAL holds: whatever is not finished when the workers stop
//! stays `Pending` or `Processing` in the WAL and is delivered again by the next system started
//! on the same WAL.
//!
//! | strategy | new sends | queued messages | in-flight messages |
//! |---|---|---|---|
//! | `Drain { timeout }` | refused with `SystemShutdown` | handled (until `timeout`) | finished (until `timeout`) |
//! | `Force` | refused | left in the WAL for replay | cancelled, left `Processing` for replay |

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How to stop a system.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShutdownStrategy {
    /// Stop accepting sends, finish everything accepted (including due retries), then stop.
    /// After `timeout` the rest is left in the WAL, as with `Force`.
    Drain {
        /// Longest time to wait for the backlog.
        timeout: Duration,
    },
    /// Stop now. In-flight handlers are cancelled at their next `.await`; their messages stay
    /// `Processing` in the WAL and are redelivered on the next start.
    Force,
}

/// What a shutdown did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownReport {
    /// Whether every accepted message reached a final state before the workers stopped.
    pub drained: bool,
    /// Messages left `Pending`/`Processing` in the WAL for the next start.
    pub left_for_replay: u64,
    /// How long the shutdown took.
    pub elapsed: Duration,
}
