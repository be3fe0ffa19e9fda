//! [`DeliveryMode`]: who handles a message, and how many times.

use serde::{Deserialize, Serialize};

/// Who should handle a message, and how many times.
///
/// | mode | handled by | typical use |
/// |---|---|---|
/// | `Standard` | exactly one worker of the topic (competing consumers) | jobs, commands |
/// | `Broadcast` | every worker subscribed to the topic, once each | cache invalidation, fan-out |
/// | `Repeated(n)` | `n` times in total, by any workers of the topic | load generation, sampling |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum DeliveryMode {
    /// Exactly one worker of the topic handles each delivery.
    #[default]
    Standard,
    /// Handled exactly `n` times in total, by any workers of the topic.
    Repeated(u32),
    /// Every worker subscribed to the topic handles it once.
    Broadcast,
}
