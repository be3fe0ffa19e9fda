//! `EventBusBuilder::export_metrics(interval)` publishes the metrics to the `metrics` facade
//! by itself, again and again, with nobody calling `MetricsManager::export`.
//!
//! The export runs on a task of the bus, on any thread, so this test binary installs a global
//! recorder; it has this one test so that nothing else writes to it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_base::Ack;
use event_base_test::{Probe, WAIT};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use tokio::sync::watch;

/// The last value written to each counter (name plus sorted labels), and a count of writes
/// to wake the test on each.
#[derive(Clone)]
struct Capture {
    counters: Arc<Mutex<HashMap<String, u64>>>,
    writes: Arc<watch::Sender<u64>>,
}

struct Slot {
    key: String,
    capture: Capture,
}

impl Slot {
    fn write(&self, v: u64) {
        self.capture
            .counters
            .lock()
            .unwrap()
            .insert(self.key.clone(), v);
        self.capture.writes.send_modify(|n| *n += 1);
    }
}

impl CounterFn for Slot {
    fn increment(&self, v: u64) {
        let now = self
            .capture
            .counters
            .lock()
            .unwrap()
            .get(&self.key)
            .copied()
            .unwrap_or(0);
        self.write(now + v);
    }
    fn absolute(&self, v: u64) {
        self.write(v);
    }
}

/// Gauges and histograms are not looked at here.
struct Ignored;

impl GaugeFn for Ignored {
    fn increment(&self, _: f64) {}
    fn decrement(&self, _: f64) {}
    fn set(&self, _: f64) {}
}

impl HistogramFn for Ignored {
    fn record(&self, _: f64) {}
}

impl Recorder for Capture {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        Counter::from_arc(Arc::new(Slot {
            key: format!("{}{{{}}}", key.name(), labels.join(",")),
            capture: self.clone(),
        }))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(Arc::new(Ignored))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(Arc::new(Ignored))
    }
}

impl Capture {
    /// Waits until counter `key` has been written with `value`.
    async fn wait_for(&self, key: &str, value: u64) {
        let mut writes = self.writes.subscribe();
        let reached =
            writes.wait_for(|_| self.counters.lock().unwrap().get(key).copied() == Some(value));
        if tokio::time::timeout(WAIT, reached).await.is_err() {
            panic!(
                "{key} never exported as {value}; last: {:?}",
                self.counters.lock().unwrap().get(key)
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bus_exports_every_interval_by_itself() {
    let capture = Capture {
        counters: Arc::default(),
        writes: Arc::new(watch::channel(0).0),
    };
    metrics::set_global_recorder(capture.clone()).expect("the only recorder of this binary");
    let probe = Probe::new();
    let bus = event_base::builder()
        .name("periodic")
        .export_metrics(Duration::from_millis(20))
        .handler(probe.handler("h", "orders", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    const ACKED: &str = "event_base_acked_total{bus=periodic,topic=orders}";
    for _ in 0..3 {
        bus.send("orders", "x").await.unwrap();
    }
    bus.wait_idle(WAIT).await.unwrap();
    capture.wait_for(ACKED, 3).await;
    // Not a single export at start: later traffic reaches the facade too.
    for _ in 0..2 {
        bus.send("orders", "x").await.unwrap();
    }
    bus.wait_idle(WAIT).await.unwrap();
    capture.wait_for(ACKED, 5).await;
    capture
        .wait_for(
            "event_base_worker_handled_total{bus=periodic,worker=h-0}",
            5,
        )
        .await;
}
