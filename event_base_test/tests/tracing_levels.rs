//! The bus's own events use the documented targets and do not warn on normal paths: a retry
//! is DEBUG or INFO, a dead letter one WARN (target `event_base::delivery`), whatever
//! middleware the handler has.

use std::sync::{Arc, Mutex};

use event_base::constant::target;
use event_base::{handler_fn, Ack, EMessage, HandlerSpec, LoggerMiddleware};
use event_base_test::WAIT;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

/// One captured event.
#[derive(Debug, Clone)]
struct Logged {
    target: String,
    level: Level,
    module: String,
    message: String,
    id: Option<String>,
}

#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<Logged>>>);

#[derive(Default)]
struct Fields {
    message: String,
    id: Option<String>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "id" => self.id = Some(format!("{value:?}")),
            _ => {}
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_owned(),
            "id" => self.id = Some(value.to_owned()),
            _ => {}
        }
    }
}

impl<S: Subscriber> Layer<S> for Events {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        self.0.lock().unwrap().push(Logged {
            target: meta.target().to_owned(),
            level: *meta.level(),
            module: meta.module_path().unwrap_or_default().to_owned(),
            message: fields.message,
            id: fields.id,
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_not_a_warning_and_a_dead_letter_warns_once() {
    let events = Events::default();
    tracing_subscriber::registry().with(events.clone()).init();

    let handler = handler_fn(|m: EMessage| async move {
        match (m.payload.0.as_ref(), m.attempts) {
            (b"retry", 1) => Ack::retry(),
            (b"panic", _) => panic!("boom"),
            (b"dead", _) => Ack::dead(),
            _ => Ack::Ack,
        }
    });
    let bus = event_base::builder()
        .handler(
            HandlerSpec::new("h", "orders", handler)
                .retries(1)
                .middleware(LoggerMiddleware),
        )
        .build()
        .await
        .unwrap();
    let retried = bus.send("orders", "retry").await.unwrap().to_string();
    let panicked = bus.send("orders", "panic").await.unwrap().to_string();
    let dead = bus.send("orders", "dead").await.unwrap().to_string();
    bus.wait_idle(WAIT).await.unwrap();

    let events = events.0.lock().unwrap().clone();
    let own: Vec<&Logged> = events
        .iter()
        .filter(|e| e.module.starts_with("event_base"))
        .collect();
    assert!(!own.is_empty());
    for e in &own {
        assert!(
            target::ALL.contains(&e.target.as_str()),
            "{e:?}: not a documented target"
        );
    }
    let about = |id: &str| -> Vec<&Logged> {
        own.iter()
            .copied()
            .filter(|e| e.id.as_deref() == Some(id))
            .collect()
    };

    // The NoAck retry: DEBUG, nothing louder.
    assert!(
        about(&retried).iter().all(|e| e.level > Level::WARN),
        "{own:#?}"
    );
    assert!(about(&retried).iter().any(|e| e.level == Level::DEBUG
        && e.target == target::DELIVERY
        && e.message.contains("retrying")));
    // The panic: retried once at INFO, then one dead-letter warning.
    assert!(about(&panicked).iter().any(|e| e.level == Level::INFO
        && e.target == target::DELIVERY
        && e.message.contains("retrying")));
    for id in [&panicked, &dead] {
        let warnings: Vec<&Logged> = about(id)
            .into_iter()
            .filter(|e| e.level <= Level::WARN)
            .collect();
        assert_eq!(warnings.len(), 1, "{id}: {warnings:#?}");
        assert_eq!(warnings[0].level, Level::WARN);
        assert_eq!(warnings[0].target, target::DELIVERY);
        assert_eq!(warnings[0].message, "message dead-lettered");
    }
    // Nothing else of the bus's warned.
    let loud = own.iter().filter(|e| e.level <= Level::WARN).count();
    assert_eq!(loud, 2, "{own:#?}");
}
