//! The audit types: [`AuditRecord`] (one start or finish of a delivery), [`AuditEvent`],
//! [`AuditOutcome`], and the [`AuditWriter`] contract with its [`AuditError`]. Plain data,
//! shared by the recorders (stage, ring) and the readers (log, publisher, writers).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::message::ack::DeadReason;

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuditEvent {
    /// A handler started on the message.
    Started,
    /// The delivery ended.
    Finished {
        /// How.
        outcome: AuditOutcome,
        /// Time in the handler.
        duration: Duration,
    },
}

/// How a delivery ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuditOutcome {
    /// `Ack::Ack`.
    Acked,
    /// Scheduled again (`NoAck`, a panic, a timeout, an `Err`).
    Retried {
        /// Wait before the next delivery.
        after: Duration,
        /// Why, for panics, timeouts and `Err`s (the error's text).
        reason: Option<String>,
    },
    /// Dead-lettered.
    Dead {
        /// Why.
        reason: DeadReason,
    },
}

/// One audit entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AuditRecord {
    /// Position in the system's audit stream (1, 2, ...).
    pub seq: u64,
    /// The message.
    pub message_id: String,
    /// Its topic.
    pub topic: Arc<str>,
    /// The worker.
    pub worker: Arc<str>,
    /// The node the worker runs on ([`node_name`](crate::node_name)).
    pub node: Arc<str>,
    /// The delivery (`attempts` of the message).
    pub attempt: u32,
    /// What happened.
    pub event: AuditEvent,
    /// When.
    pub at: SystemTime,
}

/// Errors of an [`AuditWriter`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// Writing failed.
    #[error("audit write to {target} failed: {source}")]
    Io {
        /// Where to.
        target: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Encoding a record failed.
    #[error("could not encode an audit record")]
    Encode(#[source] serde_json::Error),
    /// The writer's state was poisoned by a panic in an earlier write; recreate the writer.
    #[error("the audit writer was poisoned by a panic in an earlier write; recreate it")]
    Poisoned,
}

/// Somewhere audit records go: a file, a log, a database.
///
/// Called from a dedicated thread with batches in order; may block.
pub trait AuditWriter: Send + Sync + 'static {
    /// Writes a batch.
    fn write(&self, records: &[AuditRecord]) -> Result<(), AuditError>;

    /// Makes everything written so far durable (called at shutdown).
    fn flush(&self) -> Result<(), AuditError> {
        Ok(())
    }
}
