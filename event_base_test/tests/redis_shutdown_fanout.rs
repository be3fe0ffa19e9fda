//! A shutdown command on `_system.shutdown` reaches every node of a bus on Redis: each node
//! reads the topic's broadcast stream through a group of its own, so a command sent from any
//! node stops them all. A node that starts afterwards is not stopped by it (its group starts
//! at the stream's end).

use std::time::Duration;

use event_base::{Ack, EventBus, RedisQueueFactory, ShutdownStrategy};
use event_base_test::redis_server::RedisServer;
use event_base_test::shutdown_scenario::send_drain_command;
use event_base_test::{Probe, WAIT};

async fn node(server: &RedisServer, probe: &std::sync::Arc<Probe>) -> EventBus {
    let queue = RedisQueueFactory::connect(&server.url()).await.unwrap();
    EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(probe.handler("work", "jobs", |_| Ack::Ack))
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_command_sent_on_one_node_stops_every_node() {
    let server = RedisServer::start();
    let probe = Probe::new();
    let a = node(&server, &probe).await;
    let b = node(&server, &probe).await;
    // Both nodes read the broadcast stream (their groups exist) before the command is sent.
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.command(&[
        "XINFO",
        "GROUPS",
        "eb:{_system.shutdown}:bc:event_base.shutdown",
    ]) != "*2"
    {
        assert!(tokio::time::Instant::now() < deadline, "both nodes joined");
        // Redis offers nothing to wait on.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    send_drain_command(&a).await;
    tokio::time::timeout(WAIT, b.shutdown_started())
        .await
        .expect("the other node stopped too");
    tokio::time::timeout(WAIT, a.shutdown_started())
        .await
        .expect("the sending node stopped");
    assert!(!a.is_accepting() && !b.is_accepting());
    // Their shutdowns end (a second call waits for the running one), and they are gone.
    for bus in [a, b] {
        tokio::time::timeout(WAIT, bus.shutdown(ShutdownStrategy::Force))
            .await
            .expect("the shutdown ended")
            .unwrap();
    }

    // A node started afterwards runs: the command was before its time.
    let c = node(&server, &probe).await;
    let id = c.send("jobs", b"after".to_vec()).await.unwrap();
    probe.wait_for(1, WAIT).await;
    assert_eq!(probe.count_of(&id), 1);
    assert!(c.is_accepting());
}
