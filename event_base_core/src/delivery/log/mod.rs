//! The in-process topic log: a message is appended once, and each handler of the topic (a
//! subscription) reads it with a cursor of its own.
//!
//! The bus builds one per topic when its queue backend is an in-memory one
//! (`QueueFactory::topic_log`) and the topic has at most 64 handlers; a shared backend
//! (Redis) keeps its own log. A send to a topic with several handlers is then one append
//! (`LogAppender`), not a queue item per handler.
//!
//! - `topic_log.rs`: the log, its slots and cursors, appends and claims, its bound.
//! - `log_queue.rs`: a subscription's producer and consumer over it (the queue contract),
//!   and the route's appender for every subscription at once.

pub(crate) mod log_queue;
pub(crate) mod topic_log;
