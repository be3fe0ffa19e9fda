//! Sends to a topic without a handler, or to a reserved topic, are refused with typed errors.

use event_base::{Ack, CoreError, EMessage};
use event_base_test::Probe;

#[tokio::test]
async fn topic_without_handler_is_refused_with_no_handler() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "known", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let err = bus.send("unknown", b"x".to_vec()).await.unwrap_err();
    assert!(
        matches!(&err, CoreError::NoHandler { topic } if topic == "unknown"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("use my_handlers as _"),
        "message says how to fix it"
    );
    assert_eq!(bus.wal_stats().appended, 0);
}

#[tokio::test]
async fn reserved_topics_are_refused() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("dl", event_base::constant::DEAD_LETTER, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let err = bus
        .send(
            event_base::constant::DEAD_LETTER,
            EMessage::standard("x", b"x".to_vec()),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, CoreError::ReservedTopic(ref t) if t == "_system.dead_letter"));
}

#[tokio::test]
async fn sends_after_shutdown_are_refused() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "t", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    bus.shutdown(event_base::ShutdownStrategy::Force)
        .await
        .unwrap();
    let err = bus.send("t", b"x".to_vec()).await.unwrap_err();
    assert!(matches!(err, CoreError::SystemShutdown), "{err:?}");
}

#[tokio::test]
async fn a_router_that_outlives_its_system_refuses_sends() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "t", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let router = bus.router();
    drop(bus);
    let err = router
        .send("t", EMessage::standard("t", b"x".to_vec()), None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, CoreError::SystemShutdown), "{err:?}");
}

#[tokio::test]
async fn a_handler_on_an_unknown_system_topic_is_a_config_error() {
    let probe = Probe::new();
    let err = event_base::builder()
        .handler(probe.handler("h", "_system.mine", |_| Ack::Ack))
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(err, CoreError::Config(ref m) if m.contains("_system.mine")),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_empty_topic_is_an_invalid_topic_not_a_missing_handler() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "known", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let err = bus.send("", b"x".to_vec()).await.unwrap_err();
    assert!(
        matches!(&err, CoreError::InvalidTopic { topic, .. } if topic.is_empty()),
        "{err}"
    );
    assert!(!err.to_string().contains("topic = \"\""), "{err}");
    let err = bus
        .send_batch("", vec![EMessage::standard("", "x")])
        .await
        .unwrap_err();
    assert!(matches!(err, CoreError::InvalidTopic { .. }), "{err}");
    assert_eq!(bus.wal_stats().appended, 0);
}

#[test]
fn a_core_errors_debug_is_its_message_and_its_sources() {
    let decode = EMessage::standard("t", "not json")
        .json_payload::<u32>()
        .unwrap_err();
    let debug = format!("{decode:?}");
    assert!(
        debug.starts_with("could not decode the payload as u32"),
        "{debug}"
    );
    assert!(debug.contains("caused by: expected ident"), "{debug}");
    let plain = format!("{:?}", CoreError::NotStarted);
    assert_eq!(plain, CoreError::NotStarted.to_string());
}
