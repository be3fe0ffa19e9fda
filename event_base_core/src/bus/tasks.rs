//! [`BusTasks`]: the background tasks of one running system, and starting workers.
//!
//! It owns the join handles (workers by name, and the scheduler, router and monitor tasks),
//! the per-topic routers shared by workers that claim for themselves, and each handler's
//! runtime settings. When the last handle of a system is dropped, it refuses further sends and
//! cancels every task. Nothing it owns refers back to it, so a dropped system really goes away.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

use crate::bus::shared::BusShared;
use crate::delivery::subscription::consumer_router::ConsumerRouter;
use crate::delivery::subscription::job_channel::job_channel;
use crate::delivery::subscription::topic_table::WorkerSlot;
use crate::error::CoreError;
use crate::handler::runtime::HandlerRuntime;
use crate::shutdown::strategy::ShutdownReport;
use crate::worker::registry::{DiscoveryEvent, WorkerState, WorkerStatus};
use crate::worker::Worker;

/// Capacity of each worker's private inbox.
const INBOX_CAPACITY: usize = 1024;

pub(crate) struct BusTasks {
    pub(crate) shared: Arc<BusShared>,
    workers: Mutex<HashMap<String, JoinHandle<()>>>,
    others: Mutex<Vec<JoinHandle<()>>>,
    /// Routers of subscriptions whose workers claim for themselves, by handler name.
    pub(crate) routers: HashMap<String, Arc<ConsumerRouter>>,
    /// Every handler, by name.
    pub(crate) handlers: HashMap<String, Arc<HandlerRuntime>>,
    /// Held by whoever runs a shutdown; holds the report once the bus has stopped, for every
    /// later (or waiting) caller.
    pub(crate) stopped: tokio::sync::Mutex<Option<ShutdownReport>>,
    /// What the concerns above the bus keep per bus (`bus/extensions.rs`).
    pub(crate) extensions: crate::bus::extensions::Extensions,
}

impl BusTasks {
    pub(crate) fn new(
        shared: Arc<BusShared>,
        routers: HashMap<String, Arc<ConsumerRouter>>,
        handlers: HashMap<String, Arc<HandlerRuntime>>,
    ) -> Self {
        BusTasks {
            shared,
            workers: Mutex::new(HashMap::new()),
            others: Mutex::new(Vec::new()),
            routers,
            handlers,
            stopped: tokio::sync::Mutex::new(None),
            extensions: crate::bus::extensions::Extensions::default(),
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
            .delivery
            .topics
            .get(&handler.topic)
            .and_then(|route| route.sub(&handler.name))
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
            self.shared.announcer.node.name.clone(),
        ));
        self.shared.announcer.registry.register(state.clone());
        let worker = Worker::new(
            self.shared.delivery.clone(),
            &self.shared.announcer.node.name,
            self.shared.latency_metrics,
            entry,
            state.clone(),
            handler,
            rx,
        );
        let router = self.routers.get(&handler.name).cloned();
        let announcer = self.shared.announcer.clone();
        let ran = state.clone();
        let handle = tokio::spawn(async move {
            worker.run(router).await;
            // A worker that stopped (not one declared dead, which the monitor announces)
            // has left.
            if ran.status() == WorkerStatus::Stopped {
                announcer.announce_worker(DiscoveryEvent::Left, &ran).await;
            }
        });
        if let Ok(mut w) = self.workers.lock() {
            w.insert(name, handle);
        }
        Ok(state)
    }

    /// Takes a worker's join handle (to await or abort it).
    /// Takes a worker's task out to stop it. Should the caller be dropped before the task
    /// ended, the handle goes back, so the next shutdown can still stop it.
    pub(crate) fn take_worker(&self, name: &str) -> Option<TakenWorker<'_>> {
        let handle = self.workers.lock().ok()?.remove(name)?;
        Some(TakenWorker {
            tasks: self,
            name: name.to_owned(),
            handle: Some(handle),
        })
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

/// A worker's task, taken out of the bus to be waited for or cancelled.
pub(crate) struct TakenWorker<'a> {
    tasks: &'a BusTasks,
    name: String,
    handle: Option<JoinHandle<()>>,
}

impl TakenWorker<'_> {
    /// Waits until the task ends or `until`; whether it ended.
    pub(crate) async fn wait_until(&mut self, until: tokio::time::Instant) -> bool {
        let Some(handle) = self.handle.as_mut() else {
            return true;
        };
        let ended = tokio::time::timeout_at(until, handle).await.is_ok();
        if ended {
            self.handle = None;
        }
        ended
    }

    /// Cancels the task and waits until it has ended (its handler future dropped).
    pub(crate) async fn abort(mut self) {
        if let Some(handle) = self.handle.take() {
            handle.abort();
            let _ = handle.await;
        }
    }

    /// Cancels the task without waiting for it to end.
    pub(crate) fn abort_now(mut self) {
        if let Some(handle) = self.handle.take() {
            handle.abort();
        }
    }
}

impl Drop for TakenWorker<'_> {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            if !handle.is_finished() {
                if let Ok(mut workers) = self.tasks.workers.lock() {
                    workers.insert(std::mem::take(&mut self.name), handle);
                }
            }
        }
    }
}

impl Drop for BusTasks {
    fn drop(&mut self) {
        self.shared.delivery.stop_accepting();
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
