//! A [`Config`] into an [`EventBusBuilder`]: the backends it names (opened, or connected),
//! the bus settings it sets, its handler overrides.

use std::sync::Arc;
use std::time::Duration;

use super::{Config, QueueKind, WalKind};
use crate::config::sections::NodeKind;
use event_base_core::backend::{QueueFactory, Wal};
use event_base_core::{CoreError, EventBusBuilder, HandlerOverride, NodeType};

/// `wal.batch_max_records` when left out.
#[cfg_attr(not(feature = "persistent"), allow(dead_code))]
pub(crate) const DEFAULT_BATCH_MAX_RECORDS: usize = 128;
/// `wal.batch_max_delay` when left out.
#[cfg_attr(not(feature = "persistent"), allow(dead_code))]
pub(crate) const DEFAULT_BATCH_MAX_DELAY: Duration = Duration::from_millis(2);

impl Config {
    /// Applies this config to `builder`: sets its WAL and queue (opening a persistent WAL,
    /// connecting to Redis), the `[bus]` settings the config sets, and an override per
    /// `[handlers.<name>]` (a name no handler of the bus has fails `build()`, naming it).
    ///
    /// Errors: a backend the config names whose feature is off ([`ConfigError::Invalid`](event_base_core::ConfigError::Invalid)
    /// naming the feature), a WAL that does not open, a Redis server that does not answer.
    pub async fn apply(&self, builder: EventBusBuilder) -> Result<EventBusBuilder, CoreError> {
        let (wal, queue) = self.backends().await?;
        let mut b = builder.wal(wal).queue(queue);
        b = self.bus_settings(b);
        for (name, h) in &self.handlers {
            let mut o = HandlerOverride::new().origin(format!(
                "{}: handlers.{name}",
                self.origins.of(&format!("handlers.{name}"))
            ));
            o.workers = h.workers;
            o.retries = h.retries;
            o.timeout = h.timeout;
            o.rate = h.rate;
            b = b.handler_override(name.clone(), o);
        }
        Ok(b)
    }

    fn bus_settings(&self, mut b: EventBusBuilder) -> EventBusBuilder {
        let bus = &self.bus;
        if let Some(name) = &bus.name {
            b = b.name(name.clone());
        }
        if let Some(name) = &bus.node_name {
            b = b.node_name(name.clone());
        }
        if let Some(kind) = bus.node_type {
            b = b.node_type(match kind {
                NodeKind::Host => NodeType::Host,
                NodeKind::Worker => NodeType::Worker,
            });
        }
        if let Some(n) = bus.batch_size {
            b = b.batch_size(n);
        }
        if let Some(window) = bus.dedup_window {
            b = b.dedup_window(window);
        }
        if let Some(n) = bus.audit_capacity {
            b = b.audit(n);
        }
        b
    }

    /// The WAL and the queue factory the config names.
    async fn backends(&self) -> Result<(Arc<dyn Wal>, Arc<dyn QueueFactory>), CoreError> {
        if self.wal.kind == WalKind::Redis {
            return self.redis().await;
        }
        let wal: Arc<dyn Wal> = match self.wal.kind {
            WalKind::Persistent => self.persistent()?,
            _ => Arc::new(event_base_wal::MemoryWal::new()),
        };
        let queue: Arc<dyn QueueFactory> = match (self.queue.kind, self.queue.bound) {
            (QueueKind::Mpmc, Some(n)) => Arc::new(event_base_queue::MpmcQueueFactory::bounded(n)),
            (QueueKind::Mpmc, None) => Arc::new(event_base_queue::MpmcQueueFactory::default()),
            (_, Some(n)) => Arc::new(event_base_queue::FlumeQueueFactory::bounded(n)),
            (_, None) => Arc::new(event_base_queue::FlumeQueueFactory::default()),
        };
        Ok((wal, queue))
    }

    /// The error for a backend whose feature is off.
    #[cfg_attr(all(feature = "persistent", feature = "redis"), allow(dead_code))]
    fn needs_feature(&self, key: &str, value: &str, feature: &str) -> CoreError {
        self.origins
            .invalid(
                key,
                format!("\"{value}\" needs the `{feature}` feature of event_base; turn it on in Cargo.toml (event_base = {{ features = [\"{feature}\"] }}) or pick another kind"),
            )
            .into()
    }

    #[cfg(feature = "persistent")]
    fn persistent(&self) -> Result<Arc<dyn Wal>, CoreError> {
        use crate::config::sections::SyncPolicyName;
        use event_base_wal::{PersistentWal, SyncPolicy};
        let w = &self.wal;
        let dir = w.dir.as_ref().ok_or_else(|| {
            self.origins.invalid(
                "wal.dir",
                "missing: wal.kind = \"persistent\" needs the WAL's directory",
            )
        })?;
        let policy = match w.sync_policy {
            SyncPolicyName::Always => SyncPolicy::Always,
            SyncPolicyName::Batch => SyncPolicy::Batch {
                max_records: w.batch_max_records.unwrap_or(DEFAULT_BATCH_MAX_RECORDS),
                max_delay: w.batch_max_delay.unwrap_or(DEFAULT_BATCH_MAX_DELAY),
            },
            SyncPolicyName::Never => SyncPolicy::Never,
        };
        let mut builder = PersistentWal::builder(dir).sync_policy(policy);
        if let Some(bytes) = w.segment_bytes {
            builder = builder.segment_bytes(bytes);
        }
        Ok(Arc::new(builder.open()?))
    }

    #[cfg(not(feature = "persistent"))]
    fn persistent(&self) -> Result<Arc<dyn Wal>, CoreError> {
        Err(self.needs_feature("wal.kind", "persistent", "persistent"))
    }

    #[cfg(feature = "redis")]
    async fn redis(&self) -> Result<(Arc<dyn Wal>, Arc<dyn QueueFactory>), CoreError> {
        let r = &self.redis;
        let url = r.url.as_deref().ok_or_else(|| {
            self.origins.invalid(
                "redis.url",
                "missing: the Redis backends need the server's URL",
            )
        })?;
        let mut queue = event_base_redis::RedisQueueFactory::connect(url).await?;
        if let Some(prefix) = &r.prefix {
            queue = queue.prefix(prefix.clone());
        }
        if let Some(d) = r.visibility_timeout {
            queue = queue.visibility_timeout(d);
        }
        if let Some(d) = r.heartbeat {
            queue = queue.heartbeat(d);
        }
        if let Some(n) = self.queue.bound {
            queue = queue.bound(n);
        }
        // The WAL over the queue's keys, made after the prefix is set.
        let wal = queue.wal();
        Ok((Arc::new(wal), Arc::new(queue)))
    }

    #[cfg(not(feature = "redis"))]
    async fn redis(&self) -> Result<(Arc<dyn Wal>, Arc<dyn QueueFactory>), CoreError> {
        Err(self.needs_feature("wal.kind", "redis", "redis"))
    }
}
