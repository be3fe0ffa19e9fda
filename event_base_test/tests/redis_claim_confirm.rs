//! Confirming old claims (`EConsumer::claim_in_doubt`, `EConsumer::confirm_claim`) against
//! a real `redis-server`: a claim whose lease went unrenewed past half the visibility
//! timeout is in doubt; confirmed, it is renewed and fresh again. While Redis does not
//! answer, a failed confirmation is not tried again for every delivery: the next ones fail at
//! once (the bus then runs their handlers anyway), until a claim's block time has passed.

use std::time::{Duration, Instant};

use event_base::backend::{ClaimStatus, QueueFactory};
use event_base::{EMessage, MessageTopic, QueueError, RedisError, RedisQueueFactory};
use event_base_test::redis_server::RedisServer;

const VISIBILITY: Duration = Duration::from_millis(300);
const BLOCK: Duration = Duration::from_millis(500);

/// The Redis error under a queue error, if that is what it is.
fn redis_error(e: &QueueError) -> Option<&RedisError> {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<RedisError>() {
            return Some(r);
        }
        source = s.source();
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_claim_is_confirmed_and_redis_away_fails_confirmations_fast() {
    let server = RedisServer::start();
    let queue = RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .visibility_timeout(VISIBILITY)
        .block(BLOCK)
        // No beat falls due in the test: its leases depend on the visibility timeout alone
        // (a beat missed during the pause would put them in doubt too).
        .heartbeat(Duration::from_secs(60));
    let q = queue
        .create_subscription(&MessageTopic::from("jobs"), "work")
        .unwrap();
    q.producer
        .send(std::sync::Arc::new(EMessage::standard(
            "jobs",
            b"x".to_vec(),
        )))
        .await
        .unwrap();
    let mut claimed = Vec::new();
    assert_eq!(q.consumer.claim_batch(1, &mut claimed).await.unwrap(), 1);
    let c = &*q.consumer;
    assert!(!c.claim_in_doubt(&claimed[0]), "fresh");

    // Redis frozen: the lease is not renewed, and the property is about time passing.
    server.pause();
    tokio::time::sleep(VISIBILITY).await;
    assert!(
        c.claim_in_doubt(&claimed[0]),
        "unrenewed past half its lease"
    );
    let e = c
        .confirm_claim(&claimed[0])
        .await
        .expect_err("Redis does not answer");
    assert!(
        redis_error(&e).is_some_and(RedisError::is_transient),
        "a timeout, as for any command: {e}"
    );
    let at = Instant::now();
    let e = c
        .confirm_claim(&claimed[0])
        .await
        .expect_err("still failed");
    assert!(
        at.elapsed() < BLOCK / 2,
        "a second confirmation right after a failed one fails at once, took {:?}",
        at.elapsed()
    );
    assert!(
        matches!(redis_error(&e), Some(RedisError::LeaseUnconfirmed { .. })),
        "{e}"
    );

    // Back: once the block time has passed, a confirmation goes to Redis again. Nobody else
    // took the entry, so it is still held, and renewed.
    server.resume();
    tokio::time::sleep(BLOCK).await;
    assert_eq!(
        c.confirm_claim(&claimed[0]).await.unwrap(),
        ClaimStatus::Held
    );
    assert!(
        !c.claim_in_doubt(&claimed[0]),
        "renewed by the confirmation"
    );
    c.ack(&claimed).await.unwrap();
}
