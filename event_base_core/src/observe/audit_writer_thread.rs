//! The audit writer thread: files are written off the async runtime, batches in order.

use std::sync::Arc;

use crate::observe::audit_record::{AuditRecord, AuditWriter};

/// A request to the writer thread.
pub(crate) enum WriterRequest {
    Batch(Vec<AuditRecord>),
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// The writer thread: feeds every batch to every writer, in order.
pub(crate) fn spawn_writer_thread(
    writers: Vec<Arc<dyn AuditWriter>>,
) -> std::io::Result<flume::Sender<WriterRequest>> {
    let (tx, rx) = flume::unbounded::<WriterRequest>();
    std::thread::Builder::new()
        .name("event_base-audit".into())
        .spawn(move || {
            let flush_all = || {
                for w in &writers {
                    if let Err(e) = w.flush() {
                        tracing::error!(target: crate::constant::target::AUDIT, error = %e, "audit writer flush failed");
                    }
                }
            };
            while let Ok(req) = rx.recv() {
                match req {
                    WriterRequest::Batch(batch) => {
                        for w in &writers {
                            if let Err(e) = w.write(&batch) {
                                tracing::error!(target: crate::constant::target::AUDIT, error = %e, "audit writer failed");
                            }
                        }
                    }
                    WriterRequest::Flush(done) => {
                        flush_all();
                        let _ = done.send(());
                    }
                }
            }
            flush_all();
        })?;
    Ok(tx)
}
