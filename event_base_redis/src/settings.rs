//! [`Settings`]: what a [`RedisQueueFactory`](crate::RedisQueueFactory) was built with, shared
//! by its queues, its routes and the [`RedisWal`](crate::RedisWal) over its keys.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use crate::keys::Keys;

/// The settings of a [`RedisQueueFactory`](crate::RedisQueueFactory) (and of the
/// [`RedisWal`](crate::RedisWal) over its keys).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) keys: Keys,
    pub(crate) prefix: String,
    pub(crate) bound: usize,
    pub(crate) visibility: Duration,
    pub(crate) block: Duration,
    pub(crate) max_deliveries: u32,
    /// Dead letters this process made, counted by the WAL (`fail`) and the consumers (past
    /// `max_deliveries`): shared by every clone, for `RedisWal::stats`.
    pub(crate) dead_letters: Arc<AtomicU64>,
}
