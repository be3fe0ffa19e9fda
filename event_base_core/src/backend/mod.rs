//! The contracts the backend crates implement: the write-ahead log ([`Wal`](crate::Wal)) and
//! the per-topic queues ([`QueueFactory`](crate::QueueFactory)). `event_base_wal` and
//! `event_base_queue` hold the implementations; the conformance suites in `event_base_test`
//! (`wal_conformance.rs`, `queue_conformance.rs`) check every one against the same cases.
//!
//! May import: `message/`, `constant`, `error`. Nothing here knows a running bus.
//!
//! | file | holds |
//! |---|---|
//! | `wal.rs` | `Wal`, `WalCommit`, `WalRecord`, `WalRecordState`, `WalStats` |
//! | `queue.rs` | `QueueFactory`, `TopicQueue`, `EProducer`, `EConsumer`, `Claimed`, `Receipt`, `TrySendError` |

pub(crate) mod queue;
pub(crate) mod wal;
