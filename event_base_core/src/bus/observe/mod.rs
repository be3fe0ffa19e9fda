//! The readers of a running bus's recordings (`observe/` holds the recorders): they read the
//! whole bus, so they live in it, as tokio's `RuntimeMetrics` lives in `runtime/`.
//!
//! | file | holds |
//! |---|---|
//! | `metrics_store.rs` | `MetricsStore`: a bus's counters into a snapshot; `TopicLatencies` |
//! | `metrics_manager.rs` | `MetricsManager`: snapshots to the `metrics` facade |
//! | `audit_publisher.rs` | the task that hands new audit records to writers and `_system.audit` |
//! | `trace_layer.rs` | `TraceRecord`, `TraceLayer` (feature `trace`): tracing events published on `_system.trace` |

pub(crate) mod audit_publisher;
pub(crate) mod metrics_manager;
pub(crate) mod metrics_store;
pub(crate) mod trace_layer;
