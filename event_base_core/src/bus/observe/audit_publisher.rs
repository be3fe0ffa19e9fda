//! The background half of auditing: one task that picks up what is new in the
//! [`AuditLog`](crate::AuditLog) ring, in batches, and hands each batch to the writer thread and,
//! if anything subscribes, to `_system.audit`.

use std::sync::Arc;

use crate::bus::shared::BusShared;
use crate::observe::audit_writer_thread::WriterRequest;

/// The background half of auditing: hands new records to the writers and `_system.audit`.
pub(crate) async fn run_audit_publisher(
    shared: Arc<BusShared>,
    writers: Option<flume::Sender<WriterRequest>>,
    flushes: flume::Receiver<tokio::sync::oneshot::Sender<()>>,
) {
    let mut last = 0u64;
    loop {
        let flush = tokio::select! {
            _ = shared.delivery.audit.ring.fresh.notified() => None,
            f = flushes.recv_async() => f.ok(),
        };
        let (batch, lost) = shared.delivery.audit.since(last);
        if lost > 0 {
            tracing::warn!(target: crate::constant::target::AUDIT, lost, "audit ring wrapped before the writers caught up");
        }
        if let Some(newest) = batch.last() {
            last = newest.seq;
            if shared.delivery.topics.contains_key(crate::constant::AUDIT) {
                shared
                    .delivery
                    .announce(crate::constant::AUDIT, &batch)
                    .await;
            }
            if let Some(tx) = &writers {
                let _ = tx.send(WriterRequest::Batch(batch));
            }
        }
        if let Some(done) = flush {
            match &writers {
                Some(tx) => {
                    let _ = tx.send(WriterRequest::Flush(done));
                }
                None => {
                    let _ = done.send(());
                }
            }
        }
    }
}
