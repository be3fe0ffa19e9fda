//! Routes to the handlers other processes run, from a shared backend's registry
//! ([`RemoteRoutes`](crate::backend::RemoteRoutes)): a send to a topic with no handler in this process goes to the
//! handlers the registry lists for it, and a send to a topic with handlers here also goes to
//! those of its handlers only other processes run.
//!
//! - The fixed topic table is looked up first, as always; only a miss comes here
//!   ([`DeliveryHub::admit_elsewhere`]), so the send path of a local topic does not change but
//!   for one flag on its route ([`Elsewhere::any`](crate::delivery::remote::elsewhere::Elsewhere::any)).
//! - The route of a topic handled elsewhere is built once, from the backend's cached
//!   registry, and kept in a small map beside the table ([`RemoteTable`](crate::delivery::remote::remote_table::RemoteTable)); each refresh of
//!   the backend's cache updates the handlers of every route, local ones included.
//! - A topic the cache does not list is looked up in the registry once
//!   ([`RemoteRoutes::look_up`](crate::backend::RemoteRoutes::look_up), rate-limited by the backend) before the send is refused
//!   with [`CoreError::NoHandler`].
//!
//! The copies for handlers elsewhere are queued before `send` answers, as local copies are:
//! `send` waits for room in a full queue, `try_send` answers `QueueFull`, a timeout answers
//! `Timeout`, so `Wal::flush` on the Redis WAL covers every copy of an accepted send. Once
//! queued, a copy is the backend's: this bus counts the send in flight while it queues its
//! copies, and no longer (the handling process counts and completes it). A topic with a
//! local handler writes its WAL record and checks the dedup window first: a duplicate id is
//! sent to no handler. A record whose topic only other processes handle (an outbox's, or one
//! replayed at start) leaves this bus's WAL once the backend confirmed every copy
//! ([`RemoteRoutes::flush`](crate::backend::RemoteRoutes::flush)).

use std::sync::Arc;
use std::time::Duration;

use crate::backend::routes::node_and_worker;
use crate::backend::routes::RemoteRoutes;
use crate::backend::wal::Wal;
use crate::delivery::hub::DeliveryHub;
use crate::delivery::remote::addressed::PutBack;
use crate::delivery::remote::elsewhere::{
    prepare_elsewhere, queue_all_elsewhere, queue_elsewhere, within, RemoteSub,
};
use crate::delivery::remote::remote_table::RemoteTable;
use crate::delivery::subscription::topic_table::Route;
use crate::error::CoreError;
use crate::message::dead_letter::DeadLetterMessage;
use crate::message::emessage::EMessage;
use crate::message::id::MessageId;
use crate::message::topic::MessageTopic;

/// Follows the backend's refreshes for `shared` (until the bus is gone), and takes the
/// cache as it is now.
pub(crate) fn follow_refreshes(shared: &Arc<DeliveryHub>) {
    let Some(remote) = &shared.remote else { return };
    let weak = Arc::downgrade(shared);
    remote
        .provider
        .on_refresh(Box::new(move || match weak.upgrade() {
            Some(shared) => {
                if let Some(remote) = &shared.remote {
                    remote.refresh(&shared.topics);
                }
                true
            }
            None => false,
        }));
    remote.refresh(&shared.topics);
}

impl DeliveryHub {
    /// The handlers of `topic` a send reaches in other processes now: for a topic with
    /// handlers here, those the bus adds to them; for another, those the registry lists.
    pub(crate) fn handlers_elsewhere(&self, topic: &str) -> Vec<String> {
        let Some(remote) = &self.remote else {
            return Vec::new();
        };
        let mut handlers: Vec<String> = match self.topics.get(topic) {
            Some(route) => route
                .elsewhere
                .subs()
                .iter()
                .map(|s| s.handler.to_string())
                .collect(),
            None if topic.starts_with(crate::constant::SYSTEM_PREFIX) => Vec::new(),
            None => remote
                .provider
                .handlers_of(topic)
                .iter()
                .map(|h| h.to_string())
                .collect(),
        };
        handlers.sort();
        handlers
    }

    /// Admits a message for `topic`, which has no handler in this process, when a shared
    /// backend may know handlers elsewhere: checked as any message, and admitted with the
    /// placeholder route (the send looks its route up by the message's topic).
    pub(crate) fn admit_elsewhere(
        &self,
        topic: String,
        message: EMessage,
    ) -> Result<(&Arc<Route>, Arc<EMessage>), CoreError> {
        let Some(remote) = &self.remote else {
            return Err(CoreError::NoHandler { topic });
        };
        if topic.starts_with(crate::constant::SYSTEM_PREFIX) {
            return Err(CoreError::NoHandler { topic });
        }
        if let Some(worker) = &message.to_worker {
            if node_and_worker(worker).is_some() {
                // A worker of a node named: to that node, by the worker's handler.
                return self.admit_addressed(topic, message);
            }
            // An unqualified name is a worker of this process: none runs a handler here.
            return Err(CoreError::UnknownWorker {
                topic,
                worker: worker.clone(),
            });
        }
        Ok((&remote.placeholder, prepare_elsewhere(topic, message)?))
    }

    /// Sends `message` (admitted with [`admit_elsewhere`](Self::admit_elsewhere)) to the
    /// handlers of its topic elsewhere: refused with `NoHandler` if the registry lists none.
    /// Every copy is queued before this answers (see the module docs for `try_send` and
    /// timeouts).
    pub(crate) async fn accept_elsewhere(
        &self,
        message: Arc<EMessage>,
        try_send: bool,
        timeout: Option<Duration>,
    ) -> Result<MessageId, CoreError> {
        let Some(remote) = &self.remote else {
            return Err(CoreError::NoHandler {
                topic: message.topic.0.clone(),
            });
        };
        if message
            .to_worker
            .as_deref()
            .and_then(node_and_worker)
            .is_some()
        {
            return self.accept_addressed(message, timeout).await;
        }
        let topic = message.topic.clone();
        let id = MessageId::from(&message.id);
        let work = async {
            let route = remote_route(remote, &topic).await?;
            queue_elsewhere(&route.elsewhere.subs(), &message, try_send).await
        };
        within(&topic, timeout, work).await?;
        Ok(id)
    }

    /// A dead letter of a topic only other processes handle, sent again (`message`, as
    /// admitted for the replay) to the handlers whose copy died, those the registry still
    /// lists (all of the topic's, if it lists none of them); `NoHandler` if it lists none.
    /// Taken out of the WAL rather than replaced by a live record, as an addressed replay
    /// is: once queued the copies are the backend's, and the nodes that claim them settle
    /// them. Put back if the send fails or the call is dropped first.
    pub(crate) async fn replay_elsewhere(
        &self,
        dead: &DeadLetterMessage,
        message: Arc<EMessage>,
    ) -> Result<MessageId, CoreError> {
        let Some(remote) = &self.remote else {
            return Err(CoreError::NoHandler {
                topic: message.topic.0.clone(),
            });
        };
        let route = remote_route(remote, &message.topic).await?;
        let subs = route.elsewhere.subs();
        let named: Vec<RemoteSub> = subs
            .iter()
            .filter(|s| dead.handlers.iter().any(|h| h.as_str() == &*s.handler))
            .cloned()
            .collect();
        let targets = if named.is_empty() {
            subs.to_vec()
        } else {
            named
        };
        if self.wal.take_dead_letter(&message.id).await?.is_none() {
            // Replayed or deleted meanwhile, by another caller.
            return Err(CoreError::NotFound(message.id.clone()));
        }
        let mut restore = PutBack {
            shared: self,
            dead: Some(dead),
        };
        queue_elsewhere(&targets, &message, false).await?;
        restore.dead = None;
        Ok(MessageId::from(&message.id))
    }

    /// [`send_batch`](Self::send_batch) to a topic with no handler in this process: every
    /// message checked first, the route found once, then every copy pushed onto the backend
    /// at once (the Redis writer pipelines them), waiting for room where a queue is full.
    pub(crate) async fn send_batch_elsewhere(
        &self,
        topic: String,
        messages: Vec<EMessage>,
    ) -> Result<Vec<MessageId>, CoreError> {
        let Some(remote) = &self.remote else {
            return Err(CoreError::NoHandler { topic });
        };
        let mut admitted = Vec::with_capacity(messages.len());
        // (Those addressed to a worker of a node were taken out: `send_batch_addressed`.)
        for message in messages {
            admitted.push(self.admit_elsewhere(topic.clone(), message)?.1);
        }
        let ids = admitted.iter().map(|m| MessageId::from(&m.id)).collect();
        if admitted.is_empty() {
            return Ok(ids);
        }
        let route = remote_route(remote, &MessageTopic::from(topic)).await?;
        queue_all_elsewhere(route.elsewhere.subs(), admitted).await?;
        Ok(ids)
    }

    /// Messages an outbox released, for topics with no handler here (they are in this bus's
    /// WAL): routed by the registry as cached now (no look-up), then sent to the handlers
    /// elsewhere the way [`send_batch`](Self::send_batch) sends, by a task of their own (the
    /// releasing worker does not wait; the bus counts the task in flight, so `wait_idle` and
    /// `Drain` wait for it), and completed in the WAL once the backend confirmed every copy.
    /// A topic no node handles any more leaves its messages in the WAL, for the next start.
    pub(crate) fn release_elsewhere(&self, messages: Vec<Arc<EMessage>>) {
        let Some(remote) = &self.remote else { return };
        let mut groups = Vec::new();
        for (topic, group) in by_topic(messages) {
            match remote.route_now(&topic) {
                Some(route) => groups.push((route.elsewhere.subs(), group)),
                None => {
                    tracing::warn!(target: crate::constant::target::DELIVERY, %topic, messages = group.len(), "messages an outbox released are for a topic no node handles any more; they stay in the WAL for the next start")
                }
            }
        }
        if groups.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(target: crate::constant::target::DELIVERY, "no runtime to send what an outbox released to other processes; it stays in the WAL for the next start");
            return;
        };
        let wal = self.wal.clone();
        let provider = remote.provider.clone();
        let in_flight = self.in_flight.clone();
        in_flight.add();
        runtime.spawn(async move {
            if let Err(e) = send_and_complete(groups, &*wal, &*provider).await {
                tracing::warn!(target: crate::constant::target::DELIVERY, error = %e, "could not send what an outbox released to other processes; it stays in the WAL for the next start");
            }
            // As in `sender_completions`: the WAL's handle goes before the count does.
            drop((wal, provider));
            in_flight.done();
        });
    }

    /// Sends records this bus's WAL holds for topics with no handler here (replayed at
    /// start) to the handlers the registry lists (looked up if the cache has none), then
    /// completes them once the backend confirmed every copy. Returns how many were sent, and
    /// the messages of topics no node handles (left as they are).
    pub(crate) async fn send_recorded_elsewhere(
        &self,
        messages: Vec<Arc<EMessage>>,
    ) -> Result<(usize, Vec<Arc<EMessage>>), CoreError> {
        let Some(remote) = &self.remote else {
            return Ok((0, messages));
        };
        let mut unrouted = Vec::new();
        let mut groups = Vec::new();
        for (topic, group) in by_topic(messages) {
            match remote.route(&topic).await? {
                Some(route) => groups.push((route.elsewhere.subs(), group)),
                None => unrouted.extend(group),
            }
        }
        let sent = send_and_complete(groups, &*self.wal, &*remote.provider).await?;
        Ok((sent, unrouted))
    }
}

/// Copies for handlers elsewhere, a topic's messages with its handlers there.
type Groups = Vec<(Arc<Vec<RemoteSub>>, Vec<Arc<EMessage>>)>;

/// Splits `messages` into runs of one topic, in order.
fn by_topic(messages: Vec<Arc<EMessage>>) -> Vec<(MessageTopic, Vec<Arc<EMessage>>)> {
    let mut runs: Vec<(MessageTopic, Vec<Arc<EMessage>>)> = Vec::new();
    for message in messages {
        match runs.last_mut() {
            Some((topic, run)) if *topic == message.topic => run.push(message),
            _ => runs.push((message.topic.clone(), vec![message])),
        }
    }
    runs
}

/// Queues every group's copies, waits until the backend confirmed them, then completes the
/// messages' records in `wal`. Returns how many messages were sent.
async fn send_and_complete(
    groups: Groups,
    wal: &dyn Wal,
    provider: &dyn RemoteRoutes,
) -> Result<usize, CoreError> {
    let mut ids: Vec<Arc<EMessage>> = Vec::new();
    for (subs, messages) in groups {
        ids.extend(messages.iter().cloned());
        queue_all_elsewhere(subs, messages).await?;
    }
    if ids.is_empty() {
        return Ok(0);
    }
    provider.flush().await?;
    let ids: Vec<&str> = ids.iter().map(|m| m.id.as_str()).collect();
    wal.complete_batch(&ids)?;
    Ok(ids.len())
}

/// The route of `topic` (no handler here) to the handlers elsewhere, or `NoHandler`.
async fn remote_route(remote: &RemoteTable, topic: &MessageTopic) -> Result<Arc<Route>, CoreError> {
    remote
        .route(topic)
        .await?
        .ok_or_else(|| CoreError::NoHandler {
            topic: topic.0.clone(),
        })
}
