//! `_system.shutdown`: a [`ShutdownCommand`] (JSON, at most
//! [`MAX_SYSTEM_PAYLOAD`](crate::constant::MAX_SYSTEM_PAYLOAD) bytes) starts the same shutdown
//! as [`EventBus::shutdown`](crate::EventBus::shutdown). A payload that is too large or does
//! not decode is a dead letter with the reason, never a panic. The shutdown runs in its own
//! task: the handler's worker is itself one of the workers being stopped.

use std::sync::{Arc, OnceLock, Weak};

use async_trait::async_trait;

use crate::bus::tasks::BusTasks;
use crate::constant::MAX_SYSTEM_PAYLOAD;
use crate::handler::ehandler::EHandler;
use crate::message::ack::{Ack, DeadReason};
use crate::message::emessage::EMessage;
use crate::shutdown::strategy::ShutdownCommand;

/// A handle on a bus that does not keep it alive.
struct WeakBus(Weak<BusTasks>);

impl WeakBus {
    fn upgrade(&self) -> Option<Arc<BusTasks>> {
        self.0.upgrade()
    }
}

/// Where the builder puts the finished system for the handler to find.
#[derive(Clone, Default)]
pub(crate) struct BusCell(Arc<OnceLock<WeakBus>>);

impl BusCell {
    pub(crate) fn set(&self, tasks: &Arc<BusTasks>) {
        let _ = self.0.set(WeakBus(Arc::downgrade(tasks)));
    }
}

/// Handles `_system.shutdown`.
#[derive(Default)]
pub(crate) struct ShutdownCommandHandler {
    bus: BusCell,
}

impl ShutdownCommandHandler {
    pub(crate) fn cell(&self) -> BusCell {
        self.bus.clone()
    }
}

#[async_trait]
impl EHandler for ShutdownCommandHandler {
    async fn handler(&self, msg: &EMessage) -> Ack {
        if msg.payload.len() > MAX_SYSTEM_PAYLOAD {
            return Ack::Dead {
                dead_reason: DeadReason::Other(format!(
                    "shutdown command of {} bytes exceeds the limit of {MAX_SYSTEM_PAYLOAD}",
                    msg.payload.len()
                )),
            };
        }
        let command: ShutdownCommand = match serde_json::from_slice(&msg.payload.0) {
            Ok(c) => c,
            Err(e) => {
                return Ack::Dead {
                    dead_reason: DeadReason::Other(format!("invalid shutdown command: {e}")),
                }
            }
        };
        let Some(tasks) = self.bus.0.get().and_then(WeakBus::upgrade) else {
            return Ack::Ack;
        };
        tracing::info!(target: crate::constant::target::SHUTDOWN, strategy = command.strategy.name(), reason = ?command.reason, "shutdown requested on _system.shutdown");
        tokio::spawn(async move {
            if let Err(e) = super::coordinator::shutdown(&tasks, command.strategy).await {
                tracing::error!(target: crate::constant::target::SHUTDOWN, error = %e, "shutdown requested by message failed");
            }
        });
        Ack::Ack
    }
}
