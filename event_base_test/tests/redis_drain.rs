//! A draining consumer (its producer closed, as when its bus enters `Drain`) takes what the
//! stream held when the drain began, and leaves what other processes send after it to the
//! consumers still running.

use std::sync::Arc;

use event_base::backend::{QueueFactory, TopicQueue};
use event_base::{EMessage, MessageTopic, QueueError, RedisQueueFactory};
use event_base_test::redis_server::RedisServer;

/// A subscription `work` of topic `jobs` through a factory of its own (another process).
async fn process(server: &RedisServer) -> TopicQueue {
    RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .create_subscription(&MessageTopic::from("jobs"), "work")
        .unwrap()
}

fn message(i: usize) -> Arc<EMessage> {
    Arc::new(EMessage::standard("jobs", format!("job {i}").into_bytes()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_stops_at_what_the_stream_held_when_it_began() {
    let server = RedisServer::start();
    let draining = process(&server).await;
    let running = process(&server).await;
    let before: Vec<_> = (0..3).map(message).collect();
    for m in &before {
        running.producer.send(m.clone()).await.unwrap();
    }
    let TopicQueue { producer, consumer } = draining;
    drop(producer); // the drain begins

    // One at a time, so no read reaches past the cutoff by its batch.
    let mut got = Vec::new();
    let first = consumer.claim_batch(1, &mut got).await.unwrap();
    assert_eq!(first, 1);
    // Sent by the other process after the drain began.
    let after: Vec<_> = (3..8).map(message).collect();
    for m in &after {
        running.producer.send(m.clone()).await.unwrap();
    }
    loop {
        match consumer.claim_batch(1, &mut got).await {
            Ok(n) => assert!(n > 0, "a claim returns something or Closed"),
            Err(QueueError::Closed(_)) => break,
            Err(e) => panic!("claim failed: {e}"),
        }
    }
    let ids: Vec<_> = got.iter().map(|c| c.message.id.clone()).collect();
    let want: Vec<_> = before.iter().map(|m| m.id.clone()).collect();
    assert_eq!(
        ids, want,
        "the drain took what was there when it began, and no more"
    );
    consumer.ack(&got).await.unwrap();

    // What came after is left to the running process.
    let mut rest = Vec::new();
    while rest.len() < after.len() {
        running.consumer.claim_batch(10, &mut rest).await.unwrap();
    }
    let ids: Vec<_> = rest.iter().map(|c| c.message.id.clone()).collect();
    let want: Vec<_> = after.iter().map(|m| m.id.clone()).collect();
    assert_eq!(ids, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_of_an_empty_stream_is_closed_at_once() {
    let server = RedisServer::start();
    let TopicQueue { producer, consumer } = process(&server).await;
    drop(producer);
    let mut got = Vec::new();
    assert!(matches!(
        consumer.claim_batch(10, &mut got).await,
        Err(QueueError::Closed(_))
    ));
    assert!(got.is_empty());
}
