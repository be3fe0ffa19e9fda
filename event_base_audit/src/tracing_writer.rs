//! [`TracingWriter`]: audit records as `tracing` events.

use event_base_core::{AuditError, AuditEvent, AuditRecord, AuditWriter};

/// Emits one `tracing` event per record, target `event_base::audit`
/// ([`target::AUDIT`](event_base_core::constant::target::AUDIT)), level INFO.
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingWriter;

impl AuditWriter for TracingWriter {
    fn write(&self, records: &[AuditRecord]) -> Result<(), AuditError> {
        for r in records {
            match &r.event {
                AuditEvent::Started => tracing::info!(
                    target: event_base_core::constant::target::AUDIT,
                    seq = r.seq, id = %r.message_id, topic = %r.topic, worker = %r.worker,
                    attempt = r.attempt, "started"
                ),
                AuditEvent::Finished { outcome, duration } => tracing::info!(
                    target: event_base_core::constant::target::AUDIT,
                    seq = r.seq, id = %r.message_id, topic = %r.topic, worker = %r.worker,
                    attempt = r.attempt, ?outcome, ?duration, "finished"
                ),
            }
        }
        Ok(())
    }
}
