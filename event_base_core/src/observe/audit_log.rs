//! Audit: an [`AuditRecord`] for every start and finish of a delivery, kept in a bounded ring
//! ([`AuditLog`]) and handed, in batches, to [`AuditWriter`]s and to `_system.audit`.
//!
//! Auditing is on by default: the bus keeps the newest
//! [`DEFAULT_AUDIT_CAPACITY`](crate::constant::DEFAULT_AUDIT_CAPACITY) records
//! (`EventBusBuilder::audit(n)` sets another size, `audit(0)` turns it off). It is built to
//! cost little on the hot path: each worker stages one entry per delivery under a lock of its
//! own (`audit_stage.rs`) and hands a batch to the shared ring (`audit_ring.rs`) every 64
//! deliveries or when it goes idle; names are shared, not copied, and no lock is shared by the
//! workers per record. Reading takes in what is staged first. When writers or a
//! `_system.audit` subscriber want the records, one background task picks up what is new, in
//! batches: it passes each batch to a writer thread (files are written off the async runtime)
//! and publishes it on `_system.audit` as one message. The bus never makes a round trip per
//! record.
//!
//! The ring keeps the newest `capacity` records. A writer that falls so far behind that the
//! ring wrapped loses the overwritten records; a warning says how many.

use std::sync::{Arc, Mutex, Weak};

use crate::observe::audit_record::AuditRecord;
use crate::observe::audit_ring::{AuditNames, AuditRing, RingRecord};
use crate::observe::audit_stage::AuditStage;

/// The newest audit records of a bus: on by default (the newest
/// [`DEFAULT_AUDIT_CAPACITY`](crate::constant::DEFAULT_AUDIT_CAPACITY) records), off with
/// `EventBusBuilder::audit(0)` or `start_system!(audit: 0)`.
///
/// Each worker stages its records and hands them to the bus's ring in batches (see the module
/// docs); every read here first takes in whatever is staged, so a read after `wait_idle` sees
/// every delivery that finished. Reads are for inspection (tests, operators, the gRPC API):
/// they lock each worker's stage and the ring briefly.
#[derive(Debug)]
pub struct AuditLog {
    enabled: bool,
    flush_tx: Option<flume::Sender<tokio::sync::oneshot::Sender<()>>>,
    pub(crate) ring: Arc<AuditRing>,
    stages: Mutex<Vec<Weak<AuditStage>>>,
}

impl AuditLog {
    /// An audit log keeping `capacity` records (`None`: off); `flush_tx` reaches the
    /// publisher, which only exists when writers or a `_system.audit` subscriber want records.
    pub(crate) fn new(
        capacity: Option<usize>,
        flush_tx: Option<flume::Sender<tokio::sync::oneshot::Sender<()>>>,
    ) -> Self {
        let published = flush_tx.is_some();
        AuditLog {
            enabled: capacity.is_some(),
            flush_tx,
            ring: Arc::new(AuditRing::new(capacity.unwrap_or(1), published)),
            stages: Mutex::new(Vec::new()),
        }
    }

    /// Whether the bus audits.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// A stage for one worker's records, if the bus audits.
    pub(crate) fn stage(&self, names: AuditNames) -> Option<Arc<AuditStage>> {
        if !self.enabled {
            return None;
        }
        let stage = Arc::new(AuditStage::new(names, self.ring.clone()));
        if let Ok(mut stages) = self.stages.lock() {
            stages.retain(|s| s.strong_count() > 0);
            stages.push(Arc::downgrade(&stage));
        }
        Some(stage)
    }

    /// Takes every staged record into the ring.
    fn take_in(&self) {
        let live: Vec<Arc<AuditStage>> = match self.stages.lock() {
            Ok(stages) => stages.iter().filter_map(Weak::upgrade).collect(),
            Err(_) => Vec::new(),
        };
        for stage in live {
            stage.flush();
        }
    }

    /// Waits until every record so far has been handed to every writer and the writers have
    /// flushed (at once when the bus has no writer and no `_system.audit` subscriber).
    /// Cancel safety: it only waits; the flush it asked for still happens.
    pub async fn flush(&self) {
        let Some(tx) = &self.flush_tx else { return };
        let (done, wait) = tokio::sync::oneshot::channel();
        if tx.send(done).is_ok() {
            let _ = wait.await;
        }
    }

    /// The newest `n` records, oldest first (ordered by time).
    pub fn recent(&self, n: usize) -> Vec<AuditRecord> {
        self.take_in();
        let ring = self.ring.lock();
        in_time_order(AuditRing::newest(&ring, n).into_iter())
    }

    /// Every record the ring still holds about one message, in order.
    pub fn for_message(&self, id: &str) -> Vec<AuditRecord> {
        self.take_in();
        let ring = self.ring.lock();
        in_time_order(
            ring.records
                .iter()
                .filter(|r| r.id == id)
                .flat_map(RingRecord::to_records),
        )
    }

    /// Records after `seq`, and how many were lost to wrapping.
    pub(crate) fn since(&self, seq: u64) -> (Vec<AuditRecord>, u64) {
        self.take_in();
        let ring = self.ring.lock();
        let lost = ring
            .records
            .front()
            .map_or(0, |f| f.seq.saturating_sub(seq + 1));
        let records = ring
            .records
            .iter()
            .flat_map(RingRecord::to_records)
            .filter(|r| r.seq > seq)
            .collect();
        (records, lost)
    }
}

/// Records by the time they describe (workers hand theirs over in batches, so the ring's
/// order interleaves them by batch), ties in ring order.
fn in_time_order(records: impl Iterator<Item = AuditRecord>) -> Vec<AuditRecord> {
    let mut out: Vec<AuditRecord> = records.collect();
    out.sort_by(|a, b| a.at.cmp(&b.at).then(a.seq.cmp(&b.seq)));
    out
}
