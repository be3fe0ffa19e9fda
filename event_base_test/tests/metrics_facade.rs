//! With the `metrics` feature, `MetricsManager::export` publishes the snapshot to the
//! `metrics` facade, so any exporter picks the figures up: every series labelled with its bus,
//! counters that never go down, latencies as histograms, and the names, types and labels that
//! the table in `event_base/guide/observability.md` gives.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use event_base::{Ack, CoreError, EMessage, FlumeQueueFactory, MemoryWal};
use event_base_test::{Gate, Probe, WAIT};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// What a recorder saw.
#[derive(Default)]
struct Seen {
    /// The last value written to every key (name plus sorted labels).
    values: HashMap<String, f64>,
    /// Every value written to a counter, in order, by key.
    counter_writes: HashMap<String, Vec<u64>>,
    /// Samples handed to each histogram key.
    samples: HashMap<String, u64>,
    /// Per metric name: its type and the names of its labels.
    shapes: BTreeMap<String, (&'static str, BTreeSet<String>)>,
}

#[derive(Default, Clone)]
struct Capture(Arc<Mutex<Seen>>);

struct Slot {
    key: String,
    seen: Arc<Mutex<Seen>>,
}

impl CounterFn for Slot {
    fn increment(&self, v: u64) {
        let mut seen = self.seen.lock().unwrap();
        let now = seen.values.get(&self.key).copied().unwrap_or(0.0) as u64 + v;
        seen.values.insert(self.key.clone(), now as f64);
        seen.counter_writes
            .entry(self.key.clone())
            .or_default()
            .push(now);
    }
    fn absolute(&self, v: u64) {
        let mut seen = self.seen.lock().unwrap();
        seen.values.insert(self.key.clone(), v as f64);
        seen.counter_writes
            .entry(self.key.clone())
            .or_default()
            .push(v);
    }
}

impl GaugeFn for Slot {
    fn increment(&self, v: f64) {
        *self
            .seen
            .lock()
            .unwrap()
            .values
            .entry(self.key.clone())
            .or_default() += v;
    }
    fn decrement(&self, v: f64) {
        *self
            .seen
            .lock()
            .unwrap()
            .values
            .entry(self.key.clone())
            .or_default() -= v;
    }
    fn set(&self, v: f64) {
        self.seen.lock().unwrap().values.insert(self.key.clone(), v);
    }
}

impl HistogramFn for Slot {
    fn record(&self, _: f64) {
        self.record_many(0.0, 1);
    }
    fn record_many(&self, _: f64, count: usize) {
        *self
            .seen
            .lock()
            .unwrap()
            .samples
            .entry(self.key.clone())
            .or_default() += count as u64;
    }
}

impl Capture {
    fn slot(&self, key: &Key, kind: &'static str) -> Arc<Slot> {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let names = key.labels().map(|l| l.key().to_owned()).collect();
        let mut seen = self.0.lock().unwrap();
        let shape = seen
            .shapes
            .entry(key.name().to_owned())
            .or_insert((kind, names));
        assert_eq!(shape.0, kind, "{} registered as two types", key.name());
        Arc::new(Slot {
            key: format!("{}{{{}}}", key.name(), labels.join(",")),
            seen: self.0.clone(),
        })
    }
    fn get(&self, k: &str) -> Option<f64> {
        self.0.lock().unwrap().values.get(k).copied()
    }
    fn samples(&self, k: &str) -> Option<u64> {
        self.0.lock().unwrap().samples.get(k).copied()
    }
}

impl Recorder for Capture {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.slot(key, "counter"))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.slot(key, "gauge"))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.slot(key, "histogram"))
    }
}

/// A bus whose handler dead-letters a message whose first byte is 0.
async fn bus(probe: &Arc<Probe>, name: Option<&str>) -> event_base::EventBus {
    let builder = event_base::builder().handler(probe.handler("h", "orders", |m| {
        if m.payload.0[0] == 0 {
            Ack::dead()
        } else {
            Ack::Ack
        }
    }));
    match name {
        Some(name) => builder.name(name),
        None => builder,
    }
    .build()
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_publishes_the_counters_to_the_facade() {
    let probe = Probe::new();
    let bus = bus(&probe, Some("billing")).await;
    for i in 0..10u8 {
        bus.send("orders", vec![i]).await.unwrap();
    }
    bus.wait_idle(WAIT).await.unwrap();
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || bus.metrics_manager().export());
    let get = |k: &str| capture.get(k);
    assert_eq!(
        get("event_base_accepted_total{bus=billing,topic=orders}"),
        Some(10.0)
    );
    assert_eq!(
        get("event_base_refused_total{bus=billing,topic=orders}"),
        Some(0.0)
    );
    assert_eq!(
        get("event_base_handled_total{bus=billing,topic=orders}"),
        Some(10.0)
    );
    assert_eq!(
        get("event_base_acked_total{bus=billing,topic=orders}"),
        Some(9.0)
    );
    assert_eq!(
        get("event_base_dead_total{bus=billing,topic=orders}"),
        Some(1.0)
    );
    assert_eq!(
        get("event_base_in_flight{bus=billing,topic=orders}"),
        Some(0.0)
    );
    assert_eq!(
        get("event_base_worker_handled_total{bus=billing,worker=h-0}"),
        Some(10.0)
    );
    assert_eq!(get("event_base_node_in_flight{bus=billing}"), Some(0.0));
    // Latencies are histograms: one sample per delivery, handed on once.
    let handler = "event_base_handler_seconds{bus=billing,topic=orders}";
    let wait = "event_base_queue_wait_seconds{bus=billing,topic=orders}";
    assert_eq!(capture.samples(handler), Some(10));
    assert_eq!(capture.samples(wait), Some(10));
    metrics::with_local_recorder(&capture, || bus.metrics_manager().export());
    assert_eq!(
        capture.samples(handler),
        Some(10),
        "an export hands a sample on once"
    );
    bus.send("orders", vec![1]).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    metrics::with_local_recorder(&capture, || bus.metrics_manager().export());
    assert_eq!(capture.samples(handler), Some(11));
    // No lifetime quantile gauges any more.
    assert!(capture
        .0
        .lock()
        .unwrap()
        .values
        .keys()
        .all(|k| !k.contains("quantile")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_buses_in_one_process_keep_apart_series() {
    let (p1, p2) = (Probe::new(), Probe::new());
    let (one, two) = (bus(&p1, None).await, bus(&p2, None).await);
    let (n1, n2) = (one.metrics().bus, two.metrics().bus);
    assert_ne!(n1, n2, "default bus names are unique in a process");
    for i in 1..=3u8 {
        one.send("orders", vec![i]).await.unwrap();
    }
    for i in 1..=5u8 {
        two.send("orders", vec![i]).await.unwrap();
    }
    one.wait_idle(WAIT).await.unwrap();
    two.wait_idle(WAIT).await.unwrap();
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || {
        one.metrics_manager().export();
        two.metrics_manager().export();
    });
    for (bus, n) in [(&n1, 3.0), (&n2, 5.0)] {
        assert_eq!(
            capture.get(&format!("event_base_acked_total{{bus={bus},topic=orders}}")),
            Some(n)
        );
        assert_eq!(
            capture.get(&format!(
                "event_base_worker_handled_total{{bus={bus},worker=h-0}}"
            )),
            Some(n)
        );
        assert!(capture
            .get(&format!("event_base_node_uptime_seconds{{bus={bus}}}"))
            .is_some());
    }
    // Every series carries the bus label.
    let seen = capture.0.lock().unwrap();
    for (name, (_, labels)) in &seen.shapes {
        assert!(labels.contains("bus"), "{name} has no bus label");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_never_decrease_across_exports_even_when_sends_are_refused() {
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = event_base::EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::bounded(2))
        .batch_size(1)
        .name("refusing")
        .handler(probe.gated_handler("slow", "slow", &gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let capture = Capture::default();
    let export = || metrics::with_local_recorder(&capture, || bus.metrics_manager().export());
    let mut refused = 0u64;
    for i in 0..50u32 {
        let msg = EMessage::standard("slow", i.to_le_bytes().to_vec());
        match bus
            .send_with("slow", msg, event_base::SendOptions::new().try_send())
            .await
        {
            Ok(_) => {}
            Err(CoreError::QueueFull { .. }) => refused += 1,
            Err(other) => panic!("unexpected error {other:?}"),
        }
        export();
    }
    assert!(refused > 0, "the bounded queue never filled");
    gate.open();
    bus.wait_idle(WAIT).await.unwrap();
    export();

    let snap = bus.metrics().topic("slow").unwrap();
    let get = |k: &str| capture.get(k).map(|v| v as u64);
    assert_eq!(
        get("event_base_refused_total{bus=refusing,topic=slow}"),
        Some(refused)
    );
    assert_eq!(
        get("event_base_accepted_total{bus=refusing,topic=slow}"),
        Some(50)
    );
    assert_eq!(snap.accepted - snap.refused, snap.sent);
    assert_eq!(snap.sent, 50 - refused);
    let seen = capture.0.lock().unwrap();
    for (key, writes) in &seen.counter_writes {
        assert!(
            writes.windows(2).all(|w| w[0] <= w[1]),
            "{key} went down: {writes:?}"
        );
    }
}

/// The rows of the metric table in the guide: name, type, label names.
fn documented() -> BTreeMap<String, (String, BTreeSet<String>)> {
    let guide = include_str!("../../event_base/guide/observability.md");
    let table = guide
        .split("<!-- exported-metrics -->")
        .nth(1)
        .expect("the guide marks its metric table");
    table
        .lines()
        .filter(|l| l.starts_with("| `event_base_"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let ticked = |cell: &str| -> Vec<String> {
                cell.split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_owned)
                    .collect()
            };
            let name = ticked(cells[1]).remove(0);
            let labels = ticked(cells[3]).into_iter().collect();
            (name, (cells[2].to_owned(), labels))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_names_types_and_labels_are_the_guides_table() {
    let probe = Probe::new();
    let bus = bus(&probe, Some("documented")).await;
    bus.send("orders", vec![1]).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || bus.metrics_manager().export());
    let exported: BTreeMap<String, (String, BTreeSet<String>)> = capture
        .0
        .lock()
        .unwrap()
        .shapes
        .iter()
        .map(|(n, (kind, labels))| (n.clone(), ((*kind).to_owned(), labels.clone())))
        .collect();
    let documented = documented();
    assert!(!documented.is_empty());
    assert_eq!(exported, documented);
    for name in exported.keys() {
        let counter = exported[name].0 == "counter";
        assert_eq!(
            counter,
            name.ends_with("_total"),
            "{name}: `_total` is for counters"
        );
    }
}
