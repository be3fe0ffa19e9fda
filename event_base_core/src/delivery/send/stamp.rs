//! What every send does to its message before it is accepted, wherever it goes (this
//! process's queues or only other processes'): [`stamp`].

use crate::error::CoreError;
use crate::message::emessage::EMessage;
use crate::message::id::check_id;

/// Checks `message`'s id and key, and readies it: the first delivery's `attempts`, a
/// `deliver_at` at most [`MAX_WAIT`](crate::constant::MAX_WAIT) ahead, the provenance of the
/// message being handled (if any), and (feature `otel`) the current span as its W3C trace
/// context.
#[inline]
pub(crate) fn stamp(message: &mut EMessage) -> Result<(), CoreError> {
    check_id(&message.id)?;
    if let Some(key) = message.key() {
        check_key(key)?;
    }
    if message.attempts == 0 {
        message.attempts = 1;
    }
    if let Some(at) = message.deliver_at {
        // At most `MAX_WAIT` ahead: every clock and backend can count down to that.
        message.deliver_at = Some(crate::clock::latest_due(at));
    }
    crate::message::context::inherit(message);
    #[cfg(feature = "otel")]
    crate::observe::trace_context::inject(message);
    Ok(())
}

/// Refuses an ordering key that is empty or longer than
/// [`MAX_ID_BYTES`](crate::constant::MAX_ID_BYTES).
fn check_key(key: &str) -> Result<(), CoreError> {
    let max = crate::constant::MAX_ID_BYTES;
    if key.is_empty() || key.len() > max {
        return Err(CoreError::InvalidParameter {
            name: "key",
            value: format!("{} bytes", key.len()),
            reason: format!(
                "an ordering key is 1 to {max} bytes; hash a longer one (EMessage::with_key)"
            ),
        });
    }
    Ok(())
}
