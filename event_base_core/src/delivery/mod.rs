pub(crate) mod accept;
pub(crate) mod consumer_router;
pub(crate) mod job;
pub(crate) mod job_channel;
pub(crate) mod scheduler;
pub(crate) mod topic_hasher;
pub(crate) mod topic_router;
pub(crate) mod topic_table;
