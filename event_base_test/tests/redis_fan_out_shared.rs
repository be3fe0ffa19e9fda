//! Fan-out over shared queues (issue 16): node A runs handlers `h1` and `h2` of topic `t`,
//! node B runs `h1` too, so `h1`'s subscription is shared and B's worker settles some of the
//! `h1` copies A sent. A copy on a shared queue is the backend's once queued: A's bookkeeping
//! of the message must not wait for the copies another node settles. Observed from outside:
//! every dead letter of A's own copies is recorded, and, on a file WAL, A's records complete
//! (a restart replays nothing).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use event_base::backend::Wal;
use event_base::{Ack, EventBus, PersistentWal};
use event_base_test::redis_cluster::{bus_over, node as factory, registered, until};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Gate, Probe, WAIT};

const BEAT: Duration = Duration::from_millis(100);
const N: usize = 20;

/// Ids seen by `probes` under `label`, and how many deliveries in all.
fn handled(probes: &[&Probe], label: &str) -> (HashSet<String>, usize) {
    let seen: Vec<String> = probes
        .iter()
        .flat_map(|p| p.seen())
        .filter(|s| s.label == label)
        .map(|s| s.id)
        .collect();
    let n = seen.len();
    (seen.into_iter().collect(), n)
}

/// Sends `N` messages to `t` from `a` once B (`there`) takes a share of the `h1` copies:
/// A's `h1` is held by `gate` until B handled one. Returns the ids.
async fn send_shared(a: &EventBus, gate: &Gate, there: &Probe) -> HashSet<String> {
    let mut ids = HashSet::new();
    for i in 0..N {
        ids.insert(
            a.send("t", format!("m{i}").into_bytes())
                .await
                .unwrap()
                .to_string(),
        );
    }
    there.wait_for(1, WAIT).await;
    gate.open();
    ids
}

/// Node B: handler `h1` of `t` only, recorded by `there`; returns once `h1` is in the
/// registry.
async fn node_b(server: &RedisServer, there: &Arc<Probe>) -> EventBus {
    let b_queue = factory(server, BEAT).await;
    let b = bus_over(
        b_queue.clone(),
        vec![there.handler("h1", "t", |_| Ack::Ack)],
    )
    .await;
    registered(&b_queue, "t", "h1").await;
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_copy_is_recorded_when_another_node_settles_a_sibling_copy() {
    let server = RedisServer::start();
    let there = Probe::new();
    let b = node_b(&server, &there).await;
    let here = Probe::new();
    let gate = Gate::new();
    let a_queue = factory(&server, BEAT).await;
    let a = EventBus::builder()
        .wal(a_queue.wal())
        .queue(a_queue)
        .batch_size(1)
        .handler(here.gated_handler("h1", "t", &gate, |_| Ack::Ack))
        .handler(here.handler("h2", "t", |_| Ack::dead()))
        .build()
        .await
        .unwrap();
    let ids = send_shared(&a, &gate, &there).await;
    here.wait_until("every h2 copy", WAIT, |s| {
        s.iter().filter(|s| s.label == "h2").count() >= N
    })
    .await;
    until("every h1 copy handled on A or B", async || {
        handled(&[&here, &there], "h1").1 >= N
    })
    .await;
    assert_eq!(handled(&[&here, &there], "h1"), (ids.clone(), N));
    assert!(
        !handled(&[&there], "h1").0.is_empty(),
        "B settled some of A's h1 copies"
    );
    // Every h2 copy died on A: each is a dead letter, also when B had the h1 copy.
    until("a dead letter for every h2 copy", async || {
        a.wal().dead_letters().await.unwrap().len() >= N
    })
    .await;
    let dead = a.wal().dead_letters().await.unwrap();
    let dead_ids: HashSet<String> = dead.iter().map(|d| d.message.id.clone()).collect();
    assert_eq!(dead_ids, ids);
    assert_eq!(dead.len(), N, "one dead letter per message: {dead:?}");
    assert!(dead.iter().all(|d| d.handlers == vec!["h2".to_owned()]));
    drop(a);
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_wal_completes_its_records_when_another_node_settles_a_copy() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let there = Probe::new();
    let b = node_b(&server, &there).await;
    let here = Probe::new();
    let gate = Gate::new();
    let a = EventBus::builder()
        .wal(PersistentWal::open(dir.path()).unwrap())
        .queue(factory(&server, BEAT).await)
        .batch_size(1)
        .handler(here.gated_handler("h1", "t", &gate, |_| Ack::Ack))
        .handler(here.handler("h2", "t", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let ids = send_shared(&a, &gate, &there).await;
    until("every copy handled on A or B", async || {
        handled(&[&here, &there], "h1").1 >= N && handled(&[&here], "h2").1 >= N
    })
    .await;
    assert_eq!(handled(&[&here, &there], "h1"), (ids.clone(), N));
    assert_eq!(handled(&[&here], "h2"), (ids.clone(), N));
    assert!(
        !handled(&[&there], "h1").0.is_empty(),
        "B settled some of A's h1 copies"
    );
    a.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        a.wal().pending().await.unwrap().len(),
        0,
        "every record completed"
    );
    a.close().await.unwrap();
    // The restart: nothing to replay.
    let wal = PersistentWal::open(dir.path()).unwrap();
    assert!(
        wal.pending().await.unwrap().is_empty(),
        "a restart replays nothing"
    );
    drop(b);
}
