//! The message being handled, as context for whatever the handler does.
//!
//! While a worker runs a handler, the delivered message is the task's *current message*.
//! Every message sent from inside that handler (with `send_msg!`, a `TopicRouter` or an
//! `EventBus`) inherits its `trace_id`, its `correlation_id`, and `causation_id` = the handled
//! message's id, each unless the new message sets its own, so a chain of events can be
//! followed end to end.
//! The handler also runs inside a tracing span `event_base.handle` carrying the message's id,
//! topic, attempt, trace id and correlation id.

use std::sync::Arc;

use crate::message::emessage::EMessage;

tokio::task_local! {
    static CURRENT: Arc<EMessage>;
}

/// The message the current task is handling, if it is a handler.
///
/// ```
/// assert!(event_base_core::current_message().is_none()); // not inside a handler
/// ```
pub fn current_message() -> Option<Arc<EMessage>> {
    CURRENT.try_with(|m| m.clone()).ok()
}

/// Runs `fut` with `message` as the current message.
pub(crate) async fn with_current<F: std::future::Future>(
    message: Arc<EMessage>,
    fut: F,
) -> F::Output {
    CURRENT.scope(message, fut).await
}

/// Fills a new message's provenance from the message being handled, if any.
#[inline]
pub(crate) fn inherit(message: &mut EMessage) {
    let meta = &message.metadata;
    if meta.causation_id.is_some() && meta.trace_id.is_some() && meta.correlation_id.is_some() {
        return;
    }
    let _ = CURRENT.try_with(|parent| {
        if parent.id == message.id {
            return;
        }
        let meta = &mut message.metadata;
        if meta.causation_id.is_none() {
            meta.causation_id = Some(parent.id.clone());
        }
        if meta.trace_id.is_none() {
            meta.trace_id.clone_from(&parent.metadata.trace_id);
        }
        if meta.correlation_id.is_none() {
            meta.correlation_id
                .clone_from(&parent.metadata.correlation_id);
        }
    });
}
