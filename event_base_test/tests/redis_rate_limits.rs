//! A handler's rate holds across nodes on Redis (`HandlerSpec::rate`): two nodes run the same
//! rated handler, and their starts together keep to the one rate (a script on the server's
//! clock paces every node), where two local limiters would allow twice as many.

use std::sync::Arc;
use std::time::Duration;

use event_base::handler_fn;
use event_base::prelude::*;
use event_base::RedisQueueFactory;
use event_base_test::rate_pace::{assert_shared_50_per_second, Starts};
use event_base_test::redis_cluster::{node, registered};
use event_base_test::redis_server::RedisServer;

const BEAT: Duration = Duration::from_millis(100);

fn mailer(starts: &Arc<Starts>, node: &'static str) -> HandlerSpec {
    let starts = starts.clone();
    HandlerSpec::new(
        "mailer",
        "mail",
        handler_fn(move |_m: EMessage| {
            let starts = starts.clone();
            async move {
                starts.record(node);
                Ack::Ack
            }
        }),
    )
    .workers(2)
    .rate("50/s".parse().unwrap())
}

/// A node claiming one message at a time, so that a rated (slow) handler leaves the rest of
/// the stream to the other node.
async fn rated_node(queue: RedisQueueFactory, handler: HandlerSpec) -> EventBus {
    EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .batch_size(1)
        .handler(handler)
        .build()
        .await
        .expect("build the bus")
}

/// 50/s across both nodes (tolerance: `rate_pace::assert_shared_50_per_second`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_one_rate() {
    let server = RedisServer::start();
    let starts = Arc::new(Starts::default());
    let a_queue = node(&server, BEAT).await;
    let a = rated_node(a_queue.clone(), mailer(&starts, "a")).await;
    let b_queue = node(&server, BEAT).await;
    let b = rated_node(b_queue.clone(), mailer(&starts, "b")).await;
    registered(&a_queue, "mail", "mailer").await;
    for i in 0..48u32 {
        a.send("mail", i.to_le_bytes().to_vec()).await.unwrap();
    }
    starts.reach(48).await;
    assert_shared_50_per_second(&starts.sorted());
    let waited: Duration = [&a, &b]
        .iter()
        .flat_map(|bus| bus.metrics().subscriptions)
        .filter(|s| s.handler == "mailer")
        .map(|s| s.rate_limited)
        .sum();
    assert!(waited > Duration::ZERO, "the waits are counted");
    a.close().await.unwrap();
    b.close().await.unwrap();
}
