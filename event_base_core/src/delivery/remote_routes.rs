//! Routes to the handlers other processes run, from a shared backend's registry
//! ([`RemoteRoutes`](crate::backend::RemoteRoutes)): a send to a topic with no handler in this process goes to the
//! handlers the registry lists for it, and a send to a topic with handlers here also goes to
//! those of its handlers only other processes run.
//!
//! - The fixed topic table is looked up first, as always; only a miss comes here
//!   ([`BusShared::admit_elsewhere`]), so the send path of a local topic does not change but
//!   for one flag on its route ([`Elsewhere::any`](crate::delivery::elsewhere::Elsewhere::any)).
//! - The route of a topic handled elsewhere is built once, from the backend's cached
//!   registry, and kept in a small map beside the table ([`RemoteTable`](crate::delivery::remote_table::RemoteTable)); each refresh of
//!   the backend's cache updates the handlers of every route, local ones included.
//! - A topic the cache does not list is looked up in the registry once
//!   ([`RemoteRoutes::look_up`](crate::backend::RemoteRoutes::look_up), rate-limited by the backend) before the send is refused
//!   with [`CoreError::NoHandler`].
//!
//! A copy for a handler elsewhere belongs to the backend once queued: it is not in this
//! bus's WAL, not counted in flight (`wait_idle` does not wait for it), not checked against
//! the dedup window, and not in this bus's metrics.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::queue::TrySendError;
use crate::bus::shared::BusShared;
use crate::delivery::elsewhere::RemoteSub;
use crate::delivery::topic_table::Route;
use crate::error::CoreError;
use crate::message::emessage::EMessage;
use crate::message::id::MessageId;
use crate::message::topic::MessageTopic;

/// Follows the backend's refreshes for `shared` (until the bus is gone), and takes the
/// cache as it is now.
pub(crate) fn follow_refreshes(shared: &Arc<BusShared>) {
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

impl BusShared {
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
        mut message: EMessage,
    ) -> Result<(&Arc<Route>, Arc<EMessage>), CoreError> {
        let Some(remote) = &self.remote else {
            return Err(CoreError::NoHandler { topic });
        };
        if topic.starts_with(crate::constant::SYSTEM_PREFIX) {
            return Err(CoreError::NoHandler { topic });
        }
        if let Some(worker) = &message.to_worker {
            // Workers are this process's: none runs a handler of this topic.
            return Err(CoreError::UnknownWorker {
                topic,
                worker: worker.clone(),
            });
        }
        crate::delivery::accept::check_id(&message.id)?;
        message.topic = MessageTopic::from(topic);
        if message.attempts == 0 {
            message.attempts = 1;
        }
        crate::message::context::inherit(&mut message);
        Ok((&remote.placeholder, Arc::new(message)))
    }

    /// Sends `message` (admitted with [`admit_elsewhere`](Self::admit_elsewhere)) to the
    /// handlers of its topic elsewhere: refused with `NoHandler` if the registry lists none.
    /// Once one copy is queued the message is accepted, and the other copies are queued
    /// whatever happens.
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
        let topic = message.topic.clone();
        let id = MessageId::from(&message.id);
        let work = async {
            let Some(route) = remote.route(&topic).await? else {
                return Err(CoreError::NoHandler {
                    topic: topic.0.clone(),
                });
            };
            let subs = route.elsewhere.subs();
            let mut queued = 0;
            for sub in subs.iter() {
                if queued > 0 {
                    copy_to(sub, message.clone());
                    continue;
                }
                match sub.producer.try_send(message.clone()) {
                    Ok(()) => {}
                    Err(TrySendError::Full(_)) if try_send => {
                        return Err(CoreError::QueueFull {
                            topic: topic.0.clone(),
                        })
                    }
                    Err(TrySendError::Full(m)) => sub.producer.send(m).await?,
                    Err(TrySendError::Failed(e)) => return Err(e.into()),
                }
                queued += 1;
            }
            Ok(())
        };
        match timeout {
            None => work.await?,
            Some(_) if tokio::runtime::Handle::try_current().is_err() => {
                return Err(CoreError::NoRuntime)
            }
            Some(t) => tokio::time::timeout(t, work)
                .await
                .map_err(|_| CoreError::Timeout {
                    operation: format!("send to `{topic}`"),
                    after: t,
                })??,
        }
        Ok(id)
    }

    /// [`send_batch`](Self::send_batch) to a topic with no handler in this process: each
    /// message sent to the handlers elsewhere in turn.
    pub(crate) async fn send_batch_elsewhere(
        &self,
        topic: String,
        messages: Vec<EMessage>,
    ) -> Result<Vec<MessageId>, CoreError> {
        let mut admitted = Vec::with_capacity(messages.len());
        for message in messages {
            admitted.push(self.admit_elsewhere(topic.clone(), message)?.1);
        }
        let mut ids = Vec::with_capacity(admitted.len());
        for message in admitted {
            ids.push(self.accept_elsewhere(message, false, None).await?);
        }
        Ok(ids)
    }

    /// Queues a copy of an accepted message for each of `route`'s handlers elsewhere,
    /// without waiting (a full queue gets a task that waits for room).
    pub(crate) fn copy_elsewhere(&self, route: &Route, message: &Arc<EMessage>) {
        for sub in route.elsewhere.subs().iter() {
            copy_to(sub, message.clone());
        }
    }

    /// A message an outbox released, for a topic with no handler here: queued for the
    /// handlers elsewhere, and completed in this bus's WAL (which the outbox wrote it to).
    pub(crate) fn release_elsewhere(&self, message: Arc<EMessage>) {
        let route = self
            .remote
            .as_ref()
            .and_then(|r| r.route_now(&message.topic));
        let Some(route) = route else {
            tracing::warn!(target: crate::constant::target::DELIVERY, id = %message.id, topic = %message.topic, "a message an outbox released is for a topic no node handles any more; it stays in the WAL for the next start");
            return;
        };
        self.copy_elsewhere(&route, &message);
        if let Err(e) = self.wal.complete(&message.id) {
            tracing::warn!(target: crate::constant::target::DELIVERY, id = %message.id, error = %e, "could not complete a released message sent to other processes; it may be sent again after a restart");
        }
    }
}

/// Queues a copy for `sub` without waiting: a full queue gets a task that waits for room.
fn copy_to(sub: &RemoteSub, message: Arc<EMessage>) {
    match sub.producer.try_send(message) {
        Ok(()) => {}
        Err(TrySendError::Full(message)) => match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let sub = sub.clone();
                runtime.spawn(async move {
                    if let Err(e) = sub.producer.send(message).await {
                        tracing::warn!(target: crate::constant::target::DELIVERY, handler = %sub.handler, error = %e, "could not queue a copy for a handler another process runs");
                    }
                });
            }
            Err(_) => {
                tracing::warn!(target: crate::constant::target::DELIVERY, id = %message.id, handler = %sub.handler, "no runtime to wait for room in the queue of a handler another process runs; its copy is not sent")
            }
        },
        Err(TrySendError::Failed(e)) => {
            tracing::warn!(target: crate::constant::target::DELIVERY, handler = %sub.handler, error = %e, "could not queue a copy for a handler another process runs")
        }
    }
}
