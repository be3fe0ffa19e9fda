//! On shared (Redis) queues with a WAL of the sender's own (`PersistentWal`), the sender
//! completes a message's record once Redis confirmed every copy (issue 16), whichever node
//! handles them: a message another node handled is not sent again at the sender's next
//! start, and a record does not wait for the sender's own handlers either. A copy that dies
//! afterwards is still a dead letter that survives a restart.

use std::collections::HashSet;
use std::time::Duration;

use event_base::backend::Wal;
use event_base::{Ack, EventBus, PersistentWal};
use event_base_test::redis_cluster::{bus_over, node as factory, registered, routes_to, until};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Gate, Probe, WAIT};

const BEAT: Duration = Duration::from_millis(100);
const N: usize = 20;

/// The distinct ids `probes` saw under `label`.
fn ids_of(probes: &[&Probe], label: &str) -> HashSet<String> {
    probes
        .iter()
        .flat_map(|p| p.seen())
        .filter(|s| s.label == label)
        .map(|s| s.id)
        .collect()
}

/// Sends `N` messages to `topic` from `a`; returns their ids.
async fn send_n(a: &EventBus, topic: &str) -> HashSet<String> {
    let mut ids = HashSet::new();
    for i in 0..N {
        let id = a.send(topic, format!("m{i}").into_bytes()).await.unwrap();
        ids.insert(id.to_string());
    }
    ids
}

/// How many records `wal` would replay.
async fn pending(wal: &dyn Wal) -> usize {
    wal.pending().await.unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_completes_on_the_sender_when_another_node_handles_its_copy() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // B runs `h1` of `t` (which A runs too) and `only_b` of `u` (which A does not).
    let there = Probe::new();
    let b_queue = factory(&server, BEAT).await;
    let b = bus_over(
        b_queue.clone(),
        vec![
            there.handler("h1", "t", |_| Ack::Ack),
            there.handler("only_b", "u", |_| Ack::Ack),
        ],
    )
    .await;
    registered(&b_queue, "t", "h1").await;
    registered(&b_queue, "u", "only_b").await;
    // A's `h1` is held, so B takes the copies A does not hold.
    let here = Probe::new();
    let gate = Gate::new();
    let a = EventBus::builder()
        .wal(PersistentWal::open(dir.path()).unwrap())
        .queue(factory(&server, BEAT).await)
        .batch_size(1)
        .handler(here.gated_handler("h1", "t", &gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    routes_to(&a, "u", &["only_b"]).await;
    let t_ids = send_n(&a, "t").await;
    let u_ids = send_n(&a, "u").await;
    // Redis has every copy: no record waits, neither for B nor for A's held handler.
    until(
        "A's records complete while its own handler is held",
        async || pending(a.wal()).await == 0,
    )
    .await;
    there
        .wait_until("B handles what A does not hold", WAIT, |s| {
            s.iter().filter(|s| s.label == "h1").count() >= 1
        })
        .await;
    gate.open();
    until("every copy handled", async || {
        ids_of(&[&here, &there], "h1") == t_ids && ids_of(&[&there], "only_b") == u_ids
    })
    .await;
    a.wait_idle(WAIT).await.unwrap();
    assert_eq!(pending(a.wal()).await, 0, "no record left on A");
    a.close().await.unwrap();
    let wal = PersistentWal::open(dir.path()).unwrap();
    assert_eq!(pending(&wal).await, 0, "a restart of A replays nothing");
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_several_handlers_completes_once_every_copy_is_confirmed() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let there = Probe::new();
    let b_queue = factory(&server, BEAT).await;
    let b = bus_over(
        b_queue.clone(),
        vec![there.handler("h1", "t", |_| Ack::Ack)],
    )
    .await;
    registered(&b_queue, "t", "h1").await;
    // A runs `h1` (shared with B) and `h2`, whose copies die; both held until the records
    // completed, so no copy ending on A can have completed them.
    let here = Probe::new();
    let gate = Gate::new();
    let a = EventBus::builder()
        .wal(PersistentWal::open(dir.path()).unwrap())
        .queue(factory(&server, BEAT).await)
        .batch_size(1)
        .handler(here.gated_handler("h1", "t", &gate, |_| Ack::Ack))
        .handler(here.gated_handler("h2", "t", &gate, |_| Ack::dead()))
        .build()
        .await
        .unwrap();
    let ids = send_n(&a, "t").await;
    until(
        "A's records complete before any copy ends on A",
        async || pending(a.wal()).await == 0,
    )
    .await;
    assert!(here.finished().is_empty(), "no copy ended on A yet");
    gate.open();
    until("every copy handled at least once", async || {
        ids_of(&[&here, &there], "h1") == ids && ids_of(&[&here], "h2") == ids
    })
    .await;
    // Each `h2` copy died after its record completed: its dead letter is recorded anyway.
    until("a dead letter for every h2 copy", async || {
        a.wal().dead_letters().await.unwrap().len() >= N
    })
    .await;
    a.wait_idle(WAIT).await.unwrap();
    assert_eq!(pending(a.wal()).await, 0, "no record left on A");
    a.close().await.unwrap();
    let wal = PersistentWal::open(dir.path()).unwrap();
    assert_eq!(pending(&wal).await, 0, "a restart of A replays nothing");
    let dead = wal.dead_letters().await.unwrap();
    let dead_ids: HashSet<String> = dead.iter().map(|d| d.message.id.clone()).collect();
    assert_eq!(dead_ids, ids, "the dead letters survive the restart");
    assert!(dead.iter().all(|d| d.handlers == vec!["h2".to_owned()]));
    drop(b);
}
