pub(crate) mod coordinator;
pub(crate) mod signal;
pub(crate) mod strategy;
