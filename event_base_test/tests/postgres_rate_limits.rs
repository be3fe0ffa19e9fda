//! A handler's rate holds across processes on PostgreSQL (`HandlerSpec::rate`): two buses,
//! each with its own factory (its own connections, as two processes have), run the same
//! rated handler, and their starts together keep to the one rate (one row on the server's
//! clock paces both), where two local limiters would allow twice as many.

use std::sync::Arc;

use event_base::handler_fn;
use event_base::prelude::*;
use event_base::PostgresQueueFactory;
use event_base_test::postgres_server::PostgresServer;
use event_base_test::rate_pace::{assert_shared_50_per_second, Starts};

async fn rated_bus(server: &PostgresServer, starts: &Arc<Starts>, name: &'static str) -> EventBus {
    let starts = starts.clone();
    let handler = HandlerSpec::new(
        "mailer",
        "mail",
        handler_fn(move |_m: EMessage| {
            let starts = starts.clone();
            async move {
                starts.record(name);
                Ack::Ack
            }
        }),
    )
    .workers(2)
    .rate("50/s".parse().unwrap());
    let queue = PostgresQueueFactory::connect(&server.url()).await.unwrap();
    // One message a claim, so that a rated (slow) bus leaves the rest to the other.
    EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .batch_size(1)
        .handler(handler)
        .build()
        .await
        .unwrap()
}

/// 50/s across both buses (tolerance: `rate_pace::assert_shared_50_per_second`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_one_rate() {
    let server = PostgresServer::start();
    let starts = Arc::new(Starts::default());
    let a = rated_bus(&server, &starts, "a").await;
    let b = rated_bus(&server, &starts, "b").await;
    for i in 0..48u32 {
        a.send("mail", i.to_le_bytes().to_vec()).await.unwrap();
    }
    starts.reach(48).await;
    assert_shared_50_per_second(&starts.sorted());
    a.close().await.unwrap();
    b.close().await.unwrap();
}
