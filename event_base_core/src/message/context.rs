//! The message being handled, as context for whatever the handler does.
//!
//! While a worker runs a handler, the delivered message is the task's *current message*.
//! Every message sent from inside that handler (with `send_msg!`, a `TopicRouter` or an
//! `EventBus`) inherits its `trace_id`, its `correlation_id`, and `causation_id` = the handled
//! message's id, each unless the new message sets its own, so a chain of events can be
//! followed end to end.
//! The handler also runs inside a tracing span `event_base.handle` carrying the message's id,
//! topic, attempt, trace id and correlation id. The context also holds the handler's
//! `retries`, which [`Ack::retry`](crate::Ack::retry) puts into the `NoAck` it makes, and the
//! bus that runs the handler, which `TopicRouter::global()` (and so `send_msg!`) sends into
//! instead of the installed global bus: a handler of an isolated bus (a `TestBus`, say)
//! reaches its own bus. It also holds the text of a failed delivery the handler reported by
//! returning `Err` (see [`IntoAck`](crate::IntoAck)), which the worker reads when the answer
//! is `NoAck`.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

use crate::constant::DEFAULT_MAX_RETRIES;
use crate::message::emessage::EMessage;
use crate::message::id::MessageId;

/// The bus that runs a handler, as this layer sees it: opaque, because the contracts know no
/// running bus. It is a clone of the `Arc` the worker already holds (one reference count, no
/// allocation per delivery); `delivery/send/topic_router.rs` downcasts it back.
pub(crate) type HandlingBus = Arc<dyn Any + Send + Sync>;

/// What a handler runs with: the message, its handler's retry limit, the bus running it, and
/// the failure the handler reported, if any.
///
/// A worker's task holds one for its whole life ([`worker_scope`]), and each delivery only
/// puts its message in and takes it out again ([`handling`]): setting up a task-local scope
/// per delivery cost more than the rest of the context. Between deliveries it is inactive,
/// and acts as if there were none.
struct Current {
    /// Whether a handler runs now (always, for the scopes of one call: [`with_current`],
    /// [`with_current_batch`]).
    active: Cell<bool>,
    /// `None` for a batch handler's call: it handles several messages, none of them *the*
    /// current one (sends from it inherit no provenance).
    message: RefCell<Option<Arc<EMessage>>>,
    retries: u32,
    bus: HandlingBus,
    /// Set by an `Err` answer ([`report_failure`]), taken by the worker ([`take_failure`]).
    /// A `RefCell`: one task reads and writes it, never at once.
    failure: RefCell<Option<String>>,
    /// For a handler with an outbox: the messages it sent, held until it acks
    /// ([`hold`], [`take_outbox`]).
    outbox: Option<RefCell<Vec<Arc<EMessage>>>>,
}

impl Current {
    /// A context for a handler with `retries` that `bus` runs, handling `message` now if
    /// `active` (with an outbox if `outbox`).
    fn new(
        active: bool,
        message: Option<Arc<EMessage>>,
        retries: u32,
        bus: HandlingBus,
        outbox: bool,
    ) -> Current {
        Current {
            active: Cell::new(active),
            message: RefCell::new(message),
            retries,
            bus,
            failure: RefCell::new(None),
            outbox: outbox.then(|| RefCell::new(Vec::new())),
        }
    }
}

tokio::task_local! {
    static CURRENT: Current;
}

/// The message the current task is handling, if it is a handler.
///
/// ```
/// assert!(event_base_core::current_message().is_none()); // not inside a handler
/// ```
pub fn current_message() -> Option<Arc<EMessage>> {
    CURRENT
        .try_with(|c| c.message.borrow().clone())
        .ok()
        .flatten()
}

/// The `retries` of the handler the current task runs, or [`DEFAULT_MAX_RETRIES`] outside
/// a handler (in a task the handler spawned, say).
pub(crate) fn handler_retries() -> u32 {
    CURRENT
        .try_with(|c| c.retries)
        .unwrap_or(DEFAULT_MAX_RETRIES)
}

/// The bus running the handler the current task runs, if it is a handler.
pub(crate) fn handling_bus() -> Option<HandlingBus> {
    CURRENT
        .try_with(|c| c.active.get().then(|| c.bus.clone()))
        .ok()
        .flatten()
}

/// Records (`Some`) or clears (`None`) the failure of the delivery the current task is
/// handling. Returns `false` outside a handler's task, where there is nothing to record it in.
pub(crate) fn report_failure(text: Option<String>) -> bool {
    CURRENT
        .try_with(|c| {
            *c.failure.borrow_mut() = text;
        })
        .is_ok()
}

/// Holds `message` in the outbox of the handler the current task runs, if that handler has
/// one and runs on `bus` (a send to another bus is not held), and gives its id (what the send
/// answers); hands it back otherwise. The id is only made for a held message: a send that is
/// not held makes its own once accepted.
pub(crate) fn hold(message: Arc<EMessage>, bus: *const ()) -> Result<MessageId, Arc<EMessage>> {
    let held = CURRENT.try_with(|c| match &c.outbox {
        Some(outbox) if c.active.get() && std::ptr::eq(Arc::as_ptr(&c.bus) as *const (), bus) => {
            outbox.borrow_mut().push(message.clone());
            Some(MessageId::from(&message.id))
        }
        _ => None,
    });
    match held {
        Ok(Some(id)) => Ok(id),
        _ => Err(message),
    }
}

/// Whether the handler the current task runs holds its sends to `bus` in an outbox.
pub(crate) fn holds_sends_to(bus: *const ()) -> bool {
    CURRENT
        .try_with(|c| {
            c.outbox.is_some()
                && c.active.get()
                && std::ptr::eq(Arc::as_ptr(&c.bus) as *const (), bus)
        })
        .unwrap_or(false)
}

/// Takes the messages the current handler's outbox holds (none without an outbox).
pub(crate) fn take_outbox() -> Vec<Arc<EMessage>> {
    CURRENT
        .try_with(|c| {
            c.outbox
                .as_ref()
                .map(|o| std::mem::take(&mut *o.borrow_mut()))
        })
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Takes the failure the handler reported, if it did (and the task is a handler's).
pub(crate) fn take_failure() -> Option<String> {
    CURRENT
        .try_with(|c| c.failure.borrow_mut().take())
        .ok()
        .flatten()
}

/// Runs `fut` with `message` as the current message, for a handler with `retries` that `bus`
/// runs (with an outbox if `outbox`).
pub(crate) async fn with_current<F: std::future::Future>(
    message: Arc<EMessage>,
    retries: u32,
    bus: HandlingBus,
    outbox: bool,
    fut: F,
) -> F::Output {
    let current = Current::new(true, Some(message), retries, bus, outbox);
    CURRENT.scope(current, fut).await
}

/// Runs `fut`, a batch handler's call, for a handler with `retries` that `bus` runs: no
/// current message, no outbox, but `Ack::retry()`, `Err` texts and `send_msg!` work as in a
/// single-message handler.
pub(crate) async fn with_current_batch<F: std::future::Future>(
    retries: u32,
    bus: HandlingBus,
    fut: F,
) -> F::Output {
    let current = Current::new(true, None, retries, bus, false);
    CURRENT.scope(current, fut).await
}

/// Runs `fut`, a worker's whole life, with a context that its deliveries fill in turn
/// ([`handling`]): for a handler with `retries` that `bus` runs (with an outbox if `outbox`).
pub(crate) async fn worker_scope<F: std::future::Future>(
    retries: u32,
    bus: HandlingBus,
    outbox: bool,
    fut: F,
) -> F::Output {
    let current = Current::new(false, None, retries, bus, outbox);
    CURRENT.scope(current, fut).await
}

/// While it lives, the current task handles a message: made by [`handling`].
#[must_use = "the message is current only while the guard lives"]
pub(crate) struct Handling(());

impl Drop for Handling {
    fn drop(&mut self) {
        let _ = CURRENT.try_with(|c| {
            c.active.set(false);
            c.message.borrow_mut().take();
            c.failure.borrow_mut().take();
            if let Some(outbox) = &c.outbox {
                outbox.borrow_mut().clear();
            }
        });
    }
}

/// Makes `message` the current task's message until the guard drops, in the context of
/// [`worker_scope`]; `None` outside one (then use [`with_current`]).
pub(crate) fn handling(message: &Arc<EMessage>) -> Option<Handling> {
    CURRENT
        .try_with(|c| {
            *c.message.borrow_mut() = Some(message.clone());
            c.failure.borrow_mut().take();
            c.active.set(true);
            Handling(())
        })
        .ok()
}

/// Fills a new message's provenance from the message being handled, if any.
#[inline]
pub(crate) fn inherit(message: &mut EMessage) {
    let meta = &message.metadata;
    if meta.causation_id.is_some() && meta.trace_id.is_some() && meta.correlation_id.is_some() {
        return;
    }
    let _ = CURRENT.try_with(|current| {
        let parent = current.message.borrow();
        let Some(parent) = parent.as_ref() else {
            return;
        };
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
