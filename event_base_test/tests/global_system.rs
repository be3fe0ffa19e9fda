//! The global system: `#[handler]`, `start_system!`, `send_msg!` in all forms,
//! `TopicRouter::global()`, and its lifecycle. One test, since the global is process-wide.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use event_base::prelude::*;
use event_base::FlumeQueueFactory;

static ORDERS: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);

#[handler(topic = "order.created", workers = 4)]
async fn handle_order(msg: &EMessage) -> Ack {
    ORDERS.fetch_add(1, Ordering::SeqCst);
    BYTES.fetch_add(msg.payload.0.len(), Ordering::SeqCst);
    Ack::Ack
}

#[handler(topic = "audit.trail", workers = 2, timeout = 5, retries = 2)]
/// A public handler: the generated struct is public too.
pub async fn audit_trail(_msg: &EMessage) -> Ack {
    Ack::Ack
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_system_lifecycle() {
    // Nothing runs yet.
    let err = TopicRouter::global()
        .send(
            "order.created",
            EMessage::standard("order.created", b"x".to_vec()),
            None,
            None,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, CoreError::NotStarted));

    let bus = start_system!(queue: FlumeQueueFactory::bounded(64), batch_size: 16)
        .await
        .unwrap();
    assert_eq!(bus.workers("order.created").len(), 4);
    assert_eq!(
        bus.workers("audit.trail"),
        vec!["audit_trail-0", "audit_trail-1"]
    );
    // The generated struct is usable by value too.
    let _h: &dyn EHandler = &HandleOrderHandler;

    // A second global start is refused while the first runs.
    assert!(matches!(
        start_system!().await,
        Err(CoreError::AlreadyStarted)
    ));

    send_msg!("order.created", b"hello".to_vec()).await.unwrap();
    send_msg!(
        "order.created",
        EMessage::standard("order.created", b"abc".to_vec())
    )
    .await
    .unwrap();
    let msg = EMessage::new(
        "order.created",
        b"x".to_vec(),
        DeliveryMode::Broadcast,
        None,
    );
    TopicRouter::global()
        .send("order.created", msg, Some(true), None)
        .await
        .unwrap();
    let msg = EMessage::standard("order.created", b"zz".to_vec());
    send_msg!(
        "order.created",
        msg,
        Some(false),
        Some(Duration::from_secs(1))
    )
    .await
    .unwrap();
    bus.wait_idle(Duration::from_secs(10)).await.unwrap();
    assert_eq!(ORDERS.load(Ordering::SeqCst), 1 + 1 + 4 + 1);
    assert_eq!(BYTES.load(Ordering::SeqCst), 5 + 3 + 4 + 2);

    let report = bus
        .shutdown(ShutdownStrategy::Drain {
            timeout: Duration::from_secs(5),
        })
        .await
        .unwrap();
    assert!(report.drained);
    assert_eq!(report.left_for_replay, 0);
    assert!(matches!(
        send_msg!("order.created", b"late".to_vec()).await,
        Err(CoreError::NotStarted)
    ));

    // After a shutdown a new global system may start.
    let bus = start_system!().await.unwrap();
    send_msg!("audit.trail", b"again".to_vec()).await.unwrap();
    bus.wait_idle(Duration::from_secs(10)).await.unwrap();
    assert_eq!(bus.metrics().topic("audit.trail").unwrap().acked, 1);
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}
