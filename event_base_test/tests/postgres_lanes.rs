//! Broadcasts and addressed messages between processes on PostgreSQL: a `Broadcast` sent by
//! one bus is handled once by every worker of the handler in every process consuming it (a
//! copy in each process's lane), a message addressed to `<node name>/<worker>` only by that
//! worker of that process, a name no process consuming the handler has is refused with
//! `UnknownWorker`, and a name two processes have with `AmbiguousNode`. A process that falls
//! silent is evicted: what was addressed to its workers becomes a dead letter.
//!
//! Buses in one process with factories of their own stand for processes: each factory has
//! its own id, record and lanes.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use event_base::backend::Wal;
use event_base::{
    async_trait, Ack, CoreError, DeliveryMode, EHandler, EMessage, EventBus, HandlerSpec,
    PostgresQueueFactory, ShutdownStrategy,
};
use event_base_test::postgres_server::PostgresServer;
use event_base_test::{until, WAIT};
use tokio::sync::mpsc;

const TOPIC: &str = "prices";
const HANDLER: &str = "sync";
const WORKERS: usize = 2;

/// Sends the name of its process and the id of each message it handles.
struct Record {
    node: &'static str,
    tx: mpsc::UnboundedSender<(&'static str, String)>,
}

#[async_trait]
impl EHandler for Record {
    async fn handler(&self, msg: &EMessage) -> Ack {
        let _ = self.tx.send((self.node, msg.id.to_string()));
        Ack::Ack
    }
}

/// A process named `name`: a bus over a factory of its own, with `WORKERS` workers of
/// `sync`; returns once its record and its subscription are committed.
async fn node(
    server: &PostgresServer,
    name: &'static str,
    tx: &mpsc::UnboundedSender<(&'static str, String)>,
) -> (EventBus, PostgresQueueFactory) {
    let queue = PostgresQueueFactory::connect(&server.url()).await.unwrap();
    let record = Record {
        node: name,
        tx: tx.clone(),
    };
    let bus = EventBus::builder()
        .node_name(name)
        .wal(queue.wal())
        .queue(queue.clone())
        .handler(HandlerSpec::new(HANDLER, TOPIC, record).workers(WORKERS))
        .build()
        .await
        .unwrap();
    bus.wal().flush().await.unwrap();
    (bus, queue)
}

/// Handlings, by (process, message id).
#[derive(Default)]
struct Tally(HashMap<(&'static str, String), usize>);

impl Tally {
    fn get(&self, node: &'static str, id: &str) -> usize {
        self.0.get(&(node, id.to_owned())).copied().unwrap_or(0)
    }

    /// Reads handlings until `done` holds.
    async fn until(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<(&'static str, String)>,
        what: &str,
        done: impl Fn(&Tally) -> bool,
    ) {
        while !done(self) {
            let (node, id) = tokio::time::timeout(WAIT, rx.recv())
                .await
                .unwrap_or_else(|_| panic!("{what}: not in time"))
                .expect("the handlers live");
            *self.0.entry((node, id)).or_default() += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_reaches_every_worker_of_every_process_once() {
    let server = PostgresServer::start();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (a, _qa) = node(&server, "a", &tx).await;
    let (b, _qb) = node(&server, "b", &tx).await;

    let all = EMessage::standard(TOPIC, "all").with_mode(DeliveryMode::Broadcast);
    let id = a.send(TOPIC, all).await.unwrap().to_string();
    let plain = a
        .send(TOPIC, EMessage::standard(TOPIC, "one"))
        .await
        .unwrap()
        .to_string();
    let mut tally = Tally::default();
    tally
        .until(&mut rx, "the broadcast and the plain message", |t| {
            t.get("a", &id) >= WORKERS
                && t.get("b", &id) >= WORKERS
                && t.get("a", &plain) + t.get("b", &plain) >= 1
        })
        .await;
    a.wait_idle(WAIT).await.unwrap();
    b.wait_idle(WAIT).await.unwrap();
    while let Ok((node, id)) = rx.try_recv() {
        *tally.0.entry((node, id)).or_default() += 1;
    }
    assert_eq!(tally.get("a", &id), WORKERS, "a's workers once each");
    assert_eq!(tally.get("b", &id), WORKERS, "b's workers once each");
    assert_eq!(
        tally.get("a", &plain) + tally.get("b", &plain),
        1,
        "a plain message goes to one worker of the cluster"
    );
    a.shutdown(ShutdownStrategy::Force).await.unwrap();
    b.shutdown(ShutdownStrategy::Force).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_addressed_message_reaches_that_worker_of_that_process_only() {
    let server = PostgresServer::start();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (a, _qa) = node(&server, "a", &tx).await;
    let (b, qb) = node(&server, "b", &tx).await;

    let mut ids = Vec::new();
    for to in ["b/sync-1".to_owned(), format!("{}/sync-0", qb.node_id())] {
        let id = a
            .send(TOPIC, EMessage::standard(TOPIC, "to b").with_to_worker(&to))
            .await
            .unwrap_or_else(|e| panic!("send to {to}: {e}"));
        ids.push(id.to_string());
    }
    let mut tally = Tally::default();
    tally
        .until(&mut rx, "b handled both", |t| {
            ids.iter().all(|id| t.get("b", id) == 1)
        })
        .await;
    a.wait_idle(WAIT).await.unwrap();
    b.wait_idle(WAIT).await.unwrap();
    while let Ok((node, id)) = rx.try_recv() {
        *tally.0.entry((node, id)).or_default() += 1;
    }
    assert!(
        ids.iter()
            .all(|id| tally.get("a", id) == 0 && tally.get("b", id) == 1),
        "b's workers once, a's workers of the same names never"
    );

    // Nobody named `c` consumes the handler.
    let refused = a
        .send(
            TOPIC,
            EMessage::standard(TOPIC, "to c").with_to_worker("c/sync-0"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, CoreError::UnknownWorker { .. }),
        "unknown node: {refused:?}"
    );

    // Two processes named `b`: which one is meant cannot be told.
    let (b2, _qb2) = node(&server, "b", &tx).await;
    let ambiguous = a
        .send(
            TOPIC,
            EMessage::standard(TOPIC, "to b").with_to_worker("b/sync-0"),
        )
        .await
        .unwrap_err();
    assert!(
        !matches!(ambiguous, CoreError::UnknownWorker { .. })
            && ambiguous.to_string().contains("b"),
        "two processes named b are not none: {ambiguous:?}"
    );
    for bus in [a, b, b2] {
        bus.shutdown(ShutdownStrategy::Force).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_delayed_broadcast_reaches_no_process_and_send_in_broadcasts() {
    let server = PostgresServer::start();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (a, qa) = node(&server, "a", &tx).await;
    let (b, _qb) = node(&server, "b", &tx).await;

    // A delayed broadcast is a row in each process's lane until it is due: a cancel takes
    // back every copy.
    let early = EMessage::standard(TOPIC, "cancelled")
        .with_mode(DeliveryMode::Broadcast)
        .with_delay(Duration::from_millis(300));
    let cancelled = a.send(TOPIC, early).await.unwrap();
    assert!(a.cancel(&cancelled).await.unwrap(), "taken back");

    // Inside the application's transaction, a broadcast is a copy in each lane too.
    let mut client = server.client().await;
    let txn = client.transaction().await.unwrap();
    let later = EMessage::standard(TOPIC, "later")
        .with_mode(DeliveryMode::Broadcast)
        .with_delay(Duration::from_millis(600));
    let later = qa.send_in(&txn, later).await.unwrap().to_string();
    txn.commit().await.unwrap();

    let mut tally = Tally::default();
    tally
        .until(&mut rx, "the later broadcast, by every worker", |t| {
            t.get("a", &later) >= WORKERS && t.get("b", &later) >= WORKERS
        })
        .await;
    a.wait_idle(WAIT).await.unwrap();
    b.wait_idle(WAIT).await.unwrap();
    while let Ok((node, id)) = rx.try_recv() {
        *tally.0.entry((node, id)).or_default() += 1;
    }
    let cancelled = cancelled.to_string();
    assert_eq!(
        tally.get("a", &cancelled) + tally.get("b", &cancelled),
        0,
        "the cancelled broadcast, due before the later one, never came"
    );
    assert_eq!(
        (tally.get("a", &later), tally.get("b", &later)),
        (WORKERS, WORKERS),
        "each worker once"
    );

    // An address of one process's worker is for a bus to resolve, not a transaction.
    let txn = client.transaction().await.unwrap();
    let addressed = EMessage::standard(TOPIC, "to b").with_to_worker("b/sync-0");
    let refused = qa.send_in(&txn, addressed).await.unwrap_err();
    assert!(
        matches!(
            refused,
            event_base::postgres::PostgresError::AddressedInTransaction { .. }
        ),
        "refused: {refused:?}"
    );
    drop(txn);
    a.shutdown(ShutdownStrategy::Force).await.unwrap();
    b.shutdown(ShutdownStrategy::Force).await.unwrap();
}

/// The child process `b` (`postgres_node host`), killed when dropped.
struct ChildB(Child);

impl Drop for ChildB {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_addressed_to_an_evicted_process_becomes_a_dead_letter() {
    let server = PostgresServer::start();
    let queue = PostgresQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .visibility_timeout(Duration::from_secs(1));
    let a = EventBus::builder()
        .node_name("a")
        .wal(queue.wal())
        .queue(queue)
        .build()
        .await
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_postgres_node"))
        .args(["host", &server.url(), "b", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start postgres_node");
    let out = child.stdout.take().expect("its stdout");
    let mut b = ChildB(child);
    let ready = tokio::task::spawn_blocking(move || {
        BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .any(|l| l == "ready")
    });
    assert!(
        tokio::time::timeout(WAIT, ready).await.unwrap().unwrap(),
        "b ready"
    );
    let b_id = a
        .nodes()
        .await
        .unwrap()
        .unwrap_or_default()
        .into_iter()
        .find(|n| n.name == "b")
        .expect("b listed")
        .id;
    // Due in a minute: it waits in b's lane.
    let later = EMessage::standard("jobs", "to b, later")
        .with_to_worker("b/work-0")
        .with_delay(Duration::from_secs(60));
    let id = a.send("jobs", later).await.unwrap().to_string();

    // SIGKILL: `b` beats no more; `a` evicts it once it was silent for the visibility
    // timeout, and its lane's row becomes a dead letter.
    b.0.kill().unwrap();
    b.0.wait().unwrap();
    // Nothing to wait on in another process's eviction: look until it is there.
    let mut found = None;
    until("the addressed message dead-lettered", async || {
        let dead = a.dead_letters().await.unwrap();
        found = dead.into_iter().find(|d| d.message.id == id);
        found.is_some()
    })
    .await;
    let dead = found.expect("found");
    assert!(
        format!("{:?}", dead.reason).contains("evicted"),
        "the reason says why: {:?}",
        dead.reason
    );
    assert!(
        a.nodes()
            .await
            .unwrap()
            .unwrap_or_default()
            .iter()
            .all(|n| n.id != b_id),
        "b is no longer listed"
    );
    a.shutdown(ShutdownStrategy::Force).await.unwrap();
}
