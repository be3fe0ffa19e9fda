//! Seeing what the bus does: metrics, audit and tracing. Hot-path recorders are kept apart
//! from the readers, as tokio keeps `runtime/metrics/`'s recorders apart from
//! `RuntimeMetrics`: a recorder is bumped by senders and workers and imports nothing above
//! `message/`; a reader turns recordings into something to look at and may import the bus.
//!
//! | file | recorder or reader | holds |
//! |---|---|---|
//! | `topic_counters.rs` | recorder | `TopicCounters`: per-topic atomics and latency histograms |
//! | `latency_histogram.rs` | recorder | `LatencyHistogram` (its percentiles and buckets), `LatencySummary` |
//! | `audit_stage.rs` | recorder | a worker's staged audit entries, handed over in batches |
//! | `audit_ring.rs` | recorder | the bus's ring of the newest audit records |
//! | `audit_record.rs` | data | `AuditRecord`, `AuditEvent`, `AuditOutcome`, `AuditWriter`, `AuditError` |
//! | `audit_log.rs` | reader | `AuditLog`: what `bus.audit()` reads (`recent`, `for_message`) |
//! | `snapshot.rs` | data | `MetricsSnapshot`, `TopicMetrics`, `SubscriptionMetrics`, `WorkerMetrics`, `NodeMetrics` |
//! | `metrics_store.rs` | reader | `MetricsStore`: a bus's counters into a snapshot; `TopicLatencies` |
//! | `metrics_manager.rs` | reader | `MetricsManager`: snapshots to the `metrics` facade |
//! | `audit_publisher.rs` | reader | the task that hands new audit records to writers and `_system.audit` |
//! | `audit_writer_thread.rs` | reader | the thread the audit writers run on |
//! | `trace_layer.rs` | reader | `TraceRecord`, `TraceLayer` (feature `trace`) |
//! | `trace_context.rs` | recorder | W3C `traceparent`/`tracestate` written at send, the handling span's parent at delivery (feature `otel`) |

pub(crate) mod audit_log;
pub(crate) mod audit_publisher;
pub(crate) mod audit_record;
pub(crate) mod audit_ring;
pub(crate) mod audit_stage;
pub(crate) mod audit_writer_thread;
pub(crate) mod latency_histogram;
pub(crate) mod metrics_manager;
pub(crate) mod metrics_store;
pub(crate) mod snapshot;
pub(crate) mod topic_counters;
#[cfg(feature = "otel")]
pub(crate) mod trace_context;
pub(crate) mod trace_layer;
