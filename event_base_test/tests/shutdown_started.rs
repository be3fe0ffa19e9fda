//! `EventBus::shutdown_started` resolves when the bus stops accepting sends, whoever stops it,
//! and not for a `Graceful` stop of one worker.

use std::time::Duration;

use event_base::prelude::*;

async fn bus() -> EventBus {
    event_base::builder()
        .handler(HandlerSpec::new(
            "jobs",
            "jobs",
            event_base::handler_fn(|_m: EMessage| async { Ack::Ack }),
        ))
        .build()
        .await
        .unwrap()
}

#[tokio::test]
async fn resolves_when_a_shutdown_begins() {
    let bus = bus().await;
    let waiter = tokio::spawn({
        let bus = bus.clone();
        async move {
            bus.shutdown_started().await;
            bus.is_accepting()
        }
    });
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished(), "no shutdown yet");
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
    let accepting_when_woken = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the shutdown")
        .unwrap();
    assert!(!accepting_when_woken, "woken once sends are refused");
    // Afterwards it resolves at once.
    tokio::time::timeout(Duration::from_secs(1), bus.shutdown_started())
        .await
        .expect("resolves at once after a shutdown");
}

#[tokio::test]
async fn a_graceful_stop_of_one_worker_is_not_a_shutdown() {
    let bus = bus().await;
    bus.remove_worker("jobs-0").await.unwrap();
    assert!(bus.is_accepting());
    let waited = tokio::time::timeout(Duration::from_millis(50), bus.shutdown_started()).await;
    assert!(waited.is_err(), "still accepting: nothing to resolve");
}

#[tokio::test]
async fn resolves_on_a_shutdown_by_message() {
    let bus = bus().await;
    let waiter = tokio::spawn({
        let bus = bus.clone();
        async move { bus.shutdown_started().await }
    });
    tokio::task::yield_now().await;
    let cmd = event_base::ShutdownCommand {
        strategy: ShutdownStrategy::Force,
        reason: Some("test".into()),
    };
    let msg = EMessage::json(event_base::constant::SHUTDOWN, &cmd).unwrap();
    bus.send(event_base::constant::SHUTDOWN, msg).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the shutdown message")
        .unwrap();
}
