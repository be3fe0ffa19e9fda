//! Request/reply across nodes on Redis: a requester built with `replies(true)` asks a topic
//! only another node handles; that node's handler replies, and the reply travels back
//! through Redis to the requester's reply subscription (`event_base.reply`, addressed to its
//! worker by node name), and to that requester only: two requesters asking at once each get
//! their own answers. A requester that does not wait any more is no error to the responder.
//!
//! Buses in one process with factories of their own stand for nodes; the waiters' table is
//! per process, but a reply given on another bus than the requester's always goes through
//! the backend when the request names a reply subscription.

use std::time::Duration;

use event_base::prelude::*;
use event_base::{handler_fn, RedisQueueFactory, REPLY_TO};
use event_base_test::redis_cluster::{registered, until};
use event_base_test::redis_server::RedisServer;
use event_base_test::WAIT;

/// The broadcast stream of the reply subscription, where addressed replies go.
const REPLIES: &str = "eb:{event_base.reply}:b:event_base.replies";

/// A node named `name` on `server`, with `handlers`, reading replies if `replies`.
async fn node(
    server: &RedisServer,
    name: &str,
    replies: bool,
    handlers: Vec<HandlerSpec>,
) -> (EventBus, RedisQueueFactory) {
    let queue = RedisQueueFactory::connect(&server.url()).await.unwrap();
    let mut builder = EventBus::builder()
        .wal(queue.wal())
        .queue(queue.clone())
        .node_name(name)
        .replies(replies);
    for h in handlers {
        builder = builder.handler(h);
    }
    (builder.build().await.unwrap(), queue)
}

/// Waits until the requester `id`'s group on the reply stream exists (its first claim
/// makes it): from then on it can be addressed.
async fn reads_replies(server: &RedisServer, id: &str) {
    let group = format!("n:{id}");
    until("the requester's reply group made", async || {
        server
            .query(&["XINFO", "GROUPS", REPLIES])
            .items()
            .iter()
            .any(|g| g.items().get(1).and_then(|n| n.as_str()) == Some(group.as_str()))
    })
    .await;
}

fn pricing() -> HandlerSpec {
    HandlerSpec::new(
        "pricing",
        "price",
        handler_fn(|msg: EMessage| async move {
            let mut answer = b"price of ".to_vec();
            answer.extend_from_slice(msg.payload.as_bytes());
            match reply(&msg, answer).await {
                Ok(()) => Ack::Ack,
                Err(_) => Ack::retry(),
            }
        }),
    )
    .workers(2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_from_another_node_reaches_only_its_requester() {
    let server = RedisServer::start();
    let (responder, responder_queue) = node(&server, "responder", false, vec![pricing()]).await;
    let (a, a_queue) = node(&server, "asker-a", true, Vec::new()).await;
    let (b, b_queue) = node(&server, "asker-b", true, Vec::new()).await;
    registered(&a_queue, "price", "pricing").await;
    registered(&b_queue, "price", "pricing").await;
    reads_replies(&server, a_queue.node_id()).await;
    reads_replies(&server, b_queue.node_id()).await;
    let _ = &responder_queue;

    let mut asks = tokio::task::JoinSet::new();
    for (label, bus) in [("a", &a), ("b", &b)] {
        for i in 0..10 {
            let bus = bus.clone();
            asks.spawn(async move {
                let item = format!("{label}-{i}");
                let answer = bus.request("price", item.clone(), WAIT).await.unwrap();
                (item, answer)
            });
        }
    }
    let mut answered = 0;
    while let Some(done) = asks.join_next().await {
        let (item, answer) = done.unwrap();
        assert_eq!(
            answer.payload.as_bytes(),
            format!("price of {item}").as_bytes(),
            "a reply reached another requester"
        );
        assert_eq!(answer.topic.as_str(), event_base::constant::REPLY_TOPIC);
        answered += 1;
    }
    assert_eq!(answered, 20);
    // Each requester's reply subscription handled its own ten: the replies came through
    // Redis, addressed to it.
    for bus in [&a, &b] {
        bus.wait_idle(WAIT).await.unwrap();
        let replies = bus
            .metrics()
            .topic(event_base::constant::REPLY_TOPIC)
            .unwrap();
        assert_eq!(replies.acked, 10, "{replies:?}");
    }
    assert_eq!(
        responder.metrics().topic("price").unwrap().acked,
        20,
        "the other node handled every request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_after_the_requester_gave_up_is_no_error() {
    let server = RedisServer::start();
    let (gate_tx, gate_rx) = flume::unbounded::<()>();
    let (result_tx, result_rx) = flume::unbounded::<Result<(), CoreError>>();
    let (header_tx, header_rx) = flume::unbounded::<String>();
    let slow = HandlerSpec::new(
        "slow",
        "slow",
        handler_fn(move |msg: EMessage| {
            let gate = gate_rx.clone();
            let result = result_tx.clone();
            let header = header_tx.clone();
            async move {
                let _ = header.send(msg.headers.get(REPLY_TO).unwrap_or_default().to_owned());
                let _ = gate.recv_async().await;
                let _ = result.send(reply(&msg, b"late".to_vec()).await);
                Ack::Ack
            }
        }),
    );
    let (_responder, _rq) = node(&server, "responder", false, vec![slow]).await;
    let (asker, asker_queue) = node(&server, "asker", true, Vec::new()).await;
    registered(&asker_queue, "slow", "slow").await;
    reads_replies(&server, asker_queue.node_id()).await;

    let err = asker
        .request("slow", b"?".to_vec(), Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, CoreError::Timeout { .. }), "{err:?}");
    let reply_to = header_rx.recv_async().await.unwrap();
    assert!(
        reply_to.starts_with("asker/event_base.replies-"),
        "{reply_to}"
    );
    gate_tx.send(()).unwrap();
    let late = result_rx.recv_async().await.unwrap();
    assert!(late.is_ok(), "{late:?}");
    // The late reply reaches the requester's subscription, which drops and acks it.
    asker.wait_idle(WAIT).await.unwrap();
    assert!(asker.dead_letters().await.unwrap().is_empty());
}
