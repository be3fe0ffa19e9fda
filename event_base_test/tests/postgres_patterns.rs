//! The patterns on the PostgreSQL queues: a delayed message cancelled before its time is
//! never delivered (its row is deleted), and a schedule's slot is claimed by one process of
//! those sharing the database.

use std::time::Duration;

use event_base::backend::Wal;
use event_base::{EMessage, EventBus, HandlerSpec, PostgresQueueFactory};
use event_base_test::forward::Forward;
use event_base_test::postgres_server::PostgresServer;
use event_base_test::until;
use tokio::sync::mpsc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_delayed_message_is_never_delivered() {
    let server = PostgresServer::start();
    let queue = PostgresQueueFactory::connect(&server.url()).await.unwrap();
    let (tx, mut handled) = mpsc::unbounded_channel();
    let bus = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(HandlerSpec::new("work", "jobs", Forward(tx)))
        .build()
        .await
        .unwrap();
    let early = EMessage::standard("jobs", "cancelled").with_delay(Duration::from_millis(300));
    let id = bus.send("jobs", early).await.unwrap();
    bus.send(
        "jobs",
        EMessage::standard("jobs", "later").with_delay(Duration::from_millis(600)),
    )
    .await
    .unwrap();
    assert!(
        bus.cancel(&id).await.unwrap(),
        "a delayed message not yet due is cancelled"
    );
    assert!(!bus.cancel(&id).await.unwrap(), "cancelled once only");
    // The later message comes first: the cancelled one, due before it, never will.
    let first = tokio::time::timeout(Duration::from_secs(10), handled.recv())
        .await
        .expect("the later message in time")
        .unwrap();
    assert_eq!(first, "later");
    assert!(handled.try_recv().is_err());
    drop(bus);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_of_several_claims_a_schedules_slot() {
    let server = PostgresServer::start();
    let a = PostgresQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .wal();
    let b = PostgresQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .wal();
    a.put_schedule("tick", b"every 200ms").await.unwrap();
    b.put_schedule("tick", b"every 200ms").await.unwrap();
    for slot in [1_000, 1_200, 1_400] {
        let (x, y) = tokio::join!(a.claim_slot("tick", slot), b.claim_slot("tick", slot));
        assert!(
            x.unwrap() ^ y.unwrap(),
            "slot {slot}: claimed by exactly one"
        );
    }
    assert!(
        !a.claim_slot("tick", 1_200).await.unwrap(),
        "an earlier slot stays taken"
    );
    let stored = b.stored_schedules().await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].last_slot, Some(1_400));
    assert!(a.remove_schedule("tick").await.unwrap());
    assert!(
        !b.claim_slot("tick", 1_600).await.unwrap(),
        "a removed schedule fires no more"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_handler_leaves_its_rows_waiting_and_a_sibling_goes_on() {
    let server = PostgresServer::start();
    let queue = PostgresQueueFactory::connect(&server.url()).await.unwrap();
    let (tx, mut paused) = mpsc::unbounded_channel();
    let (sibling_tx, mut sibling) = mpsc::unbounded_channel();
    let bus = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(HandlerSpec::new("slow", "jobs", Forward(tx)))
        .handler(HandlerSpec::new("audit", "jobs", Forward(sibling_tx)))
        .build()
        .await
        .unwrap();
    bus.pause("jobs", "slow").unwrap();
    for i in 0..3 {
        bus.send("jobs", EMessage::standard("jobs", i.to_string()))
            .await
            .unwrap();
    }
    for _ in 0..3 {
        tokio::time::timeout(Duration::from_secs(10), sibling.recv())
            .await
            .expect("the sibling handles every message while the other is paused")
            .unwrap();
    }
    // The paused handler's copies wait as rows (a claim in flight when the pause came may
    // hold some, unstarted).
    let client = server.client().await;
    let waiting: i64 = client
        .query_one(
            "SELECT count(*) FROM event_base_queue
             WHERE subscription = 'jobs' || chr(31) || 'slow'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(waiting, 3);
    assert!(
        paused.try_recv().is_err(),
        "a paused handler started nothing"
    );
    bus.resume("jobs", "slow").unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(
            tokio::time::timeout(Duration::from_secs(10), paused.recv())
                .await
                .expect("resumed, it handles what waited")
                .unwrap(),
        );
    }
    assert_eq!(got, ["0", "1", "2"]);
    drop(bus);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_routes_flush_waits_until_every_copy_for_elsewhere_is_committed() {
    use event_base::backend::QueueFactory;
    let server = PostgresServer::start();
    // A handler recorded on the database, then gone: its topic is handled "elsewhere".
    {
        let queue = PostgresQueueFactory::connect(&server.url()).await.unwrap();
        let wal = queue.wal();
        let (tx, _rx) = mpsc::unbounded_channel();
        let bus = EventBus::builder()
            .wal(wal.clone())
            .queue(queue)
            .handler(HandlerSpec::new("work", "jobs", Forward(tx)))
            .build()
            .await
            .unwrap();
        wal.flush().await.unwrap();
        bus.pause("jobs", "work").unwrap();
        bus.close().await.unwrap();
    }
    let queue = PostgresQueueFactory::connect(&server.url()).await.unwrap();
    let routes = queue.routes().expect("a shared backend has routes");
    let bus = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .build()
        .await
        .unwrap();
    for i in 0..200 {
        bus.send("jobs", EMessage::standard("jobs", i.to_string()))
            .await
            .unwrap();
    }
    routes.flush().await.unwrap();
    let rows: i64 = server
        .client()
        .await
        .query_one("SELECT count(*) FROM event_base_queue", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        rows, 200,
        "every accepted copy committed once flush answered"
    );
    drop(bus);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_process_on_the_database_is_listed_with_its_workers() {
    let server = PostgresServer::start();
    let mut buses = Vec::new();
    for name in ["alpha", "beta"] {
        let queue = PostgresQueueFactory::connect(&server.url()).await.unwrap();
        let (tx, _rx) = mpsc::unbounded_channel();
        buses.push(
            EventBus::builder()
                .node_name(name)
                .wal(queue.wal())
                .queue(queue)
                .handler(HandlerSpec::new("work", "jobs", Forward(tx)).workers(2))
                .build()
                .await
                .unwrap(),
        );
    }
    // Each bus lists its workers as it starts them; the listing is committed, not beaten.
    let mut nodes = Vec::new();
    until("both processes and their workers listed", async || {
        nodes = buses[0]
            .nodes()
            .await
            .unwrap()
            .expect("a registry of nodes");
        let listed = nodes
            .iter()
            .filter(|n| n.workers.iter().filter(|w| w.topic == "jobs").count() == 2)
            .count();
        listed == 2
    })
    .await;
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["alpha", "beta"]);
    assert!(nodes.iter().all(|n| n.pid == Some(std::process::id())));
    assert_ne!(nodes[0].id, nodes[1].id, "one record a process (a factory)");
    for bus in buses {
        bus.close().await.unwrap();
    }
}

/// `wait_idle` on PostgreSQL counts what every process holds: a bus that sent to a handler
/// only another process runs waits until that process has handled it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_idle_waits_for_the_handlers_of_other_processes() {
    use event_base::Ack;
    use event_base_test::{Gate, Probe, WAIT};

    let server = PostgresServer::start();
    let probe = Probe::new();
    let gate = Gate::new();
    let qb = PostgresQueueFactory::connect(&server.url()).await.unwrap();
    let b = EventBus::builder()
        .wal(qb.wal())
        .queue(qb)
        .handler(probe.gated_handler("work", "jobs", &gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    b.wal().flush().await.unwrap();
    let qa = PostgresQueueFactory::connect(&server.url()).await.unwrap();
    let a = EventBus::builder()
        .wal(qa.wal())
        .queue(qa)
        .build()
        .await
        .unwrap();
    let id = a
        .send("jobs", EMessage::standard("jobs", "held"))
        .await
        .unwrap();
    probe
        .wait_until("b holds it", WAIT, |s| s.iter().any(|s| s.id == id))
        .await;
    assert!(
        a.wait_idle(Duration::from_millis(300)).await.is_err(),
        "not idle while b handles what a sent"
    );
    gate.open();
    a.wait_idle(WAIT).await.expect("idle once b acked");
    b.shutdown(event_base::ShutdownStrategy::Force)
        .await
        .unwrap();
    a.shutdown(event_base::ShutdownStrategy::Force)
        .await
        .unwrap();
}
