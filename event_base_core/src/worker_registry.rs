//! [`WorkerRegistry`]: every worker of a system with its topic and live status.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::message::MessageTopic;

/// What a worker is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WorkerStatus {
    /// Waiting for a message.
    Idle,
    /// Running a handler.
    Working,
    /// Finishing before it stops.
    Stopping,
    /// Stopped.
    Stopped,
}

impl WorkerStatus {
    fn from_u8(v: u8) -> WorkerStatus {
        match v {
            0 => WorkerStatus::Idle,
            1 => WorkerStatus::Working,
            2 => WorkerStatus::Stopping,
            _ => WorkerStatus::Stopped,
        }
    }
}

/// A worker's live state, shared between the worker task and the registry.
#[derive(Debug)]
pub(crate) struct WorkerState {
    pub(crate) name: String,
    pub(crate) topic: MessageTopic,
    status: AtomicU8,
    processed: AtomicU64,
}

impl WorkerState {
    pub(crate) fn new(name: String, topic: MessageTopic) -> Self {
        WorkerState {
            name,
            topic,
            status: AtomicU8::new(WorkerStatus::Idle as u8),
            processed: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(crate) fn set_status(&self, s: WorkerStatus) {
        self.status.store(s as u8, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn count_processed(&self) {
        self.processed.fetch_add(1, Ordering::Relaxed);
    }

    fn info(&self) -> WorkerInfo {
        WorkerInfo {
            name: self.name.clone(),
            topic: self.topic.clone(),
            status: WorkerStatus::from_u8(self.status.load(Ordering::Relaxed)),
            processed: self.processed.load(Ordering::Relaxed),
        }
    }
}

/// A worker as the registry reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// Unique name, `<handler>-<index>`.
    pub name: String,
    /// The topic it serves.
    pub topic: MessageTopic,
    /// What it is doing.
    pub status: WorkerStatus,
    /// Deliveries it has finished.
    pub processed: u64,
}

/// Every worker of one system.
#[derive(Debug, Default)]
pub struct WorkerRegistry {
    workers: RwLock<Vec<Arc<WorkerState>>>,
}

impl WorkerRegistry {
    pub(crate) fn register(&self, state: Arc<WorkerState>) {
        if let Ok(mut w) = self.workers.write() {
            w.push(state);
        }
    }

    /// Every worker.
    pub fn list(&self) -> Vec<WorkerInfo> {
        match self.workers.read() {
            Ok(w) => w.iter().map(|s| s.info()).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Names of the workers serving `topic`.
    pub fn names_for(&self, topic: &str) -> Vec<String> {
        match self.workers.read() {
            Ok(w) => w
                .iter()
                .filter(|s| s.topic.as_str() == topic)
                .map(|s| s.name.clone())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// One worker by name.
    pub fn get(&self, name: &str) -> Option<WorkerInfo> {
        self.workers
            .read()
            .ok()?
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.info())
    }

    pub(crate) fn mark_all(&self, status: WorkerStatus) {
        if let Ok(w) = self.workers.read() {
            for s in w.iter() {
                s.set_status(status);
            }
        }
    }
}
