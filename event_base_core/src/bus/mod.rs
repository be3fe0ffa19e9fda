//! One running bus: the [`EventBus`](crate::EventBus) handle, its builder, the state every
//! part of it shares ([`BusShared`](shared::BusShared)), its tasks, its count of messages
//! in flight, and the globals behind `start_system!`.
//!
//! May import every folder below it (only `patterns/` is above); none below imports it.
//!
//! | file | holds |
//! |---|---|
//! | `event_bus.rs` | `EventBus`: the handle to send, observe, scale and stop |
//! | `subscriptions.rs` | `EventBus::pause`, `resume`, `is_paused`, `lag`: one handler of a topic |
//! | `builder.rs` | `EventBusBuilder`: settings, and `build()` as a list of steps |
//! | `assemble.rs` | the steps `build()` takes: topic table, tasks, audit, metrics export |
//! | `shared.rs` | `BusShared`: the record of the bus's parts (the delivery hub; the announcer, with the worker registry and the node) |
//! | `tasks.rs` | `BusTasks`: join handles, the routers workers share, starting workers |
//! | `monitor.rs` | liveness sampling, heartbeats, replacing a worker stuck past the stale limit |
//! | `idle.rs` | `wait_idle` and the settling of `Drain`: what this process holds, and what the shared queues it sent to still hold |
//! | `extensions.rs` | `Extensions`: per-bus state of the concerns above the bus (`patterns/`), by type |
//! | `start_hooks.rs` | `ON_START`: what the concerns above the bus take up at a bus's start (the WAL's schedules) |
//! | `global.rs` | the default bus and the send path's view of it |
//! | `observe/` | the readers of its recordings: `MetricsStore`, `MetricsManager`, the audit publisher, `TraceLayer` |
//! | `stop/` | how it stops: a `ShutdownStrategy` planned, then carried out (`coordinator.rs`), also on a `_system.shutdown` command |

pub(crate) mod assemble;
pub(crate) mod builder;
pub(crate) mod event_bus;
pub(crate) mod extensions;
pub(crate) mod global;
pub(crate) mod idle;
pub(crate) mod monitor;
pub(crate) mod observe;
pub(crate) mod shared;
pub(crate) mod start_hooks;
pub(crate) mod stop;
pub(crate) mod subscriptions;
pub(crate) mod tasks;
