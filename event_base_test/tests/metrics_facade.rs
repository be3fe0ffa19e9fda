//! With the `metrics` feature, `MetricsManager::export` publishes the snapshot to the
//! `metrics` facade, so any exporter picks the figures up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use event_base::Ack;
use event_base_test::{Probe, WAIT};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString,
    Unit,
};

/// Remembers the last value written to every key (name plus labels).
#[derive(Default, Clone)]
struct Capture(Arc<Mutex<HashMap<String, f64>>>);

struct Slot {
    key: String,
    values: Arc<Mutex<HashMap<String, f64>>>,
}

impl CounterFn for Slot {
    fn increment(&self, v: u64) {
        *self
            .values
            .lock()
            .unwrap()
            .entry(self.key.clone())
            .or_default() += v as f64;
    }
    fn absolute(&self, v: u64) {
        self.values
            .lock()
            .unwrap()
            .insert(self.key.clone(), v as f64);
    }
}

impl GaugeFn for Slot {
    fn increment(&self, v: f64) {
        *self
            .values
            .lock()
            .unwrap()
            .entry(self.key.clone())
            .or_default() += v;
    }
    fn decrement(&self, v: f64) {
        *self
            .values
            .lock()
            .unwrap()
            .entry(self.key.clone())
            .or_default() -= v;
    }
    fn set(&self, v: f64) {
        self.values.lock().unwrap().insert(self.key.clone(), v);
    }
}

impl Capture {
    fn slot(&self, key: &Key) -> Arc<Slot> {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        Arc::new(Slot {
            key: format!("{}{{{}}}", key.name(), labels.join(",")),
            values: self.0.clone(),
        })
    }
    fn get(&self, k: &str) -> Option<f64> {
        self.0.lock().unwrap().get(k).copied()
    }
}

impl Recorder for Capture {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.slot(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.slot(key))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_publishes_the_counters_to_the_facade() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "orders", |m| {
            if m.payload.0[0] == 0 {
                Ack::dead()
            } else {
                Ack::Ack
            }
        }))
        .build()
        .await
        .unwrap();
    for i in 0..10u8 {
        bus.send("orders", vec![i]).await.unwrap();
    }
    bus.wait_idle(WAIT).await.unwrap();
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || bus.metrics_manager().export());
    assert_eq!(
        capture.get("event_base_sent_total{topic=orders}"),
        Some(10.0)
    );
    assert_eq!(
        capture.get("event_base_acked_total{topic=orders}"),
        Some(9.0)
    );
    assert_eq!(
        capture.get("event_base_dead_total{topic=orders}"),
        Some(1.0)
    );
    assert_eq!(capture.get("event_base_in_flight{topic=orders}"), Some(0.0));
    assert!(capture
        .get("event_base_handler_seconds{quantile=0.99,topic=orders}")
        .is_some());
    assert_eq!(
        capture.get("event_base_worker_handled_total{worker=h-0}"),
        Some(10.0)
    );
    assert_eq!(capture.get("event_base_node_in_flight{}"), Some(0.0));
}
