//! Dead letters of a cluster through the gRPC API of a node that runs none of the handlers:
//! node `b` runs `fix` on `bad`, which dead-letters until it is fixed; node `a` runs no handler,
//! sends, and serves gRPC. With `RedisWal` the dead letters live in Redis, so `a`'s
//! ListDeadLetters sees what `b` dead-lettered, its ReplayDeadLetter sends one again to `b`'s
//! handler (the one whose copy died), and its PurgeDeadLetters removes the rest for the whole
//! cluster.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use event_base::grpc::client::{connect, ClientOptions};
use event_base::grpc::{pb, GrpcServer, Tokens};
use event_base::{Ack, EMessage, EventBus, RedisQueueFactory, ShutdownStrategy};
use event_base_test::redis_cluster::{routes_to, until};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Probe, WAIT};

const ADMIN: &str = "admin-token";

async fn node(server: &RedisServer, probe: Option<(&Arc<Probe>, Arc<AtomicBool>)>) -> EventBus {
    let queue = RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .heartbeat(Duration::from_millis(100));
    let mut builder = EventBus::builder().wal(queue.wal()).queue(queue);
    if let Some((probe, fixed)) = probe {
        let spec = probe
            .handler("fix", "bad", move |_| {
                if fixed.load(Ordering::SeqCst) {
                    Ack::Ack
                } else {
                    Ack::dead()
                }
            })
            .retries(0);
        builder = builder.handler(spec);
    }
    builder.build().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_the_handler_lists_replays_and_purges_the_clusters_dead_letters() {
    let server = RedisServer::start();
    let probe = Probe::new();
    let fixed = Arc::new(AtomicBool::new(false));
    let b = node(&server, Some((&probe, fixed.clone()))).await;
    let a = node(&server, None).await;
    routes_to(&a, "bad", &["fix"]).await;

    let mut ids = Vec::new();
    for i in 0..3 {
        let msg = EMessage::standard("bad", format!("letter-{i}").into_bytes());
        ids.push(a.send("bad", msg).await.unwrap().to_string());
    }
    probe.wait_for(3, WAIT).await;
    until("b's three dead letters, seen from a", async || {
        a.dead_letters().await.unwrap().len() == 3
    })
    .await;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let served = GrpcServer::builder(a.clone())
        .tokens(Tokens::new().admin(ADMIN))
        .serve_with_incoming(listener)
        .unwrap();
    let mut options = ClientOptions::new(format!("http://{}", served.local_addr()));
    options.token = Some(ADMIN.to_owned());
    let mut client = connect(&options).await.unwrap();

    let listed = client
        .list_dead_letters(pb::ListDeadLettersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.total_size, 3);
    let mut seen: Vec<String> = listed
        .dead_letters
        .iter()
        .map(|d| d.message.as_ref().unwrap().id.clone())
        .collect();
    seen.sort();
    let mut sent = ids.clone();
    sent.sort();
    assert_eq!(seen, sent, "every letter b made, listed by a");
    assert!(listed.dead_letters.iter().all(|d| d.handlers == ["fix"]));

    // Fixed, one letter replayed from `a`, which runs no handler of `bad`: `b`'s handler gets
    // it again, and handles it.
    fixed.store(true, Ordering::SeqCst);
    let replayed = client
        .replay_dead_letter(pb::ReplayDeadLetterRequest {
            id: ids[0].clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(replayed.message_id, ids[0]);
    probe.wait_for(4, WAIT).await;
    assert_eq!(probe.count_of(&ids[0]), 2, "dead once, then handled once");
    b.wait_idle(WAIT).await.unwrap();
    let left: Vec<String> = b
        .dead_letters()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.message.id)
        .collect();
    assert_eq!(
        left.len(),
        2,
        "the replayed letter is gone for b too: {left:?}"
    );
    assert!(!left.contains(&ids[0]));

    // Purged through `a`, for the whole cluster.
    let purged = client
        .purge_dead_letters(pb::PurgeDeadLettersRequest {
            filter: Some(pb::DeadLetterFilter {
                topics: vec!["bad".into()],
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(purged.purged, 2);
    assert!(b.dead_letters().await.unwrap().is_empty());
    assert_eq!(probe.count(), 4, "nothing else delivered");

    drop(client);
    for bus in [a, b] {
        tokio::time::timeout(WAIT, bus.shutdown(ShutdownStrategy::Force))
            .await
            .expect("shutdown ended")
            .unwrap();
    }
}
