//! The tasks of a factory, started on first use (so a factory can be made outside a
//! runtime): the writer (`writer.rs`), the listener (`listener.rs`) and the lease keeper
//! (`lease.rs`). They end when the factory is gone.

use std::sync::Arc;

use crate::link::{Commits, Link};
use crate::queue::shared::Shared;
use crate::queue::{lease, listener, writer};

/// Starts the tasks, once, on the current runtime (none outside one: the next use starts
/// them).
pub(crate) fn start(shared: &Arc<Shared>) {
    if !shared.first_start() {
        return;
    }
    if let Some(rx) = shared.take_ops() {
        let link = Link::new(
            shared.config.clone(),
            Commits::Durable,
            shared.statements.clone(),
        );
        tokio::spawn(writer::run(link, rx));
    }
    tokio::spawn(listener::run(Arc::downgrade(shared)));
    tokio::spawn(lease::run(Arc::downgrade(shared)));
}
