//! Messages to columns and rows back to records: the message as JSON without its payload
//! (`message`), the payload as bytes (`payload`), a dead letter's reason as JSON.

use std::sync::Arc;
use std::time::SystemTime;

use event_base_core::backend::{WalRecord, WalRecordState};
use event_base_core::{DeadLetterMessage, DeadReason, EMessage, MessagePayload};
use tokio_postgres::Row;

use crate::error::PostgresError;

/// `state` of a `Pending` record.
pub(crate) const PENDING: i16 = 0;
/// `state` of a `Processing` record.
pub(crate) const PROCESSING: i16 = 1;
/// `state` of a dead letter (`Failed`).
pub(crate) const FAILED: i16 = 3;

/// The columns `message` and `payload` of `message`.
pub(crate) fn columns(message: &EMessage) -> (String, Vec<u8>) {
    let mut head = message.clone();
    let payload = std::mem::take(&mut head.payload);
    // EMessage's Serialize does not fail (string keys, no custom impls).
    let json = serde_json::to_string(&head).unwrap_or_default();
    (json, payload.0.to_vec())
}

/// The message of the columns `message` (JSON, no payload) and `payload`; what is wrong if
/// the JSON is not an event_base message.
pub(crate) fn message(json: &str, payload: Vec<u8>) -> Result<EMessage, String> {
    let mut message: EMessage =
        serde_json::from_str(json).map_err(|e| format!("column `message`: {e}"))?;
    message.payload = MessagePayload::from(payload);
    Ok(message)
}

/// A dead letter's reason as its column.
pub(crate) fn reason_column(reason: &DeadReason) -> String {
    serde_json::to_string(reason).unwrap_or_default()
}

/// The columns a row is read back by: `id, message, payload, state, updated_at,
/// dead_reason, dead_handlers`.
pub(crate) const RECORD_COLUMNS: &str =
    "id, message, payload, state, updated_at, dead_reason, dead_handlers";

/// The record of a row read with [`RECORD_COLUMNS`].
pub(crate) fn record(row: &Row) -> Result<WalRecord, PostgresError> {
    let id: String = row.get(0);
    let bad = |reason: String| PostgresError::Undecodable {
        id: id.clone(),
        reason,
    };
    let message = message(row.get(1), row.get(2)).map_err(bad)?;
    let state = match row.get::<_, i16>(3) {
        PENDING => WalRecordState::Pending,
        PROCESSING => WalRecordState::Processing,
        FAILED => WalRecordState::Failed,
        other => return Err(bad(format!("state {other}"))),
    };
    let updated_at: SystemTime = row.get(4);
    let dead_reason = match row.get::<_, Option<&str>>(5) {
        Some(json) => Some(
            serde_json::from_str::<DeadReason>(json)
                .map_err(|e| bad(format!("column `dead_reason`: {e}")))?,
        ),
        None => None,
    };
    let dead_handlers: Option<Vec<String>> = row.get(6);
    Ok(WalRecord {
        message: Arc::new(message),
        state,
        updated_at,
        dead_reason,
        dead_handlers: dead_handlers.unwrap_or_default(),
    })
}

/// The dead letter of a row read with [`RECORD_COLUMNS`].
pub(crate) fn dead_letter(row: &Row) -> Result<DeadLetterMessage, PostgresError> {
    let r = record(row)?;
    let message = Arc::unwrap_or_clone(r.message);
    Ok(DeadLetterMessage {
        attempts: message.attempts,
        message,
        reason: r.dead_reason.unwrap_or(DeadReason::Explicit),
        died_at: r.updated_at,
        handlers: r.dead_handlers,
    })
}
