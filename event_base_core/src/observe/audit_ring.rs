//! The audit ring: the newest records of a bus, in the order they reached it, each with its
//! place in the bus's audit stream (`seq`). Workers' stages hand their records in, in batches;
//! the readers (`AuditLog`, the publisher) read them out.
//!
//! A recorder: imports only `message/` and the audit types.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use tokio::sync::Notify;

use crate::message::id::MessageId;
use crate::observe::audit_record::{AuditEvent, AuditRecord};

/// The names every record of one worker shares.
#[derive(Debug)]
pub(crate) struct AuditNames {
    pub(crate) topic: Arc<str>,
    pub(crate) worker: Arc<str>,
    pub(crate) node: Arc<str>,
}

/// One record as the ring keeps it (an [`AuditRecord`] once read).
#[derive(Debug)]
pub(crate) struct RingRecord {
    pub(crate) seq: u64,
    pub(crate) id: MessageId,
    pub(crate) names: Arc<AuditNames>,
    pub(crate) attempt: u32,
    pub(crate) event: AuditEvent,
    pub(crate) at: SystemTime,
}

impl RingRecord {
    pub(crate) fn to_record(&self) -> AuditRecord {
        AuditRecord {
            seq: self.seq,
            message_id: self.id.to_string(),
            topic: self.names.topic.clone(),
            worker: self.names.worker.clone(),
            node: self.names.node.clone(),
            attempt: self.attempt,
            event: self.event.clone(),
            at: self.at,
        }
    }
}

/// What the ring holds, under its lock.
#[derive(Debug)]
pub(crate) struct RingInner {
    pub(crate) records: VecDeque<RingRecord>,
    next_seq: u64,
}

/// The bounded ring of one bus.
#[derive(Debug)]
pub(crate) struct AuditRing {
    capacity: usize,
    inner: Mutex<RingInner>,
    /// Wakes the publisher when records arrive, if there is one (`notify`).
    pub(crate) fresh: Notify,
    notify: bool,
}

impl AuditRing {
    /// A ring keeping the newest `capacity` records; `notify` when a publisher waits on it.
    pub(crate) fn new(capacity: usize, notify: bool) -> AuditRing {
        AuditRing {
            capacity: capacity.max(1),
            inner: Mutex::new(RingInner {
                records: VecDeque::new(),
                next_seq: 1,
            }),
            fresh: Notify::new(),
            notify,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, RingInner> {
        // A poisoned ring only means a panic elsewhere while holding it; its records are
        // still whole.
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Appends one record under `inner` (the caller holds the lock), dropping the oldest
    /// when full.
    pub(crate) fn push(
        &self,
        inner: &mut RingInner,
        id: MessageId,
        names: &Arc<AuditNames>,
        attempt: u32,
        event: AuditEvent,
        at: SystemTime,
    ) {
        if inner.records.len() == self.capacity {
            inner.records.pop_front();
        }
        let seq = inner.next_seq;
        inner.next_seq += 1;
        inner.records.push_back(RingRecord {
            seq,
            id,
            names: names.clone(),
            attempt,
            event,
            at,
        });
    }

    /// Whether a publisher waits for records.
    pub(crate) fn is_published(&self) -> bool {
        self.notify
    }

    /// Tells the publisher, if any, that records arrived.
    pub(crate) fn arrived(&self) {
        if self.notify {
            self.fresh.notify_one();
        }
    }
}
