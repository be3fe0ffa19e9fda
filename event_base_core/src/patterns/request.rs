//! Request/reply: [`EventBus::request`] sends a message and waits for one answer, which a
//! handler gives with [`reply`].
//!
//! A request is an ordinary message (WAL, audit, retries), marked with the header
//! [`REPLY_TO`]. While its requester waits, the request's id is in a table of this process;
//! [`reply`] hands the answer to that waiter, and only to it. A reply that comes after the
//! waiter gave up (a timeout, a dropped future), or a second reply (a retried or broadcast
//! request), finds no waiter and is dropped without error.
//!
//! Across processes (a shared backend such as Redis), a requester built with
//! `EventBusBuilder::replies(true)` runs a subscription on `event_base.reply`
//! ([`constant::REPLY_TOPIC`](crate::constant::REPLY_TOPIC)), and its requests' [`REPLY_TO`] names its
//! worker there: `<node name>/<worker>`. A [`reply`] given by another bus (another process,
//! or another node of this one) is sent to that worker as an addressed message, through the
//! backend, and the subscription hands it to the waiter.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::bus::event_bus::EventBus;
use crate::bus::start_hooks::{ReplySubscription, REPLY_SUBSCRIPTION};
use crate::constant::REPLY_TOPIC;
use crate::delivery::hub::DeliveryHub;
use crate::delivery::send::topic_router::default_hub;
use crate::delivery::send::topic_router::routed;
use crate::error::CoreError;
use crate::handler::ehandler::handler_fn;
use crate::handler::spec::HandlerSpec;
use crate::message::ack::Ack;
use crate::message::context::handling_bus;
use crate::message::emessage::{EMessage, TryIntoMessage};
use crate::message::json::Json;
use crate::message::payload::MessagePayload;

/// The header that marks a request; its value says where the caller waits: the name of its
/// node, or, on a bus with a reply subscription, `<node name>/<worker>` of that subscription.
pub const REPLY_TO: &str = "eb-reply-to";

/// The name of the reply subscription's handler (its workers are `event_base.replies-<i>`).
const REPLY_HANDLER: &str = "event_base.replies";

/// A caller waiting for a reply, and the bus it asked (its address, to tell it from another
/// bus of this process).
struct Waiter {
    answer: oneshot::Sender<EMessage>,
    bus: usize,
}

type Waiters = Mutex<HashMap<String, Waiter>>;

/// The requests of this process that wait for a reply, by id. Request ids are unique (UUID
/// v4 unless the caller sets one, and a set one already waiting is refused), so one table
/// serves every bus of the process.
fn waiters() -> &'static Waiters {
    static WAITERS: OnceLock<Waiters> = OnceLock::new();
    WAITERS.get_or_init(Waiters::default)
}

fn lock() -> std::sync::MutexGuard<'static, HashMap<String, Waiter>> {
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
    /// handler passed, its `correlation_id` and `causation_id` are the request's id. With a
    /// shared backend (Redis), build the bus with
    /// [`replies(true)`](crate::EventBusBuilder::replies) for replies from handlers in other
    /// processes.
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
        // Where the caller waits: its node, and on a shared backend its reply subscription's
        // worker there, so that a handler in another process can address the reply.
        let reply_to = match self.workers(REPLY_TOPIC).first() {
            Some(worker) if self.shared.delivery.remote.is_some() => {
                format!("{}/{worker}", self.node_name())
            }
            _ => self.node_name().to_owned(),
        };
        let message =
            routed(&self.shared.delivery, topic, message)?.with_header(REPLY_TO, reply_to);
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
            table.insert(
                id.clone(),
                Waiter {
                    answer: tx,
                    bus: Arc::as_ptr(&self.shared.delivery) as usize,
                },
            );
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

    /// [`request`](Self::request) with JSON both ways: sends `value` as a JSON payload and
    /// decodes the reply (given with [`reply_json`]) as an `R`. A reply that does not decode
    /// is [`CoreError::Decode`], naming `R`; the other errors are `request`'s.
    ///
    /// ```
    /// use event_base_core::{handler_fn, reply_json, Ack, EMessage, EventBus, HandlerSpec};
    /// use serde::{Deserialize, Serialize};
    /// use std::time::Duration;
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Quote { cents: u64 }
    ///
    /// # async fn demo() -> Result<(), event_base_core::CoreError> {
    /// let bus = EventBus::builder()
    ///     .handler(HandlerSpec::new("quote", "price", handler_fn(|m: EMessage| async move {
    ///         let Ok(items) = m.json_payload::<Vec<String>>() else { return Ack::dead() };
    ///         let quote = Quote { cents: 250 * items.len() as u64 };
    ///         match reply_json(&m, &quote).await {
    ///             Ok(()) => Ack::Ack,
    ///             Err(_) => Ack::retry(),
    ///         }
    ///     })))
    ///     .build()
    ///     .await?;
    /// let quote: Quote = bus
    ///     .request_json("price", &["tea", "cake"], Duration::from_secs(1))
    ///     .await?;
    /// assert_eq!(quote.cents, 500);
    /// # Ok(()) }
    /// ```
    pub async fn request_json<T: Serialize + ?Sized, R: DeserializeOwned>(
        &self,
        topic: impl AsRef<str>,
        value: &T,
        timeout: Duration,
    ) -> Result<R, CoreError> {
        let answer = self.request(topic, Json(value), timeout).await?;
        serde_json::from_slice(&answer.payload.0).map_err(|source| CoreError::Decode {
            what: std::any::type_name::<R>().to_owned(),
            source,
        })
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
/// Across processes: when the request names a reply subscription (its requester was built
/// with `EventBusBuilder::replies(true)` on a shared backend) and this handler runs on
/// another bus, the reply is sent to that subscription through the backend; a requester
/// whose node is gone is not an error (the reply is dropped). The reply's topic is
/// `event_base.reply` ([`constant::REPLY_TOPIC`](crate::constant::REPLY_TOPIC)).
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
    let Some(reply_to) = request.headers.get(REPLY_TO) else {
        return Err(CoreError::InvalidParameter {
            name: "request",
            value: request.id.clone(),
            reason: "the message is not a request (it was not sent with EventBus::request), so no one waits for a reply".to_owned(),
        });
    };
    let answer = EMessage::standard(REPLY_TOPIC, payload)
        .with_correlation_id(request.id.clone())
        .with_causation_id(request.id.clone());
    // The bus whose handler replies: another bus than the requester's sends the reply
    // through the backend when the request names a reply subscription.
    let here = handling_bus()
        .and_then(|bus| bus.downcast::<DeliveryHub>().ok())
        .or_else(default_hub);
    let addressed = reply_to.contains('/');
    {
        let mut table = lock();
        let local = table.get(&request.id).is_some_and(|w| {
            !addressed
                || here
                    .as_ref()
                    .is_none_or(|h| Arc::as_ptr(h) as usize == w.bus)
        });
        if local {
            if let Some(waiter) = table.remove(&request.id) {
                // The caller may give up between the lookup and now: dropped, as documented.
                let _ = waiter.answer.send(answer);
            }
            return Ok(());
        }
    }
    match (addressed, here) {
        (true, Some(shared)) => {
            let answer = answer.with_to_worker(reply_to);
            let (route, answer) = shared.admit(REPLY_TOPIC, answer, false)?;
            match shared.accept(route, answer, false, None).await {
                Ok(_) => Ok(()),
                // The requester's node is gone (stopped, evicted): nobody waits any more.
                Err(CoreError::UnknownWorker { .. }) => {
                    tracing::debug!(target: crate::constant::target::DELIVERY, id = %request.id, reply_to, "reply to a node that no longer runs; dropped");
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
        _ => {
            tracing::debug!(target: crate::constant::target::DELIVERY, id = %request.id, "reply to a request nobody waits for (timed out or answered already); dropped");
            Ok(())
        }
    }
}

/// The handler of the reply subscription: hands a reply that came through the backend to
/// its waiter; a reply nobody waits for (late, second) is dropped, and acked.
fn reply_subscription() -> HandlerSpec {
    HandlerSpec::new(
        REPLY_HANDLER,
        REPLY_TOPIC,
        handler_fn(|answer: EMessage| async move {
            let waiter = answer
                .metadata
                .correlation_id
                .as_deref()
                .and_then(|id| lock().remove(id));
            match waiter {
                Some(waiter) => {
                    let _ = waiter.answer.send(answer);
                }
                None => {
                    tracing::debug!(target: crate::constant::target::DELIVERY, id = %answer.id, "reply nobody waits for (timed out or answered already); dropped");
                }
            }
            Ack::Ack
        }),
    )
}

// linkme places the entry in a link section, which `deny(unsafe_code)` flags: no unsafe code
// of ours is involved (the same as a `#[handler]`'s registration).
#[allow(unsafe_code)]
#[linkme::distributed_slice(REPLY_SUBSCRIPTION)]
static REPLIES: ReplySubscription = reply_subscription;

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
