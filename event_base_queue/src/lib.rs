//! Queue backends for event_base: one bounded channel per topic.
//!
//! - [`FlumeQueueFactory`] (the default): `flume` channels. `bounded(n)` sets the bound; the
//!   default is [`DEFAULT_QUEUE_BOUND`]. A full queue makes `send` wait (backpressure) and
//!   `try_send` fail at once.
//! - [`MpmcQueueFactory`] (feature `kanal`, on by default): `kanal` channels behind the same
//!   traits; measured faster than flume on some machines, so it is worth benchmarking for your
//!   workload.
//!
//! In-memory channels need no acknowledgement: the WAL is the record of what is unfinished,
//! so `ack`/`nack` do nothing and `claim_stale` finds nothing. The Redis Streams backend
//! arrives with the distributed-mode issue.

#![deny(unsafe_code)]
// docs.rs (`--cfg docsrs`, nightly) marks what each feature adds; stable builds ignore it.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod bell;
mod flume_queue;
#[cfg(feature = "kanal")]
mod kanal_queue;

pub use flume_queue::FlumeQueueFactory;
#[cfg(feature = "kanal")]
#[cfg_attr(docsrs, doc(cfg(feature = "kanal")))]
pub use kanal_queue::MpmcQueueFactory;

/// Messages a topic's queue holds before senders wait, unless set otherwise.
pub const DEFAULT_QUEUE_BOUND: usize = 8192;
