//! [`RemoteTable`]: the routes of a bus to the handlers other processes run, from a shared
//! backend's registry ([`RemoteRoutes`]), built once per topic and updated on each refresh
//! of the backend's cache. The send path that uses it is `remote_routes.rs`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::backend::routes::RemoteRoutes;
use crate::delivery::remote::elsewhere::RemoteSub;
use crate::delivery::remote::sent_to::SentTo;
use crate::delivery::settle::sender_completions::SenderCompletions;
use crate::delivery::subscription::topic_table::{Route, TopicTable};
use crate::error::CoreError;
use crate::message::topic::MessageTopic;

/// The routes of a bus to handlers elsewhere (see the module docs).
pub(crate) struct RemoteTable {
    pub(crate) provider: Arc<dyn RemoteRoutes>,
    /// Topics with no handler in this process that the registry listed: built once, kept.
    routes: RwLock<HashMap<MessageTopic, Arc<Route>>>,
    /// The route a send to a topic with no handler here is admitted with (no handler, an
    /// empty topic): the send then finds its route by the message's topic.
    pub(crate) placeholder: Arc<Route>,
    /// The shared subscriptions the bus sent to (its handlers' and those elsewhere), for
    /// `wait_idle`.
    pub(crate) sent_to: Arc<SentTo>,
    /// Records of messages sent to shared queues only, completed once the backend confirmed
    /// their copies.
    pub(crate) completions: SenderCompletions,
}

impl RemoteTable {
    pub(crate) fn new(provider: Arc<dyn RemoteRoutes>, sent_to: Arc<SentTo>) -> Self {
        RemoteTable {
            provider,
            routes: RwLock::new(HashMap::new()),
            placeholder: Arc::new(Route::elsewhere_only(MessageTopic::from(""))),
            sent_to,
            completions: SenderCompletions::default(),
        }
    }

    fn cached(&self, topic: &MessageTopic) -> Option<Arc<Route>> {
        self.routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .cloned()
    }

    /// The route of `topic`, a topic with no handler in this process, to the handlers the
    /// registry lists; `None` if it lists none, even after a look-up in the registry.
    pub(crate) async fn route(
        &self,
        topic: &MessageTopic,
    ) -> Result<Option<Arc<Route>>, CoreError> {
        if let Some(route) = self.cached(topic) {
            if route.elsewhere.any() {
                return Ok(Some(route));
            }
        }
        let mut handlers = self.provider.handlers_of(topic.as_str());
        if handlers.is_empty() {
            handlers = self.provider.look_up(topic.as_str()).await?;
        }
        if handlers.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.build(topic, &handlers)))
    }

    /// The route of `topic` now, without a look-up (for a message an outbox released).
    /// The queues of every subscription this table routes to (the topics with no handler
    /// here that it has met), for `EventBus::cancel` to ask.
    pub(crate) fn producers(&self) -> Vec<Arc<dyn crate::backend::EProducer>> {
        let Ok(routes) = self.routes.read() else {
            return Vec::new();
        };
        routes
            .values()
            .flat_map(|route| {
                route
                    .elsewhere
                    .subs()
                    .iter()
                    .map(|s| s.producer.clone())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    pub(crate) fn route_now(&self, topic: &MessageTopic) -> Option<Arc<Route>> {
        match self.cached(topic) {
            Some(route) if route.elsewhere.any() => Some(route),
            _ => {
                let handlers = self.provider.handlers_of(topic.as_str());
                (!handlers.is_empty()).then(|| self.build(topic, &handlers))
            }
        }
    }

    /// Looks the topic of `route`, a topic with handlers here, up in the registry now and
    /// sets its handlers elsewhere (those the bus does not run), for a replay at start that
    /// may come before the first refresh of the cache.
    pub(crate) async fn look_up_local(&self, route: &Route) -> Result<(), CoreError> {
        if route.topic.is_system() {
            return Ok(());
        }
        let handlers = self.provider.look_up(route.topic.as_str()).await?;
        let others = handlers.into_iter().filter(|h| route.sub(h).is_none());
        let subs = self.subs_for(route, others);
        if !subs.is_empty() || route.elsewhere.any() {
            route.elsewhere.set(subs);
        }
        Ok(())
    }

    /// Makes (or updates) the kept route of `topic` to `handlers`.
    fn build(&self, topic: &MessageTopic, handlers: &[Arc<str>]) -> Arc<Route> {
        let mut routes = self.routes.write().unwrap_or_else(|e| e.into_inner());
        let route = routes
            .entry(topic.clone())
            .or_insert_with(|| Arc::new(Route::elsewhere_only(topic.clone())))
            .clone();
        drop(routes);
        route
            .elsewhere
            .set(self.subs_for(&route, handlers.iter().cloned()));
        route
    }

    /// The subscriptions of `handlers` on `route`'s topic, reusing those it has.
    fn subs_for(&self, route: &Route, handlers: impl Iterator<Item = Arc<str>>) -> Vec<RemoteSub> {
        let current = route.elsewhere.subs();
        let mut subs = Vec::new();
        for handler in handlers {
            if let Some(sub) = current.iter().find(|s| s.handler == handler) {
                subs.push(sub.clone());
                continue;
            }
            match self.provider.producer(&route.topic, &handler) {
                Ok(producer) => {
                    let producer = if route.topic.is_system() {
                        producer
                    } else {
                        self.sent_to.track(&route.topic, &handler, false, producer)
                    };
                    subs.push(RemoteSub { handler, producer })
                }
                Err(e) => {
                    tracing::warn!(target: crate::constant::target::DELIVERY, topic = %route.topic, %handler, error = %e, "cannot open the queue of a handler another process runs; it gets no copies until the next refresh")
                }
            }
        }
        subs
    }

    /// After a refresh of the backend's cache: the handlers elsewhere of every route, those
    /// of `local` (the bus's own topics, less the handlers the bus runs) and the kept ones.
    pub(crate) fn refresh(&self, local: &TopicTable) {
        for route in local.values() {
            if route.topic.is_system() {
                continue;
            }
            let others = self
                .provider
                .handlers_of(route.topic.as_str())
                .into_iter()
                .filter(|h| route.sub(h).is_none());
            let subs = self.subs_for(route, others);
            if !subs.is_empty() || route.elsewhere.any() {
                route.elsewhere.set(subs);
            }
        }
        let kept: Vec<Arc<Route>> = self
            .routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for route in kept {
            let handlers = self.provider.handlers_of(route.topic.as_str());
            route
                .elsewhere
                .set(self.subs_for(&route, handlers.into_iter()));
        }
    }
}
