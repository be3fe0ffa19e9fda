//! A subscription (one handler of a topic) seen from the bus handle: pause, resume, lag.

use std::sync::Arc;

use crate::bus::event_bus::EventBus;
use crate::delivery::subscription::topic_table::TopicEntry;
use crate::error::CoreError;

impl EventBus {
    /// The subscription of handler `handler` on `topic`.
    fn subscription(&self, topic: &str, handler: &str) -> Result<&Arc<TopicEntry>, CoreError> {
        let route = self.shared.delivery.topic(topic);
        route
            .and_then(|r| r.sub(handler))
            .ok_or_else(|| CoreError::UnknownHandler {
                topic: topic.to_owned(),
                handler: handler.to_owned(),
                handlers: route
                    .map(|r| r.subs.iter().map(|s| s.handler.to_string()).collect())
                    .unwrap_or_default(),
            })
    }

    /// Pauses handler `handler` of `topic`: its workers finish what they hold and start
    /// nothing new; its messages wait (in its queue, the WAL, or the shared backend), sends to
    /// the topic go on while the queue has room (then wait, as for a full queue), and the
    /// topic's other handlers are not affected. Pausing a paused handler does nothing.
    ///
    /// A pause lasts until [`resume`](Self::resume) or the end of the process: a restart
    /// starts every handler running. With a shared backend (Redis) it pauses this process's
    /// workers only; the handler's workers in other processes go on. A shutdown that drains
    /// waits for a paused handler's messages until its timeout; what is left replays at the
    /// next start.
    ///
    /// ```
    /// use event_base_core::{CoreError, EventBus};
    ///
    /// /// Holds the welcome mails back while the mail provider is down.
    /// async fn mail_provider_down(bus: &EventBus) -> Result<u64, CoreError> {
    ///     bus.pause("signup", "mailer")?;
    ///     assert!(bus.is_paused("signup", "mailer")?);
    ///     // Sends to "signup" are still accepted; the mailer's lag grows meanwhile.
    ///     bus.lag("signup", "mailer")
    /// }
    ///
    /// async fn mail_provider_back(bus: &EventBus) -> Result<(), CoreError> {
    ///     bus.resume("signup", "mailer")
    /// }
    /// ```
    pub fn pause(&self, topic: &str, handler: &str) -> Result<(), CoreError> {
        let sub = self.subscription(topic, handler)?;
        if sub.pause.pause() {
            tracing::info!(target: crate::constant::target::BUS, %topic, %handler, "handler paused");
        }
        Ok(())
    }

    /// Resumes handler `handler` of `topic` after [`pause`](Self::pause): its workers take
    /// up what waited, in order. Resuming a running handler does nothing.
    pub fn resume(&self, topic: &str, handler: &str) -> Result<(), CoreError> {
        let sub = self.subscription(topic, handler)?;
        if sub.pause.resume() {
            tracing::info!(target: crate::constant::target::BUS, %topic, %handler, "handler resumed");
        }
        Ok(())
    }

    /// Whether handler `handler` of `topic` is paused.
    pub fn is_paused(&self, topic: &str, handler: &str) -> Result<bool, CoreError> {
        Ok(self.subscription(topic, handler)?.pause.is_paused())
    }

    /// The lag of handler `handler` of `topic`: messages accepted for it and not yet
    /// finished by it (acked or dead-lettered): queued, waiting for their key or a retry, or
    /// being handled.
    ///
    /// With a shared backend (Redis), the count is of what this process accepted and
    /// replayed for the handler, or, for messages this process claims from the shared
    /// queue, those it holds; the backend's own view of a consumer group is `ebctl` and
    /// Redis's `XINFO GROUPS`.
    pub fn lag(&self, topic: &str, handler: &str) -> Result<u64, CoreError> {
        Ok(self.subscription(topic, handler)?.counters.in_flight())
    }
}
