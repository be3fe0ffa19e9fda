pub(crate) mod coordinator;
mod graceful;
mod plan;
pub(crate) mod signal;
pub(crate) mod strategy;
mod worker_stop;
