//! The handlers other processes run, when the queue backend is shared
//! (`QueueFactory::routes`).
//!
//! `remote_routes.rs` (with the table `remote_table.rs` and the per-route `elsewhere.rs`)
//! routes a send to the handlers other processes run: a topic with no handler here, and the
//! handlers of a local topic that only other processes run. Their copies are queued before
//! the send answers (after the WAL append, ahead of the local copies: `elsewhere.rs` queues
//! them).
//!
//! `sent_to.rs` keeps the subscriptions of shared queues the bus sent to, for `wait_idle`
//! to ask the backend about (`bus/idle.rs`).
//!
//! `addressed.rs` sends a message addressed to a worker of one node (`to_worker:
//! "<node id>/<worker>"`, shared backends only) to that worker's handler's subscription.

pub(crate) mod addressed;
pub(crate) mod elsewhere;
pub(crate) mod remote_routes;
pub(crate) mod remote_table;
pub(crate) mod sent_to;
