//! [`BusTasks`]: the background tasks of one running system, and starting workers.
//!
//! It owns the join handles (workers by name, and the scheduler, router and monitor tasks),
//! the per-topic routers shared by workers that claim for themselves, and each handler's
//! runtime settings. When the last handle of a system is dropped, it refuses further sends and
//! cancels every task. Nothing it owns refers back to it, so a dropped system really goes away.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

use crate::bus::shared::BusShared;
use crate::delivery::consumer_router::ConsumerRouter;
use crate::delivery::job_channel::job_channel;
use crate::delivery::topic_table::WorkerSlot;
use crate::error::CoreError;
use crate::handler::runtime::HandlerRuntime;
use crate::message::topic::MessageTopic;
use crate::worker::registry::WorkerState;
use crate::worker::Worker;

/// Capacity of each worker's private inbox.
const INBOX_CAPACITY: usize = 1024;

pub(crate) struct BusTasks {
    pub(crate) shared: Arc<BusShared>,
    workers: Mutex<HashMap<String, JoinHandle<()>>>,
    others: Mutex<Vec<JoinHandle<()>>>,
    /// Routers of topics whose workers claim for themselves.
    pub(crate) routers: HashMap<MessageTopic, Arc<ConsumerRouter>>,
    /// Every handler, by name.
    pub(crate) handlers: HashMap<String, Arc<HandlerRuntime>>,
}

impl BusTasks {
    pub(crate) fn new(
        shared: Arc<BusShared>,
        routers: HashMap<MessageTopic, Arc<ConsumerRouter>>,
        handlers: HashMap<String, Arc<HandlerRuntime>>,
    ) -> Self {
        BusTasks {
            shared,
            workers: Mutex::new(HashMap::new()),
            others: Mutex::new(Vec::new()),
            routers,
            handlers,
        }
    }

    pub(crate) fn push_other(&self, h: JoinHandle<()>) {
        if let Ok(mut v) = self.others.lock() {
            v.push(h);
        }
    }

    /// Starts one more worker for `handler`; returns its state (the caller announces it).
    pub(crate) fn spawn_worker(
        &self,
        handler: &HandlerRuntime,
    ) -> Result<Arc<WorkerState>, CoreError> {
        let entry = self
            .shared
            .topics
            .get(&handler.topic)
            .cloned()
            .ok_or_else(|| CoreError::NoHandler {
                topic: handler.topic.0.clone(),
            })?;
        let name = handler.next_worker_name();
        let (tx, rx) = job_channel(INBOX_CAPACITY);
        let index = entry.add_slot(WorkerSlot {
            name: name.clone(),
            inbox: tx,
            running: std::sync::atomic::AtomicBool::new(true),
        });
        let state = Arc::new(WorkerState::new(
            name.clone(),
            handler.name.clone(),
            handler.topic.clone(),
            index,
            self.shared.node.name.clone(),
        ));
        self.shared.registry.register(state.clone());
        let worker = Worker::new(self.shared.clone(), entry, state.clone(), handler, rx);
        let router = self.routers.get(&handler.topic).cloned();
        let handle = tokio::spawn(worker.run(router));
        if let Ok(mut w) = self.workers.lock() {
            w.insert(name, handle);
        }
        Ok(state)
    }

    /// Takes a worker's join handle (to await or abort it).
    pub(crate) fn take_worker(&self, name: &str) -> Option<JoinHandle<()>> {
        self.workers.lock().ok()?.remove(name)
    }

    /// Cancels every task (workers included) and waits for them to end.
    pub(crate) async fn abort_all(&self) {
        let mut handles: Vec<JoinHandle<()>> = Vec::new();
        if let Ok(mut w) = self.workers.lock() {
            handles.extend(w.drain().map(|(_, h)| h));
        }
        if let Ok(mut o) = self.others.lock() {
            handles.append(&mut o);
        }
        for h in &handles {
            h.abort();
        }
        for h in handles {
            let _ = h.await;
        }
    }
}

impl Drop for BusTasks {
    fn drop(&mut self) {
        self.shared.accepting.store(false, Ordering::Release);
        if let Ok(mut w) = self.workers.lock() {
            for (_, h) in w.drain() {
                h.abort();
            }
        }
        if let Ok(mut o) = self.others.lock() {
            for h in o.drain(..) {
                h.abort();
            }
        }
    }
}
