//! [`RateLimiter`]: a rate shared by every process running a handler, kept by a shared
//! backend ([`QueueFactory::rate_limiter`](crate::backend::QueueFactory::rate_limiter)).

use std::time::Duration;

use async_trait::async_trait;

use crate::error::QueueError;

/// Reserves handler starts at a [`Rate`](crate::Rate) that several processes share (on Redis:
/// one script over one key per handler). Each call reserves the next start of the handler
/// and answers how long its caller waits before it (zero: start now). Starts are spaced one
/// [`Rate::interval`](crate::Rate::interval) apart across every caller, whatever process it
/// is in.
///
/// ```
/// use std::time::Duration;
/// use event_base_core::backend::RateLimiter;
/// use event_base_core::QueueError;
///
/// /// No limit at all: every start may go now.
/// struct Unlimited;
///
/// #[async_trait::async_trait]
/// impl RateLimiter for Unlimited {
///     async fn reserve(&self) -> Result<Duration, QueueError> {
///         Ok(Duration::ZERO)
///     }
/// }
/// let limiter: std::sync::Arc<dyn RateLimiter> = std::sync::Arc::new(Unlimited);
/// # drop(limiter);
/// ```
#[async_trait]
pub trait RateLimiter: Send + Sync + 'static {
    /// Reserves the next start; answers how long to wait before it. `Err`: the backend did
    /// not answer; the worker then starts at once (the limit is a pace, not a guarantee the
    /// bus may hold messages back for ever on) and logs it.
    async fn reserve(&self) -> Result<Duration, QueueError>;
}
