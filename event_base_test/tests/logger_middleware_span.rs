//! `LoggerMiddleware` opens a span per delivery with id, topic, attempt, outcome and
//! duration, captured here by a test subscriber.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use event_base::{Ack, EMessage, LoggerMiddleware};
use event_base_test::{Probe, WAIT};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

type Spans = Arc<Mutex<BTreeMap<u64, BTreeMap<String, String>>>>;

struct Capture(Spans);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        if attrs.metadata().name() != "event_base.message" {
            return;
        }
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().insert(id.into_u64(), fields);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(fields) = self.0.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(fields));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_logger_span_carries_the_delivery_fields() {
    let spans: Spans = Arc::default();
    tracing_subscriber::registry()
        .with(Capture(spans.clone()))
        .init();

    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(
            probe
                .handler("h", "orders", |m| {
                    if m.payload.0.as_ref() == b"bad" {
                        Ack::dead()
                    } else {
                        Ack::Ack
                    }
                })
                .middleware(LoggerMiddleware),
        )
        .build()
        .await
        .unwrap();
    let good = bus
        .send("orders", EMessage::standard("orders", b"good".to_vec()))
        .await
        .unwrap();
    let bad = bus.send("orders", b"bad".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();

    let spans = spans.lock().unwrap().clone();
    let find = |id: &event_base::Uuid| {
        spans
            .values()
            .find(|f| f.get("id") == Some(&id.to_string()))
            .cloned()
            .unwrap_or_else(|| panic!("no span for {id}: {spans:?}"))
    };
    let g = find(&good);
    assert_eq!(g["topic"], "orders");
    assert_eq!(g["attempt"], "1");
    assert_eq!(g["outcome"], "ack");
    assert!(g["duration_us"].parse::<u64>().is_ok());
    assert_eq!(find(&bad)["outcome"], "dead");
}
