//! [`RedisRate`]: a handler's rate shared by every node running it (`HandlerSpec::rate`),
//! one script call (`scripts::RATE`) per handler start.

use std::time::Duration;

use async_trait::async_trait;
use event_base_core::backend::RateLimiter;
use event_base_core::{QueueError, Rate};
use redis::Value;

use crate::link::Link;
use crate::scripts;

/// Reserves a handler's starts on the server's clock, so that every node running the
/// handler shares one pace.
pub(crate) struct RedisRate {
    link: Link,
    key: String,
    interval_us: u64,
}

impl RedisRate {
    pub(crate) fn new(link: Link, key: String, rate: Rate) -> RedisRate {
        RedisRate {
            link,
            key,
            interval_us: u64::try_from(rate.interval().as_micros())
                .unwrap_or(u64::MAX)
                .max(1),
        }
    }
}

#[async_trait]
impl RateLimiter for RedisRate {
    async fn reserve(&self) -> Result<Duration, QueueError> {
        let cmd = scripts::evalsha(&scripts::RATE, &[&self.key], self.interval_us);
        match self.link.run("rate", cmd).await {
            Ok(Value::Int(us)) => Ok(Duration::from_micros(u64::try_from(us).unwrap_or(0))),
            Ok(other) => Err(QueueError::Backend(
                format!("the rate script answered {other:?}, not a wait in microseconds").into(),
            )),
            Err(e) => Err(e.into()),
        }
    }
}
