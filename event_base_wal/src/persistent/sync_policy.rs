//! [`SyncPolicy`]: when the `PersistentWal` asks the disk to make its writes durable.

use std::time::Duration;

/// When appended records are forced to stable storage (`fdatasync`).
///
/// | policy | a `send` returns after | survives `kill -9` | survives power loss |
/// |---|---|---|---|
/// | `Always` | its record is written and `fdatasync`'d | yes | yes (if the disk honours flushes) |
/// | `Batch { .. }` | the `fdatasync` of the batch that holds its record | yes | yes, same |
/// | `Never` | its record is handed to the writer | no: records still in the writer's queue are lost | no |
///
/// With `Always` many concurrent senders still share one `fdatasync`: the writer takes every
/// record waiting when it starts a write, so throughput grows with concurrency while each
/// sender waits for the sync that covers its own record. `Batch` goes further by waiting for
/// company before syncing: up to `max_delay` for up to `max_records` records, but no longer
/// than an eighth of `max_delay` after the last record arrived. Fewer syncs when senders
/// trickle in, at the price of that wait for a lone sender.
///
/// State changes (processing, complete, retry, dead letter) never force a sync of their own;
/// they ride along with the next synced batch or an idle sync. Losing one in a crash only
/// causes a redelivery, which at-least-once allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Every append is durable before `send` returns (the default).
    #[default]
    Always,
    /// Group commit: sync when `max_records` appends are waiting, when `max_delay` has passed
    /// since the first of them, or when no new append came for `max_delay / 8`, whichever
    /// comes first.
    Batch {
        /// Appends that trigger a sync at once.
        max_records: usize,
        /// Longest an append waits for its sync.
        max_delay: Duration,
    },
    /// Never sync on behalf of a sender; the OS writes back when it likes. Not crash-safe.
    Never,
}
