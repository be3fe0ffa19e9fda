//! `TracingWriter` turns every audit record into one `tracing` event, target
//! `event_base::audit`, level INFO, carrying the record's fields.
//!
//! The audit writers run on a thread of their own, so this test binary installs a global
//! subscriber; it has this one test so that nothing else logs into it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use event_base::audit::TracingWriter;
use event_base::constant::target::AUDIT;
use event_base::{Ack, AuditEvent};
use event_base_test::{Probe, WAIT};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// One event: its level and its fields as text.
type Event = (tracing::Level, BTreeMap<String, String>);

/// Records every event of target `event_base::audit`.
#[derive(Clone, Default)]
struct AuditEvents(Arc<Mutex<Vec<Event>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

impl<S: tracing::Subscriber> Layer<S> for AuditEvents {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != AUDIT {
            return;
        }
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), fields));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_audit_record_becomes_one_tracing_event() {
    let events = AuditEvents::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(events.clone()))
        .expect("the only subscriber of this binary");
    let probe = Probe::new();
    let bus = event_base::builder()
        .audit_writer(TracingWriter)
        .handler(probe.handler("h", "orders", |m| {
            if m.attempts < 2 {
                Ack::retry()
            } else {
                Ack::Ack
            }
        }))
        .build()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(bus.send("orders", "x").await.unwrap());
    }
    bus.wait_idle(WAIT).await.unwrap();
    bus.audit().flush().await; // every record handed to the writers

    let records: Vec<_> = {
        let mut all = bus.audit().recent(1000);
        all.retain(|r| &*r.topic == "orders");
        all.sort_by_key(|r| r.seq);
        all
    };
    // Two deliveries per message (a retry, then the ack), a start and a finish each.
    assert_eq!(records.len(), 3 * 2 * 2);
    let logged: Vec<Event> = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, f)| f.get("topic").map(String::as_str) == Some("orders"))
        .cloned()
        .collect();
    assert_eq!(logged.len(), records.len(), "one event per record");
    for (record, (level, fields)) in records.iter().zip(&logged) {
        assert_eq!(*level, tracing::Level::INFO);
        let field = |name: &str| fields.get(name).map(String::as_str);
        assert_eq!(field("seq"), Some(record.seq.to_string().as_str()));
        assert_eq!(field("id"), Some(&*record.message_id));
        assert_eq!(field("worker"), Some("h-0"));
        assert_eq!(field("attempt"), Some(record.attempt.to_string().as_str()));
        let message = match record.event {
            AuditEvent::Started => "started",
            AuditEvent::Finished { .. } => "finished",
        };
        assert_eq!(field("message"), Some(message), "{fields:?}");
        if let AuditEvent::Finished { outcome, .. } = &record.event {
            assert_eq!(field("outcome"), Some(format!("{outcome:?}").as_str()));
        }
    }
    for id in &ids {
        let of_id = logged
            .iter()
            .filter(|(_, f)| f.get("id") == Some(&id.to_string()))
            .count();
        assert_eq!(of_id, 4, "{id}");
    }
}
