//! A worker's audit stage: the records of its deliveries, kept by the worker itself until a
//! batch is full or the worker goes idle, then handed to the bus's ring in one go.
//!
//! The hot path takes only this worker's own lock (no other worker ever takes it; a reader
//! does, rarely), never a lock all workers share, and makes one entry per delivery: its start,
//! completed in place by its finish. Any reader first drains every stage into the ring, so
//! what it reads is everything recorded so far.
//!
//! A recorder: imports only `message/` and the other audit recorders.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use crate::message::id::MessageId;
use crate::observe::audit_record::AuditOutcome;
use crate::observe::audit_ring::{AuditNames, AuditRing, RingRecord};

/// Entries a stage holds before it hands them to the ring.
const BATCH: usize = 64;

/// One worker's staged records.
#[derive(Debug)]
pub(crate) struct AuditStage {
    names: Arc<AuditNames>,
    ring: Arc<AuditRing>,
    inner: Mutex<Staged>,
}

#[derive(Debug, Default)]
struct Staged {
    /// Built as the ring keeps them (`seq` is given at the hand-over), so that handing them
    /// over moves each once.
    entries: Vec<RingRecord>,
    /// Bumped whenever the entries are handed over, so a finish knows whether its start is
    /// still here to be completed.
    epoch: u64,
}

/// Where a delivery's start was staged, for its finish to complete it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StartMark {
    epoch: u64,
    index: usize,
    at: SystemTime,
}

/// A worker that ends without going idle (cancelled: declared dead while a handler hung, or
/// aborted by a forced shutdown) hands over what it staged, so the start of the delivery it
/// was stuck on stays in the message's story.
impl Drop for AuditStage {
    fn drop(&mut self) {
        self.flush();
    }
}

impl AuditStage {
    pub(crate) fn new(names: AuditNames, ring: Arc<AuditRing>) -> AuditStage {
        AuditStage {
            names: Arc::new(names),
            ring,
            inner: Mutex::new(Staged::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Staged> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// A delivery of `id` (attempt `attempt`) started at `at`.
    pub(crate) fn started(&self, id: &str, attempt: u32, at: SystemTime) -> StartMark {
        let mut staged = self.lock();
        staged.entries.push(RingRecord {
            seq: 0,
            id: MessageId::from(id),
            names: self.names.clone(),
            attempt,
            at,
            started: true,
            finished: None,
        });
        StartMark {
            epoch: staged.epoch,
            index: staged.entries.len() - 1,
            at,
        }
    }

    /// The delivery `mark` started ended with `outcome` after `took`.
    pub(crate) fn finished(
        &self,
        mark: StartMark,
        id: &str,
        attempt: u32,
        outcome: AuditOutcome,
        took: Duration,
    ) {
        let mut staged = self.lock();
        let in_place = staged.epoch == mark.epoch;
        match staged.entries.get_mut(mark.index) {
            Some(entry) if in_place => entry.finished = Some((outcome, took)),
            _ => staged.entries.push(RingRecord {
                seq: 0,
                id: MessageId::from(id),
                names: self.names.clone(),
                attempt,
                at: mark.at,
                started: false,
                finished: Some((outcome, took)),
            }),
        }
        if staged.entries.len() >= BATCH {
            self.hand_over(&mut staged);
        }
    }

    /// Hands everything staged to the ring now (the worker goes idle, or a reader reads).
    pub(crate) fn flush(&self) {
        let mut staged = self.lock();
        if !staged.entries.is_empty() {
            self.hand_over(&mut staged);
        }
    }

    /// [`flush`](Self::flush), but only if a publisher waits for records: without one, the
    /// readers take them in when they read.
    pub(crate) fn flush_if_published(&self) {
        if self.ring.is_published() {
            self.flush();
        }
    }

    fn hand_over(&self, staged: &mut Staged) {
        staged.epoch += 1;
        let mut ring = self.ring.lock();
        self.ring.push_all(&mut ring, &mut staged.entries);
        drop(ring);
        self.ring.arrived();
    }
}
