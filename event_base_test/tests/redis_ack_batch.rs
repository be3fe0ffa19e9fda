//! An ack batch is owner-checked with one `XPENDING` of the consumer's entries in the batch's
//! range: ids far apart in a long pending list are found (the range is paged), and entries
//! another consumer took over are fenced, in the same batch as ones still owned.

use std::sync::Arc;
use std::time::Duration;

use event_base::backend::{Claimed, QueueFactory, TopicQueue};
use event_base::{EMessage, MessageTopic, RedisQueueFactory};
use event_base_test::redis_server::RedisServer;

const STREAM: &str = "eb:{jobs}:s:work";

async fn subscription(factory: &RedisQueueFactory) -> TopicQueue {
    factory
        .create_subscription(&MessageTopic::from("jobs"), "work")
        .unwrap()
}

/// Claims `n` entries (sent first) with `q`.
async fn claim(q: &TopicQueue, n: usize) -> Vec<Claimed> {
    for i in 0..n {
        let m = Arc::new(EMessage::standard("jobs", format!("job {i}").into_bytes()));
        q.producer.send(m).await.unwrap();
    }
    let mut got = Vec::new();
    while got.len() < n {
        q.consumer.claim_batch(n, &mut got).await.unwrap();
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_and_last_of_a_long_pending_list_are_acked() {
    let server = RedisServer::start();
    let factory = RedisQueueFactory::connect(&server.url()).await.unwrap();
    let q = subscription(&factory).await;
    let got = claim(&q, 40).await;
    // Two ids with 38 of the same consumer's pending entries between them.
    q.consumer
        .ack(&[got[0].clone(), got[39].clone()])
        .await
        .unwrap();
    assert_eq!(server.command(&["XLEN", STREAM]), ":38");
    for c in [&got[0], &got[39]] {
        let id = format!("{}-{}", c.receipt.hi, c.receipt.lo);
        assert_eq!(
            server.command(&["XRANGE", STREAM, &id, &id]),
            "*0",
            "{id} acked"
        );
    }
    q.consumer.ack(&got[1..39]).await.unwrap();
    assert_eq!(server.command(&["XLEN", STREAM]), ":0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_acks_what_it_owns_and_fences_what_was_taken_over() {
    let server = RedisServer::start();
    let factory = RedisQueueFactory::connect(&server.url()).await.unwrap();
    let zombie = subscription(&factory).await;
    let got = claim(&zombie, 6).await;
    // Another consumer takes all six over, acks nothing yet.
    let other = subscription(&factory).await;
    let mut taken = Vec::new();
    let n = other
        .consumer
        .claim_stale(Duration::ZERO, 6, &mut taken)
        .await
        .unwrap();
    assert_eq!(n, 6);
    // The zombie's late ack of all six changes nothing.
    zombie.consumer.ack(&got).await.unwrap();
    assert_eq!(server.command(&["XLEN", STREAM]), ":6");
    // The new owner's ack of three settles those three only.
    other.consumer.ack(&taken[..3]).await.unwrap();
    assert_eq!(server.command(&["XLEN", STREAM]), ":3");
    other.consumer.ack(&taken[3..]).await.unwrap();
    assert_eq!(server.command(&["XLEN", STREAM]), ":0");
}
