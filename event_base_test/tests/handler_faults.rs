//! Explicit `Dead`, panics and timeouts end in the dead-letter queue with their reason, and
//! the worker goes on to handle the next message.

use std::time::Duration;

use event_base::{async_trait, Ack, DeadReason, EHandler, EMessage, HandlerSpec};
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_dead_is_a_dead_letter_at_once() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("strict", "strict", |m| {
            if m.payload.0.is_empty() {
                Ack::dead()
            } else {
                Ack::Ack
            }
        }))
        .build()
        .await
        .unwrap();
    let bad = bus.send("strict", Vec::<u8>::new()).await.unwrap();
    bus.send("strict", b"ok".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        probe.count(),
        2,
        "the dead one was delivered once, then the next message"
    );
    let dead = bus.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].message.id.clone(), dead[0].reason.clone()),
        (bad.to_string(), DeadReason::Explicit)
    );
}

struct Panicky;

#[async_trait]
impl EHandler for Panicky {
    async fn handler(&self, msg: &EMessage) -> Ack {
        if msg.payload.0.as_ref() == b"boom" {
            panic!("boom at attempt {}", msg.attempts);
        }
        Ack::Ack
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_retried_then_dead_and_the_worker_survives() {
    let bus = event_base::builder()
        .handler(HandlerSpec::new("panicky", "p", Panicky).retries(2))
        .build()
        .await
        .unwrap();
    let id = bus.send("p", b"boom".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let dead = bus.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, id);
    assert_eq!(dead[0].attempts, 3, "1 delivery + 2 retries");
    assert_eq!(
        dead[0].reason,
        DeadReason::Other("panic: boom at attempt 3".into())
    );

    // The single worker is still alive.
    bus.send("p", b"fine".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let m = bus.metrics().topic("p").unwrap();
    assert_eq!((m.handled, m.acked, m.retried, m.dead), (4, 1, 2, 1));
}

struct Sleeper;

#[async_trait]
impl EHandler for Sleeper {
    async fn handler(&self, msg: &EMessage) -> Ack {
        if msg.payload.0.as_ref() == b"hang" {
            std::future::pending::<()>().await;
        }
        Ack::Ack
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_handler_times_out_then_dead_and_the_worker_survives() {
    let bus = event_base::builder()
        .handler(
            HandlerSpec::new("sleeper", "s", Sleeper)
                .timeout(Duration::from_millis(50))
                .retries(1),
        )
        .build()
        .await
        .unwrap();
    let id = bus.send("s", b"hang".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let dead = bus.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (
            dead[0].message.id.clone(),
            dead[0].reason.clone(),
            dead[0].attempts
        ),
        (id.to_string(), DeadReason::Timeout, 2)
    );

    bus.send("s", b"quick".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(bus.metrics().topic("s").unwrap().acked, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_announced_on_the_system_topic() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("strict", "strict", |_| Ack::dead()))
        .handler(probe.handler("watch", event_base::constant::DEAD_LETTER, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let id = bus.send("strict", b"x".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let announced: Vec<_> = probe
        .seen()
        .into_iter()
        .filter(|s| s.label == "watch")
        .collect();
    assert_eq!(announced.len(), 1);
    let dead: event_base::DeadLetterMessage = serde_json_from(&announced[0].payload);
    assert_eq!(dead.message.id, id);
    assert_eq!(dead.reason, DeadReason::Explicit);
}

fn serde_json_from(bytes: &[u8]) -> event_base::DeadLetterMessage {
    EMessage::standard("x", bytes.to_vec())
        .json_payload()
        .unwrap()
}
