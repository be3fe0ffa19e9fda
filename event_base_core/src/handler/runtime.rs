//! What a running system keeps of each handler, so it can start more workers for it later
//! (scaling up, or replacing a worker declared dead).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::constant::MAX_WAIT;
use crate::handler::backoff::Backoff;
use crate::handler::batch::BatchSpec;
use crate::handler::middleware::Middleware;
use crate::handler::pipeline::Pipeline;
use crate::handler::spec::HandlerSpec;
use crate::message::topic::MessageTopic;

/// One handler as a running bus keeps it: its pipeline (the global middleware outermost, then
/// its own, then the handler), its timeout, retry policy and shutdown timeout, and the index
/// of its next worker. Every worker of the handler starts from it: at build time, from
/// `add_workers`, and when the monitor replaces a worker declared dead.
pub(crate) struct HandlerRuntime {
    pub(crate) name: String,
    pub(crate) topic: MessageTopic,
    pub(crate) pipeline: Pipeline,
    pub(crate) timeout: Option<Duration>,
    pub(crate) retries: Option<u32>,
    pub(crate) backoff: Option<Backoff>,
    pub(crate) shutdown_timeout: Option<Duration>,
    /// Sends held until the handler acks.
    pub(crate) outbox: bool,
    /// For a batch handler: what its workers call, and how they form batches.
    pub(crate) batch: Option<BatchSpec>,
    next_index: AtomicUsize,
}

impl HandlerRuntime {
    pub(crate) fn new(spec: &HandlerSpec, global: &[std::sync::Arc<dyn Middleware>]) -> Self {
        let mut layers = global.to_vec();
        layers.extend(spec.middleware.iter().cloned());
        HandlerRuntime {
            name: spec.name.clone(),
            topic: spec.topic.clone(),
            pipeline: Pipeline::new(spec.handler.clone(), layers),
            // A limit of `MAX_WAIT` or more is none: it never fires, and cannot overflow.
            timeout: spec.timeout.filter(|t| *t < MAX_WAIT),
            retries: spec.retries,
            outbox: spec.outbox,
            batch: spec.batch.clone(),
            backoff: spec.backoff,
            shutdown_timeout: spec.shutdown_timeout.filter(|t| *t < MAX_WAIT),
            next_index: AtomicUsize::new(0),
        }
    }

    /// The next worker name: `<handler>-<n>`, never reused.
    pub(crate) fn next_worker_name(&self) -> String {
        format!(
            "{}-{}",
            self.name,
            self.next_index.fetch_add(1, Ordering::Relaxed)
        )
    }
}
