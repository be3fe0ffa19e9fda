//! `EventBus::cancel` on Redis, where a delayed message waits in the backend (each
//! subscription's delayed set), not in a process: node A sends to a topic only node B handles
//! (two handlers: a copy in each subscription's delayed set), and takes the message back
//! before its time; neither handler ever gets it. Node B may take back what A sent.

use std::time::Duration;

use event_base::prelude::*;
use event_base_test::redis_cluster::{bus_over, node, registered};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Probe, WAIT};

const BEAT: Duration = Duration::from_millis(100);

fn later(text: &str, ms: u64) -> EMessage {
    EMessage::standard("remind", text.as_bytes().to_vec()).with_delay(Duration::from_millis(ms))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_message_kept_by_redis_is_taken_back_from_every_subscription() {
    let server = RedisServer::start();
    let probe = Probe::new();
    let b_queue = node(&server, BEAT).await;
    let b = bus_over(
        b_queue.clone(),
        vec![
            probe.handler("call", "remind", |_| Ack::Ack),
            probe.handler("log", "remind", |_| Ack::Ack),
        ],
    )
    .await;
    registered(&b_queue, "remind", "call").await;
    registered(&b_queue, "remind", "log").await;
    let a = bus_over(node(&server, BEAT).await, vec![]).await;

    let by_a = a.send("remind", later("a", 400)).await.unwrap();
    let by_b_later = a.send("remind", later("b", 400)).await.unwrap();
    assert!(a.cancel(&by_a).await.unwrap(), "the sender takes it back");
    assert!(!a.cancel(&by_a).await.unwrap(), "nothing left to take back");
    assert!(
        b.cancel(&by_b_later).await.unwrap(),
        "a node handling the topic takes back what another sent"
    );
    // A marker due after both: once both handlers have it, the cancelled ones' time passed.
    let marker = a.send("remind", later("marker", 600)).await.unwrap();
    probe.wait_for(2, WAIT).await;
    b.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&marker), 2, "each handler gets the marker");
    assert_eq!(
        probe.count_of(&by_a),
        0,
        "a cancelled message was delivered"
    );
    assert_eq!(
        probe.count_of(&by_b_later),
        0,
        "a cancelled message was delivered"
    );
    assert!(
        !a.cancel(&marker).await.unwrap(),
        "a delivered message is not taken back"
    );
    a.close().await.unwrap();
    b.close().await.unwrap();
}
