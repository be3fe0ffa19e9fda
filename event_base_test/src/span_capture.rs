//! [`SpanCapture`]: a `tracing` layer that records the fields of every span with one name, so
//! tests can check what a span carried (the spans the bus and its middleware open).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// Fields of each captured span, by span id.
pub type CapturedSpans = Arc<Mutex<BTreeMap<u64, BTreeMap<String, String>>>>;

/// Records the fields of every span named `name`, both those given at creation and those
/// recorded later (`Span::record`). Values are kept as their `Debug` text (strings as is).
#[derive(Debug)]
pub struct SpanCapture {
    name: &'static str,
    spans: CapturedSpans,
}

impl SpanCapture {
    /// A layer capturing spans named `name`, and the map it fills.
    pub fn new(name: &'static str) -> (SpanCapture, CapturedSpans) {
        let spans = CapturedSpans::default();
        (
            SpanCapture {
                name,
                spans: spans.clone(),
            },
            spans,
        )
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for SpanCapture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        if attrs.metadata().name() != self.name {
            return;
        }
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        if let Ok(mut spans) = self.spans.lock() {
            spans.insert(id.into_u64(), fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Ok(mut spans) = self.spans.lock() {
            if let Some(fields) = spans.get_mut(&id.into_u64()) {
                values.record(&mut Fields(fields));
            }
        }
    }
}
