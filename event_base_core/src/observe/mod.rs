pub(crate) mod audit_log;
pub(crate) mod latency_histogram;
pub(crate) mod metrics_store;
pub(crate) mod trace_layer;
