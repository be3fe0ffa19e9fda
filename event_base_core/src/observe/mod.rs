//! Seeing what the bus does: metrics, audit and tracing. Hot-path recorders are kept apart
//! from the readers, as tokio keeps `runtime/metrics/`'s recorders apart from
//! `RuntimeMetrics`: a recorder is bumped by senders and workers and imports nothing above
//! `message/`; a reader turns recordings into something to look at. The readers here read
//! what they are given (`AuditLog`: the ring); those that read a whole running bus
//! (`MetricsStore`, `MetricsManager`, the audit publisher, `TraceLayer`) are the bus's, in
//! `bus/observe/`, as tokio's `RuntimeMetrics` is in `runtime/`.
//!
//! May import: the contracts (`message/`, `backend/`) and the leaves; nothing of the running bus.
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
//! | `audit_writer_thread.rs` | reader | the thread the audit writers run on |
//! | `trace_context.rs` | recorder | W3C `traceparent`/`tracestate` written at send, the handling span's parent at delivery (feature `otel`) |

pub(crate) mod audit_log;
pub(crate) mod audit_record;
pub(crate) mod audit_ring;
pub(crate) mod audit_stage;
pub(crate) mod audit_writer_thread;
pub(crate) mod latency_histogram;
pub(crate) mod snapshot;
pub(crate) mod topic_counters;
#[cfg(feature = "otel")]
pub(crate) mod trace_context;
