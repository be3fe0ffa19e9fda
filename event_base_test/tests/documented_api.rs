//! The API as the original documents write it (core concepts, architecture), in code shaped
//! like theirs: the message types with their documented fields and field types, built with
//! struct literals; the `Ack` and `DeadReason` forms; a hand-written `EHandler`; a `#[handler]`
//! with `workers`; `TopicRouter::global().send(topic, msg, Some(true), None)`; `NodeType`.
//! Everything comes from the prelude, as in the documents. If a name or a field type drifts
//! from the documents, this file stops compiling.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use event_base::prelude::*;

#[test]
fn emessage_has_the_ten_documented_fields_with_their_types_and_its_headers() {
    let msg = EMessage {
        id: String::from("order-1"),
        topic: MessageTopic("order.created".to_owned()),
        payload: MessagePayload::from(b"serialized-data".to_vec()),
        metadata: MessageMetadata {
            created_at: SystemTime::now(),
            trace_id: Some("trace-1".to_owned()),
            correlation_id: None,
            causation_id: Some("order-0".to_owned()),
            source: Some("checkout".to_owned()),
        },
        attempts: 0,
        delivery_mode: DeliveryMode::Standard,
        consumed_count: 0,
        deliver_at: None,
        to_worker: None,
        version: 1,
        // The one field beside the ten (DESIGN §3: the ordering key and trace context).
        headers: MessageHeaders::default(),
    };
    // Each field has the documented type.
    let EMessage {
        id,
        topic,
        payload,
        metadata,
        attempts,
        delivery_mode,
        consumed_count,
        deliver_at,
        to_worker,
        version,
        headers,
    } = msg;
    let _: MessageHeaders = headers;
    let _: (String, MessageTopic, MessagePayload, MessageMetadata) = (id, topic, payload, metadata);
    let _: (u32, DeliveryMode, u32, u32) = (attempts, delivery_mode, consumed_count, version);
    let _: (Option<SystemTime>, Option<String>) = (deliver_at, to_worker);
}

#[test]
fn construction_as_documented_gives_a_uuid_v4_text_id() {
    let msg = EMessage::new(
        "order.created",             // topic
        b"serialized-data".to_vec(), // payload
        DeliveryMode::Standard,      // delivery mode
        None,                        // to_worker (None = any worker)
    );
    assert_eq!(msg.id.len(), 36);
    assert_eq!(msg.id.as_bytes()[14], b'4');
    assert_eq!(msg.topic, "order.created");
    assert_eq!(msg.attempts, 0);
    for mode in [
        DeliveryMode::Standard,
        DeliveryMode::Repeated(3),
        DeliveryMode::Broadcast,
    ] {
        let _ = EMessage::new("t", b"x".to_vec(), mode, Some("worker-0".to_owned()));
    }
}

#[test]
fn ack_and_dead_reason_have_the_documented_forms() {
    let answers = [
        Ack::Ack,
        Ack::NoAck {
            retry_after: Some(Duration::from_secs(1)),
            max_retries: 3u32,
        },
        Ack::Dead {
            dead_reason: DeadReason::Explicit,
        },
    ];
    assert_eq!(answers.len(), 3);
    for reason in [
        DeadReason::MaxRetriesExceeded,
        DeadReason::Explicit,
        DeadReason::Timeout,
        DeadReason::NoHandler,
        DeadReason::Other("arbitrary".to_owned()),
    ] {
        let _ = Ack::Dead {
            dead_reason: reason,
        };
    }
}

#[test]
fn node_types_are_host_and_worker() {
    let kinds = [NodeType::Host, NodeType::Worker];
    assert_eq!(kinds[0], NodeType::default());
}

/// The documents' hand-written handler.
struct CountOrders(Arc<AtomicUsize>);

#[async_trait]
impl EHandler for CountOrders {
    async fn handler(&self, _msg: &EMessage) -> Ack {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ack::Ack
    }
}

static ORDERS: AtomicUsize = AtomicUsize::new(0);

#[handler(topic = "order", workers = 4)]
async fn handle_order(msg: &EMessage) -> Ack {
    // ... business logic ...
    let _ = msg;
    ORDERS.fetch_add(1, Ordering::SeqCst);
    Ack::Ack
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_handlers_and_send_behave_as_described() -> Result<(), CoreError> {
    let counted = Arc::new(AtomicUsize::new(0));
    let bus = start_system!().await?;
    // `#[handler(topic = "order", workers = 4)]` runs four workers.
    assert_eq!(bus.workers("order").len(), 4);

    let msg = EMessage::new(
        "order",
        b"serialized-data".to_vec(),
        DeliveryMode::Standard,
        None,
    );
    // Send with optional try-send and timeout.
    TopicRouter::global()
        .send("order", msg, Some(true), None)
        .await?;
    send_msg!("order", b"hello".to_vec()).await?;
    bus.wait_idle(Duration::from_secs(5)).await?;
    assert_eq!(ORDERS.load(Ordering::SeqCst), 2);
    bus.shutdown(ShutdownStrategy::Force).await?;

    // The EHandler written by hand, in an isolated bus.
    let own = event_base::builder()
        .handler(HandlerSpec::new(
            "count",
            "orders",
            CountOrders(counted.clone()),
        ))
        .build()
        .await?;
    own.send("orders", b"x".to_vec()).await?;
    own.wait_idle(Duration::from_secs(5)).await?;
    assert_eq!(counted.load(Ordering::SeqCst), 1);
    Ok(())
}
