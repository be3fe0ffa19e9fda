//! With a subscriber that wants it, every delivery runs inside an `event_base.handle` span
//! carrying the message's id, topic and attempt. (Without one, the worker skips wrapping the
//! handler in the span; that path is what every other test runs.)

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use event_base::{Ack, EMessage};
use event_base_test::{Probe, WAIT};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

type Spans = Arc<Mutex<BTreeMap<u64, BTreeMap<String, String>>>>;
/// Message id, and the id of the span the handler ran in.
type Seen = Arc<Mutex<Vec<(String, Option<u64>)>>>;

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
        if attrs.metadata().name() != "event_base.handle" {
            return;
        }
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().insert(id.into_u64(), fields);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_delivery_runs_in_its_span() {
    let spans: Spans = Arc::default();
    tracing_subscriber::registry()
        .with(Capture(spans.clone()))
        .init();

    // The handler notes the span it runs in, by message id.
    let seen: Seen = Arc::default();
    let probe = Probe::new();
    let noted = seen.clone();
    let bus = event_base::builder()
        .handler(probe.handler("h", "orders", move |m| {
            let current = tracing::Span::current().id().map(|id| id.into_u64());
            noted.lock().unwrap().push((m.id.to_string(), current));
            Ack::Ack
        }))
        .build()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..5u8 {
        ids.push(
            bus.send("orders", EMessage::standard("orders", vec![i]))
                .await
                .unwrap()
                .to_string(),
        );
    }
    bus.wait_idle(WAIT).await.unwrap();

    let spans = spans.lock().unwrap().clone();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 5);
    for (id, span) in seen {
        assert!(ids.contains(&id));
        let span = span.expect("the handler runs inside a span");
        let fields = spans
            .get(&span)
            .expect("the handler's span is an event_base.handle span");
        assert_eq!(fields.get("id"), Some(&id));
        assert_eq!(fields.get("topic").map(String::as_str), Some("orders"));
        assert_eq!(fields.get("attempt").map(String::as_str), Some("1"));
    }
}
