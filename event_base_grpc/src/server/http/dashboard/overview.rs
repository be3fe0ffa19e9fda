//! The overview: everything the page shows but dead letters and nodes, at one moment. `GET
//! /api/overview` answers it once; `GET /api/events` sends it again every second.
//!
//! ```text
//! {"taken_at_ms": .., "status": {node, node_type, bus, version, accepting, uptime_ms,
//!   in_flight, waiting_on_timers, workers, dead_letters},
//!  "wal": {appended, completed, live, dead, disk_bytes, syncs, failed, failure},
//!  "tables": {"topics": TABLE, "subscriptions": TABLE, "workers": TABLE}}
//! ```
//!
//! (`TABLE` as `table.rs` describes.) Every figure is from one `EventBus::metrics` snapshot,
//! the registry and the WAL, read without I/O: cheap enough to send every second to every
//! open page.

use std::time::{SystemTime, UNIX_EPOCH};

use event_base_core::EventBus;
use serde_json::{json, Value};

use super::subscriptions::subscriptions_table;
use super::topics::topics_table;
use super::workers::workers_table;

/// The overview of `bus` now.
pub(super) fn overview(bus: &EventBus) -> Value {
    let taken_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let metrics = bus.metrics();
    let workers = bus.registry().list();
    let mut topics = bus.router().topics();
    topics.retain(|t| !super::is_system(t));
    topics.sort();
    let wal = crate::convert::wal_stats(&**bus.wal());
    json!({
        "taken_at_ms": taken_at,
        "status": {
            "node": metrics.node_name,
            "node_type": metrics.node_type.as_str(),
            "bus": metrics.bus,
            "version": env!("CARGO_PKG_VERSION"),
            "accepting": bus.is_accepting(),
            "uptime_ms": metrics.node.uptime.as_millis() as u64,
            "in_flight": metrics.node.in_flight,
            "waiting_on_timers": metrics.node.waiting_on_timers,
            "workers": metrics.node.workers,
            "dead_letters": wal.dead,
        },
        "wal": {
            "appended": wal.appended,
            "completed": wal.completed,
            "live": wal.live,
            "dead": wal.dead,
            "disk_bytes": wal.disk_bytes,
            "syncs": wal.syncs,
            "failed": wal.failed,
            "failure": wal.failure,
        },
        "tables": {
            "topics": topics_table(&topics, &metrics, &workers),
            "subscriptions": subscriptions_table(&metrics, &workers),
            "workers": workers_table(&workers, &metrics),
        },
    })
}
