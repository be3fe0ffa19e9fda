//! Request/reply: [`EventBus::request`] sends a message and waits for one answer, which a
//! handler gives with [`reply`].
//!
//! A request is an ordinary message (WAL, audit, retries), marked with the header
//! [`REPLY_TO`]. While its requester waits, the request's id is in a table of this process;
//! [`reply`] hands the answer to that waiter, and only to it. A reply that comes after the
//! waiter gave up (a timeout, a dropped future), or a second reply (a retried or broadcast
//! request), finds no waiter and is dropped without error.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::oneshot;

use crate::bus::event_bus::EventBus;
use crate::delivery::topic_router::routed;
use crate::error::CoreError;
use crate::message::emessage::{EMessage, TryIntoMessage};
use crate::message::payload::MessagePayload;

/// The header that marks a request; its value is the name of the node whose caller waits.
pub const REPLY_TO: &str = "eb-reply-to";

type Waiters = Mutex<HashMap<String, oneshot::Sender<EMessage>>>;

/// The requests of this process that wait for a reply, by id. Request ids are unique (UUID
/// v4 unless the caller sets one, and a set one already waiting is refused), so one table
/// serves every bus of the process.
fn waiters() -> &'static Waiters {
    static WAITERS: OnceLock<Waiters> = OnceLock::new();
    WAITERS.get_or_init(Waiters::default)
}

fn lock() -> std::sync::MutexGuard<'static, HashMap<String, oneshot::Sender<EMessage>>> {
    waiters()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A request's place in the table, removed when the request ends however it ends.
struct Waiting(String);

impl Drop for Waiting {
    fn drop(&mut self) {
        lock().remove(&self.0);
    }
}

impl EventBus {
    /// Sends `message` to `topic` as a request and waits up to `timeout` for one reply,
    /// which a handler gives with [`reply`]. Returns the reply: its payload is what the
    /// handler passed, its `correlation_id` and `causation_id` are the request's id.
    ///
    /// The request is a message like any other: written to the WAL, audited, retried if its
    /// handler fails (the first reply wins; later ones are dropped). Errors:
    /// [`CoreError::Timeout`] if no reply came in time (a reply after that is dropped without
    /// error to anyone); [`CoreError::NoHandler`] if no handler takes the topic (nothing was
    /// sent); [`CoreError::InvalidParameter`] if the message's id is that of a request that
    /// waits already; and every error of [`send`](Self::send).
    ///
    /// ```
    /// use event_base_core::{handler_fn, reply, Ack, EMessage, EventBus, HandlerSpec};
    /// use std::time::Duration;
    /// # async fn demo() -> Result<(), event_base_core::CoreError> {
    /// let bus = EventBus::builder()
    ///     .handler(HandlerSpec::new("echo", "echo", handler_fn(|msg: EMessage| async move {
    ///         match reply(&msg, msg.payload.as_bytes().to_vec()).await {
    ///             Ok(()) => Ack::Ack,
    ///             Err(_) => Ack::retry(),
    ///         }
    ///     })))
    ///     .build()
    ///     .await?;
    /// let answer = bus.request("echo", b"ping".to_vec(), Duration::from_secs(5)).await?;
    /// assert_eq!(answer.payload.as_bytes(), b"ping");
    /// # Ok(()) }
    /// ```
    ///
    /// Cancel safety: dropped while it waits, the request stays sent (a handler handles it)
    /// and its reply is dropped.
    pub async fn request(
        &self,
        topic: impl AsRef<str>,
        message: impl TryIntoMessage,
        timeout: Duration,
    ) -> Result<EMessage, CoreError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(CoreError::NoRuntime);
        }
        let topic = topic.as_ref();
        let message = routed(&self.shared, topic, message)?.with_header(REPLY_TO, self.node_name());
        let id = message.id.clone();
        let (tx, rx) = oneshot::channel();
        {
            let mut table = lock();
            if table.contains_key(&id) {
                return Err(CoreError::InvalidParameter {
                    name: "message.id",
                    value: id,
                    reason: "a request with this id waits for its reply already; give each request an id of its own (or none: a new one is made)".to_owned(),
                });
            }
            table.insert(id.clone(), tx);
        }
        // In the table before the send, so a reply that comes at once finds it.
        let _waiting = Waiting(id.clone());
        self.send(topic, message).await?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) | Err(_) => Err(CoreError::Timeout {
                operation: format!("request `{id}` to `{topic}` (no reply)"),
                after: timeout,
            }),
        }
    }
}

/// Replies to `request` (a message sent with [`EventBus::request`]) with `payload`, from
/// its handler. The reply goes to the caller that waits for it, and to no one else; if that
/// caller gave up already (its timeout passed) or got a reply already, the reply is dropped
/// and this still answers `Ok(())`.
///
/// Fails with [`CoreError::InvalidParameter`] if `request` is not a request (it has no
/// [`REPLY_TO`] header): there is no one to reply to.
///
/// Across processes: the waiter must be in this process (see the guide's "Requests and
/// replies": a reply to a request of another process is dropped for now).
///
/// ```
/// use event_base_core::{reply, Ack, EMessage};
/// async fn price(msg: EMessage) -> Ack {
///     match reply(&msg, b"42".to_vec()).await {
///         Ok(()) => Ack::Ack,
///         Err(_) => Ack::Dead { dead_reason: event_base_core::DeadReason::Other("not a request".into()) },
///     }
/// }
/// ```
pub async fn reply(
    request: &EMessage,
    payload: impl Into<MessagePayload>,
) -> Result<(), CoreError> {
    if request.headers.get(REPLY_TO).is_none() {
        return Err(CoreError::InvalidParameter {
            name: "request",
            value: request.id.clone(),
            reason: "the message is not a request (it was not sent with EventBus::request), so no one waits for a reply".to_owned(),
        });
    }
    let waiter = lock().remove(&request.id);
    if let Some(waiter) = waiter {
        let answer = EMessage::standard(request.topic.clone(), payload)
            .with_correlation_id(request.id.clone())
            .with_causation_id(request.id.clone());
        // The caller may have given up between the lookup and now: dropped, as documented.
        let _ = waiter.send(answer);
    } else {
        tracing::debug!(target: crate::constant::target::DELIVERY, id = %request.id, "reply to a request nobody waits for (timed out, answered already, or of another process); dropped");
    }
    Ok(())
}

/// [`reply`] with `value` encoded as JSON: the answer of a `Json<T>` handler. A value that
/// does not serialize fails with [`CoreError::Encode`], and nothing is replied. The caller
/// decodes it with [`EMessage::json_payload`].
///
/// ```
/// use event_base_core::{reply_json, Ack, Json};
/// #[derive(serde::Deserialize)]
/// struct Quote { sku: String }
/// async fn quote(msg: event_base_core::EMessage) -> Ack {
///     let Ok(q) = msg.json_payload::<Quote>() else { return Ack::Ack };
///     let _ = reply_json(&msg, &serde_json::json!({ "sku": q.sku, "price": 42 })).await;
///     Ack::Ack
/// }
/// ```
pub async fn reply_json<T: Serialize + ?Sized>(
    request: &EMessage,
    value: &T,
) -> Result<(), CoreError> {
    let bytes = serde_json::to_vec(value).map_err(CoreError::Encode)?;
    reply(request, bytes).await
}
