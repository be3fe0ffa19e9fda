//! Announcements: what the bus publishes on its own `_system.` topics (dead letters, audit
//! batches, worker discovery, the topic table, shutdown acks), only when something subscribes.
//!
//! With a queue backend shared by several processes (`QueueFactory::routes`), "something"
//! includes the handlers of the topic that other processes run, as the backend's cached
//! registry lists them (the Redis backend carries the cluster-wide system topics, discovery,
//! topic tables and shutdown acks, to every node that subscribes). Whether anyone subscribes
//! is then one more look-up in that cache: still no I/O when nobody does. What is announced
//! about workers and topics is built in `system_topics/`; this file sends it.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::queue::TrySendError;
use crate::delivery::hub::DeliveryHub;
use crate::delivery::remote::elsewhere::RemoteSub;
use crate::delivery::send::accept::prepare;
use crate::delivery::subscription::topic_table::Route;
use crate::message::emessage::EMessage;
use crate::message::topic::MessageTopic;

/// The longest a build waits for the shared backend's registry to say who subscribes to
/// the announcements it makes at start (its workers' `Joined`, its topic table).
const LOOK_UP_WAIT: Duration = Duration::from_secs(1);

impl DeliveryHub {
    /// Whether an announcement on `topic` reaches anyone: a handler in this process, or
    /// one the shared backend's registry lists in another (as last refreshed; no I/O).
    pub(crate) fn subscribed(&self, topic: &str) -> bool {
        self.topics.contains_key(topic)
            || self
                .remote
                .as_ref()
                .is_some_and(|r| !r.provider.handlers_of(topic).is_empty())
    }

    /// Before announcements that matter on a shared backend (a bus's first ones, its
    /// shutdown acks): reads from the registry who subscribes to `topics` elsewhere (the
    /// cache may be older than that subscriber, or not read yet), waiting at most
    /// [`LOOK_UP_WAIT`]; a failure leaves the cache as it is (it is read again with the
    /// backend's next refresh).
    pub(crate) async fn look_up_subscribers(&self, topics: &[&str]) {
        let Some(remote) = &self.remote else { return };
        let look = async {
            for &topic in topics {
                if let Err(e) = remote.provider.look_up(topic).await {
                    tracing::debug!(target: crate::constant::target::SYSTEM, topic, error = %e, "could not read who subscribes elsewhere; announcements reach them after the next refresh");
                }
            }
        };
        let _ = tokio::time::timeout(LOOK_UP_WAIT, look).await;
    }

    /// The handlers of `topic` only other processes run (none here: `local` has none of
    /// them), from the backend's cached registry.
    fn subscribers_elsewhere(&self, topic: &str, local: Option<&Arc<Route>>) -> Vec<RemoteSub> {
        let Some(remote) = &self.remote else {
            return Vec::new();
        };
        if remote.provider.handlers_of(topic).is_empty() {
            return Vec::new();
        }
        let Some(route) = remote.route_now(&MessageTopic::from(topic)) else {
            return Vec::new();
        };
        let subs = route.elsewhere.subs();
        subs.iter()
            .filter(|s| local.is_none_or(|l| l.sub(&s.handler).is_none()))
            .cloned()
            .collect()
    }

    /// Publishes on a system topic if some handler subscribes to it, here or (with a
    /// shared backend) in another process; never waits for room, and works during shutdown
    /// too (shutdown acks are published then).
    pub(crate) async fn announce<T: serde::Serialize>(&self, topic: &str, value: &T) {
        let local = self.topics.get(topic);
        let elsewhere = self.subscribers_elsewhere(topic, local);
        if local.is_none() && elsewhere.is_empty() {
            return;
        }
        let bytes = match serde_json::to_vec(value) {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::error!(target: crate::constant::target::SYSTEM, topic, error = %e, "could not encode system announcement");
                return;
            }
        };
        let msg = EMessage::standard(topic, bytes);
        let copy = (!elsewhere.is_empty()).then(|| msg.clone());
        if let Some(route) = local {
            // Announcements go out during shutdown too (shutdown acks among them), so they
            // skip the `accepting` check of `admit`.
            let sent = match prepare(route, msg) {
                // Never waiting for room (`try_send`), and no deadline.
                Ok(m) => self.accept_core(route, m, true, None).await,
                Err(e) => Err(e),
            };
            if let Err(e) = sent {
                tracing::warn!(target: crate::constant::target::SYSTEM, topic, error = %e, "system announcement dropped");
            }
        }
        let Some(mut copy) = copy else { return };
        // The copies for other processes are the backend's once queued (as any copy for a
        // handler elsewhere): not in this bus's WAL, not counted in flight.
        if copy.attempts == 0 {
            copy.attempts = 1;
        }
        let copy = Arc::new(copy);
        for sub in &elsewhere {
            match sub.producer.try_send(copy.clone()) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    tracing::warn!(target: crate::constant::target::SYSTEM, topic, handler = %sub.handler, "system announcement for a handler another process runs dropped: its queue is full")
                }
                Err(TrySendError::Failed(e)) => {
                    tracing::warn!(target: crate::constant::target::SYSTEM, topic, handler = %sub.handler, error = %e, "system announcement for a handler another process runs dropped")
                }
            }
        }
    }
}
