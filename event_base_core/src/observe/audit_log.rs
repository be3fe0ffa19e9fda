//! Audit: an [`AuditRecord`] for every start and finish of a delivery, kept in a bounded ring
//! ([`AuditLog`]) and handed, in batches, to [`AuditWriter`]s and to `_system.audit`.
//!
//! Auditing is off unless the builder turns it on (`EventBusBuilder::audit` or
//! `audit_writer`), so it costs nothing by default. When on, a worker appends two records per
//! delivery to the ring (one short lock each; names are shared, not copied). A single
//! background task picks up what is new, in batches: it passes each batch to a writer thread
//! (files are written off the async runtime) and, if anything subscribes to `_system.audit`,
//! publishes the batch as one message. The bus never makes a round trip per record.
//!
//! The ring keeps the newest `capacity` records. A writer that falls so far behind that the
//! ring wrapped loses the overwritten records; a warning says how many.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

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
    /// Scheduled again (`NoAck`, a panic, a timeout).
    Retried {
        /// Wait before the next delivery.
        after: Duration,
        /// Why, for panics and timeouts.
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
pub struct AuditRecord {
    /// Position in the system's audit stream (1, 2, ...).
    pub seq: u64,
    /// The message.
    pub message_id: String,
    /// Its topic.
    pub topic: Arc<str>,
    /// The worker.
    pub worker: Arc<str>,
    /// The delivery (`attempts` of the message).
    pub attempt: u32,
    /// What happened.
    pub event: AuditEvent,
    /// When.
    pub at: SystemTime,
}

/// Errors of an [`AuditWriter`].
#[derive(Debug, thiserror::Error)]
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
    #[error("could not encode audit record: {0}")]
    Encode(String),
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

/// The newest audit records of a system.
#[derive(Debug)]
pub struct AuditLog {
    enabled: bool,
    flush_tx: Option<flume::Sender<tokio::sync::oneshot::Sender<()>>>,
    capacity: usize,
    ring: Mutex<VecDeque<AuditRecord>>,
    next_seq: AtomicU64,
    pub(crate) fresh: Notify,
}

impl AuditLog {
    pub(crate) fn new(
        capacity: Option<usize>,
        flush_tx: Option<flume::Sender<tokio::sync::oneshot::Sender<()>>>,
    ) -> Self {
        AuditLog {
            enabled: capacity.is_some(),
            flush_tx,
            capacity: capacity.unwrap_or(0).max(1),
            ring: Mutex::new(VecDeque::new()),
            next_seq: AtomicU64::new(1),
            fresh: Notify::new(),
        }
    }

    /// Whether the system audits.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    pub(crate) fn record(
        &self,
        message_id: &str,
        topic: &Arc<str>,
        worker: &Arc<str>,
        attempt: u32,
        event: AuditEvent,
    ) {
        let at = SystemTime::now();
        if let Ok(mut ring) = self.ring.lock() {
            let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
            if ring.len() == self.capacity {
                ring.pop_front();
            }
            ring.push_back(AuditRecord {
                seq,
                message_id: message_id.to_owned(),
                topic: topic.clone(),
                worker: worker.clone(),
                attempt,
                event,
                at,
            });
        }
        self.fresh.notify_one();
    }

    /// Waits until every record so far has been handed to every writer and the writers have
    /// flushed.
    pub async fn flush(&self) {
        let Some(tx) = &self.flush_tx else { return };
        let (done, wait) = tokio::sync::oneshot::channel();
        if tx.send(done).is_ok() {
            let _ = wait.await;
        }
    }

    /// The newest `n` records, newest last.
    pub fn recent(&self, n: usize) -> Vec<AuditRecord> {
        match self.ring.lock() {
            Ok(ring) => ring
                .iter()
                .skip(ring.len().saturating_sub(n))
                .cloned()
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Every record the ring still holds about one message, in order.
    pub fn for_message(&self, id: &str) -> Vec<AuditRecord> {
        match self.ring.lock() {
            Ok(ring) => ring
                .iter()
                .filter(|r| r.message_id == id)
                .cloned()
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Records after `seq`, and how many were lost to wrapping.
    pub(crate) fn since(&self, seq: u64) -> (Vec<AuditRecord>, u64) {
        match self.ring.lock() {
            Ok(ring) => {
                let lost = ring.front().map_or(0, |f| f.seq.saturating_sub(seq + 1));
                (ring.iter().filter(|r| r.seq > seq).cloned().collect(), lost)
            }
            Err(_) => (Vec::new(), 0),
        }
    }
}
