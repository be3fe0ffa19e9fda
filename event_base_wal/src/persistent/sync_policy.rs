//! [`SyncPolicy`]: when the `PersistentWal` asks the disk to make its writes durable.

use std::time::Duration;

/// When appended records are forced to stable storage (`fdatasync`).
///
/// | policy | a `send` returns after | survives `kill -9` | survives power loss |
/// |---|---|---|---|
/// | `Always` | its record is written and `fdatasync`'d | yes | yes (if the disk honours flushes) |
/// | `Batch { .. }` | the `fdatasync` of the batch that holds its record | yes | yes, same |
/// | `Never` | its record is handed to the writer | only if the writer had written it: records still in its queue are lost | only if a later sync covered it (see below) |
///
/// Exactly what survives a power loss, under every policy:
///
/// - A `Wal::flush()` that returned `Ok` covers everything handed to the WAL before it.
/// - With `Always` and `Batch`, an append (or a whole `append_batch`) whose commit returned
///   `Ok` survives, and so does everything handed to the WAL before it, state changes
///   included: the writer writes in order, and the sync that answers a commit covers every
///   earlier write.
/// - Sealing a full segment, compaction and closing the WAL sync too, so more may survive
///   than was promised; under `Never` nothing else is.
/// - Anything not covered may or may not be there afterwards. Recovery then opens the
///   directory without error (a torn last record is cut off), and never brings back a record
///   that was not written: no invented messages, no dead letter that was never failed, no
///   replay of a message whose completion was covered.
///
/// A lost state change errs towards delivering again: a lost completion redelivers the
/// message, a lost dead-lettering makes it pending again.
///
/// Under every policy, a failed write or sync stops the WAL: from then on every record is
/// refused with `WalError::Failed` (under `Never` too, where a send is otherwise answered
/// before its record is written), so no `Ok` is given for a record that will not be written.
///
/// Evidence: `event_base_test/tests/power_loss.rs` cuts the power of a simulated disk
/// (`event_base_wal::sim`) at hundreds of random operations under each policy and checks
/// these rules after every recovery.
///
/// With `Always` many concurrent senders still share one `fdatasync`: the writer takes every
/// record waiting when it starts a write, so throughput grows with concurrency while each
/// sender waits for the sync that covers its own record. With
/// `PersistentWalBuilder::overlap_syncs(true)` those syncs run on a thread of their own while
/// the writer takes in and writes the next batch, so the disk and the senders work at the
/// same time. `Batch` goes further by waiting for
/// company before syncing: up to `max_delay` for up to `max_records` records, but no longer
/// than an eighth of `max_delay` (at least 50 µs) after the last record arrived. Fewer
/// syncs when senders trickle in, at the price of that wait for a lone sender.
/// `WalStats::syncs` counts the syncs made.
///
/// State changes (processing, complete, retry, dead letter) never force a sync of their own;
/// they ride along with the next sync, or an idle sync (`idle_sync`, not under `Never`).
/// Losing one in a crash only causes a redelivery, which at-least-once allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Every append is durable before `send` returns (the default).
    #[default]
    Always,
    /// Group commit: sync when `max_records` appends are waiting, when `max_delay` has passed
    /// since the first of them, or when no new append came for `max_delay / 8` (at least
    /// 50 µs), whichever comes first. Same durability as `Always`.
    Batch {
        /// Appends that trigger a sync at once.
        max_records: usize,
        /// Longest the writer waits for more appends before it syncs (the sync's own time
        /// comes on top).
        max_delay: Duration,
    },
    /// Never sync on behalf of a sender; the OS writes back when it likes. Not crash-safe:
    /// only `flush()` (and sealing, compaction, closing) makes records durable.
    Never,
}
