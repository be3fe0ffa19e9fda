//! Nodes on Redis: a node beats once it consumes (a hash that expires, a score in the set of
//! nodes), and the janitor (a `Host` node holding the lease) cleans up after a node that fell
//! silent: its pending entries are released for takeover at once, without counting a
//! delivery, and its consumer is deleted only once it holds nothing.

use std::sync::Arc;
use std::time::Duration;

use event_base::backend::{QueueFactory, TopicQueue, Wal};
use event_base::{Ack, EMessage, EventBus, MessageTopic, RedisQueueFactory};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Probe, WAIT};

const BEAT: Duration = Duration::from_millis(100);

async fn factory(server: &RedisServer) -> RedisQueueFactory {
    RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .heartbeat(BEAT)
}

fn jobs(factory: &RedisQueueFactory) -> TopicQueue {
    factory
        .create_subscription(&MessageTopic::from("jobs"), "work")
        .unwrap()
}

/// Polls `done` until it holds (Redis offers nothing to wait on), failing with `what`.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consuming_node_beats_with_a_hash_that_expires() {
    let server = RedisServer::start();
    let queue = factory(&server).await;
    let id = queue.node_id().to_owned();
    let hash = format!("eb:{{nodes}}:n:{id}");
    let probe = Probe::new();
    let bus = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(probe.handler("work", "jobs", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    until("the node beat", || {
        server.command(&["HGET", &hash, "type"]) == "host"
    })
    .await;
    assert!(server
        .command(&["ZSCORE", "eb:{nodes}:z", &id])
        .parse::<u64>()
        .is_ok());
    let ttl: i64 = server.command(&["PTTL", &hash])[1..].parse().unwrap();
    assert!(ttl > 0 && ttl <= 300, "expires after three beats: {ttl} ms");
    // Its consumers: of `jobs` (its stream, its keyed stream, and its broadcast stream
    // through the node's group), of the shutdown commands and of topic discovery requests.
    let subs = format!("eb:{{nodes}}:subs:{id}");
    until("the five consumers listed", || {
        server.command(&["SCARD", &subs]) == ":5"
    })
    .await;
    assert_eq!(
        server.command(&["GET", "eb:{nodes}:janitor"]),
        id,
        "the only Host"
    );
    drop(bus);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_janitor_releases_a_silent_nodes_entries_and_deletes_its_consumer_once_empty() {
    let server = RedisServer::start();
    // The janitor's node: a bus on another topic (so it beats), and, later, a consumer of
    // `jobs` that takes over. Its visibility timeout is long: only the release lets it take
    // the entry now. max_deliveries 2: had the release counted deliveries, the takeover
    // would dead-letter the entry instead.
    let janitor = factory(&server).await.max_deliveries(2);
    let probe = Probe::new();
    let bus = EventBus::builder()
        .wal(janitor.wal())
        .queue(janitor.clone())
        .handler(probe.handler("other", "other", |_| Ack::Ack))
        .build()
        .await
        .unwrap();

    // A node claims an entry, and falls silent (everything of it dropped: no beats, no
    // lease renewals), holding it.
    let silent = factory(&server).await;
    let silent_id = silent.node_id().to_owned();
    let a = jobs(&silent);
    let message = Arc::new(EMessage::standard("jobs", b"held".to_vec()));
    a.producer.send(message.clone()).await.unwrap();
    let mut held = Vec::new();
    a.consumer.claim_batch(10, &mut held).await.unwrap();
    assert_eq!(held.len(), 1);
    until("the node beat", || {
        server.command(&["ZSCORE", "eb:{nodes}:z", &silent_id]) != "$-1"
    })
    .await;
    drop((a, held, silent));

    // Released by the janitor: idle "for long", so a takeover with an hour's min idle time
    // gets it. Its consumer was kept (deleting it would have dropped the entry).
    let c = jobs(&janitor);
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        c.consumer
            .claim_stale(Duration::from_secs(3600), 10, &mut out)
            .await
            .unwrap();
        if !out.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the silent node's entry was not released"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].message.id, message.id);
    assert!(
        janitor.wal().dead_letters().await.unwrap().is_empty(),
        "the release counted no delivery"
    );
    c.consumer.ack(&out).await.unwrap();

    // Holding nothing now: its consumer is deleted and the node forgotten.
    until("the silent node was forgotten", || {
        server.command(&["ZSCORE", "eb:{nodes}:z", &silent_id]) == "$-1"
    })
    .await;
    assert_eq!(
        server.command(&["EXISTS", &format!("eb:{{nodes}}:subs:{silent_id}")]),
        ":0"
    );
    assert_eq!(server.command(&["XLEN", "eb:{jobs}:s:work"]), ":0");
    drop(bus);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_lists_every_nodes_handlers_until_one_is_forgotten() {
    let server = RedisServer::start();
    let start = |handler: &'static str| {
        let server = &server;
        async move {
            let queue = factory(server).await;
            let id = queue.node_id().to_owned();
            let probe = Probe::new();
            let bus = EventBus::builder()
                .wal(queue.wal())
                .queue(queue)
                .handler(probe.handler(handler, "orders", |_| Ack::Ack))
                .build()
                .await
                .unwrap();
            (bus, id)
        }
    };
    let (ship, ship_id) = start("ship").await;
    let (bill, _) = start("bill").await;
    // A node with no handler of its own sees both.
    let sender = factory(&server).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut seen = loop {
        let seen = sender
            .handlers_of("orders", Duration::from_secs(60))
            .await
            .unwrap();
        if seen.len() == 2 {
            break seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "registered: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    seen.sort();
    assert_eq!(seen, vec!["bill".to_owned(), "ship".to_owned()]);
    assert_eq!(sender.registered_topics().await.unwrap(), vec!["orders"]);
    assert!(sender
        .handlers_of("payments", Duration::from_secs(60))
        .await
        .unwrap()
        .is_empty());

    // `ship` is taken out of the code: its node stops, and it is forgotten.
    ship.shutdown(event_base::ShutdownStrategy::Force)
        .await
        .unwrap();
    drop(ship);
    // Its hash expired: it has stopped beating (and registering) for three beats.
    let hash = format!("eb:{{nodes}}:n:{ship_id}");
    until("the stopped node fell silent", || {
        server.command(&["EXISTS", &hash]) == ":0"
    })
    .await;
    sender.forget_handler("orders", "ship").await.unwrap();
    assert_eq!(
        sender
            .handlers_of("orders", Duration::from_secs(60))
            .await
            .unwrap(),
        vec!["bill".to_owned()]
    );
    drop(bill);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_janitor_deletes_dead_letters_past_their_retention_age() {
    let server = RedisServer::start();
    // Two dead letters of topic `t`: one from 1970 (its id is its time), one from now.
    server.command(&["SADD", "eb:topics", "t"]);
    server.command(&["XADD", "eb:{t}:dlq", "1-1", "d", "old"]);
    server.command(&["XADD", "eb:{t}:dlq", "*", "d", "new"]);
    assert_eq!(server.command(&["XLEN", "eb:{t}:dlq"]), ":2");

    let queue = factory(&server)
        .await
        .dead_letter_max_age(Duration::from_secs(3600));
    let probe = Probe::new();
    let bus = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(probe.handler("other", "other", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    until("the old dead letter was trimmed", || {
        server.command(&["XLEN", "eb:{t}:dlq"]) == ":1"
    })
    .await;
    assert_eq!(
        server.command(&["XRANGE", "eb:{t}:dlq", "1-1", "1-1"]),
        "*0"
    );
    drop(bus);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_nodes_shutdown_group_is_destroyed() {
    let server = RedisServer::start();
    let start = || async {
        let queue = factory(&server).await;
        let probe = Probe::new();
        EventBus::builder()
            .wal(queue.wal())
            .queue(queue)
            .handler(probe.handler("work", "jobs", |_| Ack::Ack))
            .build()
            .await
            .unwrap()
    };
    let janitor = start().await;
    let gone = start().await;
    until("both nodes joined the shutdown stream", || {
        server.command(&[
            "XINFO",
            "GROUPS",
            "eb:{_system.shutdown}:bc:event_base.shutdown",
        ]) == "*2"
    })
    .await;
    gone.shutdown(event_base::ShutdownStrategy::Force)
        .await
        .unwrap();
    drop(gone);
    until("the stopped node's group was destroyed", || {
        server.command(&[
            "XINFO",
            "GROUPS",
            "eb:{_system.shutdown}:bc:event_base.shutdown",
        ]) == "*1"
    })
    .await;
    until("the stopped node was forgotten", || {
        server.command(&["ZCARD", "eb:{nodes}:z"]) == ":1"
    })
    .await;
    drop(janitor);
}
