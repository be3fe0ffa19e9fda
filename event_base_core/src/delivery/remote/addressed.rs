//! Messages addressed to a worker of one node of a shared backend:
//! `to_worker: Some("<node id>/<worker>")` (only when the bus has a shared backend,
//! `QueueFactory::routes`; without one a `to_worker` is a worker name as it stands).
//!
//! - The node may be named by its name (`<node name>/<worker>`): the backend tells names
//!   from ids and resolves a name to the id of the one running node of that name that runs
//!   the worker's handler ([`EProducer::resolve_node`]; the Redis backend: ids are
//!   `<pid>-<12 hex digits>`, anything else is a name), refusing none (`UnknownNode`, sent
//!   back as `UnknownWorker`) or several (`QueueError::AmbiguousNode`). The message is then
//!   sent with the id in its `to_worker` (a copy of it; a name is only resolved at send).
//! - An unqualified name keeps its meaning: a worker of that name in whichever node handles
//!   the copy (`delivery/send/accept.rs`, `delivery/subscription/consumer_router.rs`).
//! - A qualified one goes to the subscription of the handler the worker belongs to (a worker
//!   is named `<handler>-<i>`), through that handler's producer, as a copy for a handler
//!   elsewhere does: once queued it is the backend's, whether the node named is this one or
//!   another, so this bus does not count it in flight past the send. The backend hands it to
//!   that node only (the Redis backend: the subscription's broadcast stream, which every
//!   node reads through a group of its own and the other nodes ack unread) and answers
//!   [`QueueError::UnknownNode`] when the node does not run the handler now, which the send
//!   returns as [`CoreError::UnknownWorker`].
//! - In a `send_batch` ([`send_batch_addressed`](DeliveryHub::send_batch_addressed)): every
//!   message is checked and every node named is asked once per subscription whether it reads
//!   it ([`EProducer::reads_addressed`]) before anything is sent, so a node that is gone
//!   refuses the whole batch with `UnknownWorker` and nothing of it is queued. Then the
//!   others go as one batch (one WAL commit), then the addressed ones one by one, in the
//!   batch's order, by a task of their own. A node evicted between the check and its send
//!   still refuses its message: the batch then answers `UnknownWorker`, the plain messages
//!   and the addressed ones before it are queued (and handled), it and the addressed ones
//!   after it are not sent.
//! - Its dead letter is replayed to the same worker of the same node
//!   ([`replay_addressed`](DeliveryHub::replay_addressed)), from any bus: the node is checked
//!   first (gone: `UnknownWorker`, and the dead letter stays), then the dead letter is taken
//!   out (not turned into a live record: the node named settles the message) and the
//!   message sent; a refused or dropped send puts the dead letter back.
//! - Not through a handler's outbox (refused with `CoreError::Config`: an outbox releases by
//!   the topic's handlers here).
//! - A worker name no handler of the topic can have is refused at once with `UnknownWorker`;
//!   a node that runs the handler but no worker of that name dead-letters the message with
//!   `DeadReason::UnknownWorker` (`delivery/subscription/consumer_router.rs`).

use std::sync::Arc;
use std::time::Duration;

use crate::backend::queue::EProducer;
use crate::backend::routes::node_and_worker;
use crate::delivery::hub::DeliveryHub;
use crate::delivery::in_flight::InFlight;
use crate::delivery::remote::elsewhere::{prepare_elsewhere, within};
use crate::delivery::send::accept::prepare;
use crate::delivery::subscription::topic_table::Route;
use crate::error::{CoreError, QueueError};
use crate::message::dead_letter::DeadLetterMessage;
use crate::message::emessage::EMessage;
use crate::message::id::MessageId;
use crate::message::topic::MessageTopic;

/// Whether `worker` is a worker name of `handler`: `<handler>-<i>`.
fn is_worker_of(worker: &str, handler: &str) -> bool {
    worker
        .strip_prefix(handler)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
}

/// Of `handlers`, the one `worker` belongs to (the longest name that fits).
fn handler_of<'h>(worker: &str, handlers: impl Iterator<Item = &'h str>) -> Option<&'h str> {
    handlers
        .filter(|h| is_worker_of(worker, h))
        .max_by_key(|h| h.len())
}

impl DeliveryHub {
    /// [`admit`](Self::admit) of a message with `to_worker` set, on a bus with a shared
    /// backend: a qualified name is admitted for [`accept_addressed`](Self::accept_addressed)
    /// (with the placeholder route, as a send to a topic only others handle); any other as
    /// always.
    #[cold]
    pub(crate) fn admit_to_worker<'s>(
        &'s self,
        topic: &str,
        route: &'s Arc<Route>,
        message: EMessage,
    ) -> Result<(&'s Arc<Route>, Arc<EMessage>), CoreError> {
        match message.to_worker.as_deref().and_then(node_and_worker) {
            Some(_) => self.admit_addressed(topic.to_owned(), message),
            None => Ok((route, prepare(route, message)?)),
        }
    }

    /// Admits a message addressed to a worker of a node (checked as any message); its route
    /// is found when it is sent.
    pub(crate) fn admit_addressed(
        &self,
        topic: String,
        message: EMessage,
    ) -> Result<(&Arc<Route>, Arc<EMessage>), CoreError> {
        let Some(remote) = &self.remote else {
            return Err(CoreError::NoHandler { topic });
        };
        if crate::message::context::holds_sends_to(self as *const DeliveryHub as *const ()) {
            // An outbox releases by the topic's handlers here, not by node: refused rather
            // than sent to the wrong place.
            return Err(CoreError::Config(format!(
                "a message for `{}` addressed to a worker of a node cannot go through a handler's outbox yet; send it from outside the handler, after it acks, or turn the outbox off (HandlerSpec::outbox(false))",
                message.to_worker.as_deref().unwrap_or_default()
            )));
        }
        if topic.starts_with(crate::constant::SYSTEM_PREFIX) {
            // The system topics carried between nodes reach every node; none is addressed.
            return Err(CoreError::UnknownWorker {
                topic,
                worker: message.to_worker.unwrap_or_default(),
            });
        }
        Ok((&remote.placeholder, prepare_elsewhere(topic, message)?))
    }

    /// Sends a message addressed to `<node>/<worker>` to the subscription of the worker's
    /// handler, here or elsewhere, and waits until the backend has it (see the module docs).
    pub(crate) async fn accept_addressed(
        &self,
        message: Arc<EMessage>,
        timeout: Option<Duration>,
    ) -> Result<MessageId, CoreError> {
        let topic = message.topic.clone();
        let id = MessageId::from(&message.id);
        let work = async {
            let producer = self.addressed_producer(&topic, &message).await?;
            let message = by_node_id(&*producer, message.clone()).await?;
            send_addressed(&*producer, message).await
        };
        within(&topic, timeout, work).await?;
        Ok(id)
    }

    /// Whether `message` is addressed to a worker of a node (`<node>/<worker>`, on a bus
    /// with a shared backend).
    pub(crate) fn is_addressed(&self, message: &EMessage) -> bool {
        self.remote.is_some()
            && message
                .to_worker
                .as_deref()
                .and_then(node_and_worker)
                .is_some()
    }

    /// Whether `messages` (a batch) holds one addressed to a worker of a node: such a batch
    /// goes through [`send_batch_addressed`](Self::send_batch_addressed).
    pub(crate) fn any_addressed(&self, messages: &[EMessage]) -> bool {
        messages.iter().any(|m| self.is_addressed(m))
    }

    /// Replays `dead`, a dead letter addressed to a worker of a node, as `message` (admitted,
    /// `attempts` reset): to that worker of that node again. The node is checked first: one
    /// that does not read the stream now (stopped, evicted) answers `UnknownWorker` and the
    /// dead letter stays. Otherwise the dead letter is taken out and the message sent; a send
    /// refused (the node evicted meanwhile) or dropped before it is queued puts the dead
    /// letter back.
    pub(crate) async fn replay_addressed(
        &self,
        dead: &DeadLetterMessage,
        message: Arc<EMessage>,
    ) -> Result<MessageId, CoreError> {
        let producer = self.addressed_producer(&message.topic, &message).await?;
        // (A dead letter names its node by id: a name was resolved when it was sent.)
        let message = by_node_id(&*producer, message).await?;
        let to_worker = message.to_worker.as_deref().unwrap_or_default();
        let node = node_and_worker(to_worker).map_or("", |(node, _)| node);
        if !producer.reads_addressed(node).await? {
            return Err(CoreError::UnknownWorker {
                topic: message.topic.0.clone(),
                worker: to_worker.to_owned(),
            });
        }
        // Taken out, not replaced by a live record: once queued the message is the
        // backend's, and the node named settles it (this bus's WAL would never see it end).
        if self.wal.take_dead_letter(&message.id).await?.is_none() {
            // Replayed or deleted meanwhile, by another caller.
            return Err(CoreError::NotFound(message.id.clone()));
        }
        let mut restore = PutBack {
            shared: self,
            dead: Some(dead),
        };
        send_addressed(&*producer, message.clone()).await?;
        restore.dead = None;
        Ok(MessageId::from(&message.id))
    }

    /// [`send_batch`](Self::send_batch) of a batch with messages addressed to a worker of a
    /// node (see the module docs): every message checked, and every node named asked once
    /// per subscription whether it reads it, before anything is sent; then the others as
    /// one batch, then the addressed ones in order, by a task of their own.
    pub(crate) async fn send_batch_addressed(
        &self,
        topic: &str,
        messages: Vec<EMessage>,
    ) -> Result<Vec<MessageId>, CoreError> {
        // In flight before the check, as a single send is (`delivery/send/accept.rs`), and until the
        // addressed ones are queued.
        let sending = Sending::new(&self.in_flight);
        if !self.accepting.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(CoreError::SystemShutdown);
        }
        let mut plain = Vec::new();
        let mut addressed = Vec::new();
        // Per message, in order: whether it is addressed (its id is then `addressed`'s next).
        let mut order = Vec::with_capacity(messages.len());
        for message in messages {
            let qualified = message
                .to_worker
                .as_deref()
                .and_then(node_and_worker)
                .is_some();
            order.push(qualified);
            if qualified {
                addressed.push(self.admit_addressed(topic.to_owned(), message)?.1);
            } else {
                plain.push(message);
            }
        }
        let mut sends: Vec<(Arc<dyn EProducer>, Arc<EMessage>)> = Vec::new();
        // (subscription, node) pairs asked, with the node's id when it was named by name:
        // the producer's address stands for the subscription.
        let mut asked: Vec<((usize, &str), Option<String>)> = Vec::new();
        for message in &addressed {
            let producer = self.addressed_producer(&message.topic, message).await?;
            let to_worker = message.to_worker.as_deref().unwrap_or_default();
            let (node, worker) = node_and_worker(to_worker).unwrap_or_default();
            let key = (Arc::as_ptr(&producer) as *const () as usize, node);
            let id = match asked.iter().find(|(k, _)| *k == key) {
                Some((_, id)) => id.clone(),
                None => {
                    // A name is resolved to a node that reads the stream; an id is asked.
                    let id = producer
                        .resolve_node(node)
                        .await
                        .map_err(|e| addressed_error(message, e))?;
                    if id.is_none() && !producer.reads_addressed(node).await? {
                        return Err(CoreError::UnknownWorker {
                            topic: topic.to_owned(),
                            worker: to_worker.to_owned(),
                        });
                    }
                    asked.push((key, id.clone()));
                    id
                }
            };
            let message = match id {
                Some(id) => with_node_id(message, &id, worker),
                None => message.clone(),
            };
            sends.push((producer, message));
        }
        let mut plain_ids = match plain.is_empty() {
            true => Vec::new(),
            false => Box::pin(self.send_batch(topic, plain)).await?,
        }
        .into_iter();
        let mut addressed_ids = addressed.iter().map(|m| MessageId::from(&m.id));
        let ids = order
            .into_iter()
            .filter_map(|qualified| match qualified {
                true => addressed_ids.next(),
                false => plain_ids.next(),
            })
            .collect();
        // By a task of their own, so that a dropped call does not stop them half-way.
        let rest = async move {
            for (producer, message) in sends {
                send_addressed(&*producer, message).await?;
            }
            drop(sending);
            Ok::<(), CoreError>(())
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime.spawn(rest).await.map_err(|e| {
                CoreError::Internal(format!("addressed batch queueing task failed: {e}"))
            })??,
            Err(_) => rest.await?,
        }
        Ok(ids)
    }

    /// The producer of the subscription whose handler the addressed worker belongs to: a
    /// local handler's, or one only other processes run (by the registry, looked up once if
    /// the cache does not list the topic).
    async fn addressed_producer(
        &self,
        topic: &MessageTopic,
        message: &EMessage,
    ) -> Result<Arc<dyn EProducer>, CoreError> {
        let to_worker = message.to_worker.as_deref().unwrap_or_default();
        let unknown = || CoreError::UnknownWorker {
            topic: topic.0.clone(),
            worker: to_worker.to_owned(),
        };
        let (_, worker) = node_and_worker(to_worker).ok_or_else(unknown)?;
        if let Some(route) = self.topics.get(topic.as_str()) {
            if let Some(h) = handler_of(worker, route.subs.iter().map(|s| &*s.handler)) {
                if let Some(sub) = route.sub(h) {
                    return Ok(sub.producer.clone());
                }
            }
            let elsewhere = route.elsewhere.subs();
            let h =
                handler_of(worker, elsewhere.iter().map(|s| &*s.handler)).ok_or_else(unknown)?;
            return elsewhere
                .iter()
                .find(|s| &*s.handler == h)
                .map(|s| s.producer.clone())
                .ok_or_else(unknown);
        }
        let Some(remote) = &self.remote else {
            return Err(unknown());
        };
        let route = remote
            .route(topic)
            .await?
            .ok_or_else(|| CoreError::NoHandler {
                topic: topic.0.clone(),
            })?;
        let elsewhere = route.elsewhere.subs();
        let h = handler_of(worker, elsewhere.iter().map(|s| &*s.handler)).ok_or_else(unknown)?;
        elsewhere
            .iter()
            .find(|s| &*s.handler == h)
            .map(|s| s.producer.clone())
            .ok_or_else(unknown)
    }
}

/// Puts a dead letter taken out for a replay back, unless the replay's send went through
/// (`dead` set to `None` then).
pub(crate) struct PutBack<'a> {
    pub(crate) shared: &'a DeliveryHub,
    pub(crate) dead: Option<&'a DeadLetterMessage>,
}

impl Drop for PutBack<'_> {
    fn drop(&mut self) {
        self.shared.restore_dead_letter(self.dead);
    }
}

/// A send in progress, counted in flight until dropped.
struct Sending(Arc<InFlight>);

impl Sending {
    fn new(in_flight: &Arc<InFlight>) -> Self {
        in_flight.add();
        Sending(in_flight.clone())
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        self.0.done();
    }
}

/// Sends an addressed message through `producer` (its worker's subscription), and answers
/// `UnknownWorker` when the node named does not read it.
async fn send_addressed(producer: &dyn EProducer, message: Arc<EMessage>) -> Result<(), CoreError> {
    producer
        .send(message.clone())
        .await
        .map_err(|e| addressed_error(&message, e))
}

/// `message` with its node named by id: a node name (`<node name>/<worker>`) resolved by
/// the backend to the one running node of that name that runs the worker's handler
/// ([`EProducer::resolve_node`]); an id, as it is.
async fn by_node_id(
    producer: &dyn EProducer,
    message: Arc<EMessage>,
) -> Result<Arc<EMessage>, CoreError> {
    let to_worker = message.to_worker.as_deref().unwrap_or_default();
    let Some((node, worker)) = node_and_worker(to_worker) else {
        return Ok(message);
    };
    match producer.resolve_node(node).await {
        Ok(None) => Ok(message),
        Ok(Some(id)) => Ok(with_node_id(&message, &id, worker)),
        Err(e) => Err(addressed_error(&message, e)),
    }
}

/// A copy of `message` addressed to `worker` of the node `id`.
fn with_node_id(message: &EMessage, id: &str, worker: &str) -> Arc<EMessage> {
    let mut message = message.clone();
    message.to_worker = Some(format!("{id}/{worker}"));
    Arc::new(message)
}

/// The error of a queue refusing an addressed `message`: a node that does not read it is
/// `UnknownWorker`, as a send answers for a worker no node has.
fn addressed_error(message: &EMessage, e: QueueError) -> CoreError {
    match e {
        QueueError::UnknownNode { .. } => CoreError::UnknownWorker {
            topic: message.topic.0.clone(),
            worker: message.to_worker.clone().unwrap_or_default(),
        },
        e => CoreError::from(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_qualified_name_splits_at_its_first_slash() {
        assert_eq!(node_and_worker("41-ab/ship-0"), Some(("41-ab", "ship-0")));
        assert_eq!(node_and_worker("41-ab/a/b-1"), Some(("41-ab", "a/b-1")));
        assert_eq!(node_and_worker("ship-0"), None);
        assert_eq!(node_and_worker("/ship-0"), None);
        assert_eq!(node_and_worker("41-ab/"), None);
    }

    #[test]
    fn a_worker_belongs_to_the_longest_handler_it_is_named_after() {
        let handlers = ["ship", "ship-fast", "bill"];
        assert_eq!(handler_of("ship-3", handlers.iter().copied()), Some("ship"));
        assert_eq!(
            handler_of("ship-fast-0", handlers.iter().copied()),
            Some("ship-fast")
        );
        assert_eq!(handler_of("ship-x", handlers.iter().copied()), None);
        assert_eq!(handler_of("pack-0", handlers.iter().copied()), None);
        assert_eq!(handler_of("ship-", handlers.iter().copied()), None);
    }
}
