//! How a running bus stops. The strategy decides, the executor acts, as in lsm-tree's
//! compaction: `plan.rs` turns a [`ShutdownStrategy`](crate::ShutdownStrategy) into a plan
//! (what to wait for, how to stop the workers), and `coordinator.rs` carries every plan out
//! the same way. The strategies and the report are the public words of `shutdown/`.
//!
//! May import: `shutdown/`, the bus (shared state, tasks, globals), `worker/registry.rs`,
//! `bus/monitor.rs`.
//!
//! | file | holds |
//! |---|---|
//! | `plan.rs` | decide: strategy → `ShutdownPlan { settle, stop }` |
//! | `coordinator.rs` | act: refuse sends, settle, stop the workers, hand out acks, end the tasks |
//! | `worker_stop.rs` | the part every strategy shares: ask workers to stop, wait, cancel the late |
//! | `graceful.rs` | `Graceful`: one worker out of a running bus |
//! | `shutdown_command.rs` | the bus's handler of `_system.shutdown`: a `ShutdownCommand` starts the same shutdown |
//! | `signal.rs` | SIGINT/SIGTERM for `run_until_signal` |

pub(crate) mod coordinator;
mod graceful;
mod plan;
pub(crate) mod shutdown_command;
#[cfg(feature = "signal")]
pub(crate) mod signal;
mod worker_stop;
