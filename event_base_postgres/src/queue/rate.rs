//! [`PgRate`]: a handler's rate shared by every process running it (`HandlerSpec::rate`),
//! one statement (`sql.rs`, `RATE`) per handler start, on the server's clock.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use event_base_core::backend::RateLimiter;
use event_base_core::{QueueError, Rate};

use crate::error::PostgresError;
use crate::queue::shared::Shared;

/// Reserves a handler's starts in `event_base_rates`.
pub(crate) struct PgRate {
    shared: Arc<Shared>,
    /// `<topic>` U+001F `<handler>`.
    name: String,
    interval_us: f64,
}

impl PgRate {
    pub(crate) fn new(shared: Arc<Shared>, name: String, rate: Rate) -> PgRate {
        PgRate {
            shared,
            name,
            interval_us: (rate.interval().as_secs_f64() * 1e6).max(1.0),
        }
    }
}

#[async_trait]
impl RateLimiter for PgRate {
    async fn reserve(&self) -> Result<Duration, QueueError> {
        let conn = self.shared.claims.conn().await?;
        conn.ran(1);
        let row = conn
            .client
            .query_one(&conn.st.rate, &[&self.name, &self.interval_us])
            .await
            .map_err(PostgresError::statement(
                "the reservation of a rated handler's start",
            ))?;
        let wait_us: f64 = row.get(0);
        Ok(Duration::from_secs_f64(wait_us.max(0.0) / 1e6))
    }
}
