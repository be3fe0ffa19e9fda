//! Discovery and shutdown acks between two processes on PostgreSQL: this test's bus (node
//! `a`) watches `_system.worker_discovery`, `_system.topic_sync` and `_system.shutdown_ack`; a
//! child process (`postgres_node host`, node `b`) runs two workers. `a` sees `b`'s workers
//! join, `b` answers a topic discovery request, and a shutdown command sent from `a` stops
//! `b`, whose acks reach `a`. Killed instead (SIGKILL), `b`'s workers are announced dead by
//! `a` when it evicts `b` (silent for the visibility timeout, 1 s on both). Only paused
//! (SIGSTOP) that long, `b` is evicted and announced dead the same way, and when it runs
//! again (SIGCONT) it announces its workers as joined again.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use event_base::backend::Wal;
use event_base::constant::{SHUTDOWN, SHUTDOWN_ACK, TOPIC_DISCOVERY, TOPIC_SYNC, WORKER_DISCOVERY};
use event_base::{
    Ack, DiscoveryEvent, EMessage, EventBus, PostgresQueueFactory, ShutdownAck, ShutdownCommand,
    ShutdownStrategy, TopicDiscovery, TopicSync, WorkerDiscovery, WorkerOutcome,
};
use event_base_test::postgres_server::PostgresServer;
use event_base_test::{decode, Probe, Seen, WAIT};
use tokio::sync::mpsc;

/// The child, killed if the test fails before it exits.
struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends `signal` (`-STOP`, `-CONT`) to the child.
fn signal(node: &Node, signal: &str) {
    let status = Command::new("kill")
        .arg(signal)
        .arg(node.0.id().to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {signal} of the child");
}

/// Starts `postgres_node host <url> b 2`; its stdout lines go to the receiver.
fn start_b(url: &str) -> (Node, mpsc::UnboundedReceiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_postgres_node"))
        .args(["host", url, "b", "2"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start postgres_node");
    let out = child.stdout.take().expect("its stdout");
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (Node(child), rx)
}

async fn expect_line(rx: &mut mpsc::UnboundedReceiver<String>, want: &str) {
    let wait = async {
        while let Some(line) = rx.recv().await {
            if line == want {
                return;
            }
        }
        panic!("the child ended before printing `{want}`");
    };
    tokio::time::timeout(WAIT, wait)
        .await
        .unwrap_or_else(|_| panic!("the child printed `{want}`"));
}

fn of<T: serde::de::DeserializeOwned>(seen: &[Seen], label: &str) -> Vec<T> {
    seen.iter()
        .filter(|s| s.label == label)
        .map(|s| decode(&s.payload))
        .collect()
}

/// The names of `b`'s workers announced with `event` in `seen`.
fn of_b(seen: &[Seen], event: DiscoveryEvent) -> Vec<String> {
    of::<WorkerDiscovery>(seen, "discovery")
        .into_iter()
        .filter(|d| d.worker.node == "b" && d.event == event)
        .map(|d| d.worker.name)
        .collect()
}

/// Whether `names` holds both of `b`'s workers.
fn both(names: &[String]) -> bool {
    ["work-0", "work-1"]
        .iter()
        .all(|w| names.iter().any(|n| n == w))
}

/// This test's bus, node `a` (visibility timeout 1 s), watching `topics` (label, topic)
/// with `watch`; returns once its subscriptions are committed, so that `b` finds them when
/// it starts.
async fn start_a(server: &PostgresServer, watch: &Arc<Probe>, topics: &[(&str, &str)]) -> EventBus {
    let queue = PostgresQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .visibility_timeout(Duration::from_secs(1));
    let mut builder = EventBus::builder()
        .node_name("a")
        .wal(queue.wal())
        .queue(queue.clone());
    for &(label, topic) in topics {
        builder = builder.handler(watch.handler(label, topic, |_| Ack::Ack));
    }
    let a = builder.build().await.unwrap();
    a.wal().flush().await.unwrap();
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_is_discovered_answers_and_acks_its_shutdown() {
    let server = PostgresServer::start();
    let watch = Probe::new();
    let a = start_a(
        &server,
        &watch,
        &[
            ("discovery", WORKER_DISCOVERY),
            ("sync", TOPIC_SYNC),
            ("acks", SHUTDOWN_ACK),
        ],
    )
    .await;

    let (_b, mut lines) = start_b(&server.url());
    expect_line(&mut lines, "ready").await;
    watch
        .wait_until("b's two workers joined, and its table", WAIT, |s| {
            let joined: Vec<WorkerDiscovery> = of(s, "discovery");
            let tables: Vec<TopicSync> = of(s, "sync");
            ["work-0", "work-1"].iter().all(|w| {
                joined.iter().any(|d| {
                    d.worker.node == "b" && d.worker.name == *w && d.event == DiscoveryEvent::Joined
                })
            }) && tables.iter().any(|t| t.node == "b")
        })
        .await;

    // Asked, both nodes answer with their tables: `b`'s again.
    let before = watch.seen().len();
    let ask = EMessage::json(TOPIC_DISCOVERY, &TopicDiscovery::default()).unwrap();
    a.send(TOPIC_DISCOVERY, ask).await.unwrap();
    watch
        .wait_until("a's and b's answers", WAIT, |s| {
            let tables: Vec<TopicSync> = of(&s[before..], "sync");
            tables.iter().any(|t| t.node == "a") && tables.iter().any(|t| t.node == "b")
        })
        .await;
    let tables: Vec<TopicSync> = of(&watch.seen()[before..], "sync");
    let b_table = tables.iter().find(|t| t.node == "b").unwrap();
    let jobs = b_table.topics.iter().find(|t| t.topic == "jobs").unwrap();
    assert_eq!(jobs.workers, ["work-0", "work-1"]);

    // A command from `a` stops `b` (and `a`); `b`'s acks reach `a`.
    let command = ShutdownCommand {
        strategy: ShutdownStrategy::Drain {
            timeout: Duration::from_secs(5),
        },
        reason: Some("deploy".into()),
    };
    a.send(SHUTDOWN, EMessage::json(SHUTDOWN, &command).unwrap())
        .await
        .unwrap();
    expect_line(&mut lines, "stopped").await;
    // Stopped cleanly, `b` no longer lists workers (only `a` does): it will not be
    // announced dead when it is evicted.
    let listed =
        server.sql("SELECT name FROM event_base_nodes WHERE workers <> '[]' ORDER BY name");
    assert_eq!(listed.trim(), "a", "only a's workers listed");
    watch
        .wait_until("b's two acks", WAIT, |s| {
            of::<ShutdownAck>(s, "acks")
                .iter()
                .filter(|a| a.node == "b")
                .count()
                == 2
        })
        .await;
    let mut acks: Vec<ShutdownAck> = of::<ShutdownAck>(&watch.seen(), "acks")
        .into_iter()
        .filter(|a| a.node == "b")
        .collect();
    acks.sort_by(|x, y| x.worker.cmp(&y.worker));
    assert_eq!(acks[0].worker, "work-0");
    assert_eq!(acks[1].worker, "work-1");
    assert!(acks
        .iter()
        .all(|a| a.topic == "jobs" && a.outcome == WorkerOutcome::Completed));
    tokio::time::timeout(WAIT, a.shutdown(ShutdownStrategy::Force))
        .await
        .expect("a's shutdown ended")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_of_a_killed_process_are_announced_dead_by_the_process_that_evicts_it() {
    let server = PostgresServer::start();
    let watch = Probe::new();
    let a = start_a(&server, &watch, &[("discovery", WORKER_DISCOVERY)]).await;

    let (mut b, mut lines) = start_b(&server.url());
    expect_line(&mut lines, "ready").await;
    watch
        .wait_until("b's two workers joined", WAIT, |s| {
            of::<WorkerDiscovery>(s, "discovery")
                .iter()
                .filter(|d| d.worker.node == "b" && d.event == DiscoveryEvent::Joined)
                .count()
                >= 2
        })
        .await;
    // No worker of `b` is dead while it runs.
    assert!(!of::<WorkerDiscovery>(&watch.seen(), "discovery")
        .iter()
        .any(|d| d.event == DiscoveryEvent::Dead));

    // SIGKILL: `b` says nothing more. `a` evicts it once it was silent for the visibility
    // timeout and announces its workers dead.
    b.0.kill().unwrap();
    b.0.wait().unwrap();
    watch
        .wait_until("b's two workers announced dead", WAIT, |s| {
            both(&of_b(s, DiscoveryEvent::Dead))
        })
        .await;
    let dead: Vec<WorkerDiscovery> = of::<WorkerDiscovery>(&watch.seen(), "discovery")
        .into_iter()
        .filter(|d| d.event == DiscoveryEvent::Dead)
        .collect();
    assert!(
        dead.iter().all(|d| d.worker.node == "b"),
        "only b's: {dead:?}"
    );
    for name in ["work-0", "work-1"] {
        let of_it: Vec<&WorkerDiscovery> = dead.iter().filter(|d| d.worker.name == name).collect();
        assert_eq!(of_it.len(), 1, "{name} announced dead once");
        assert_eq!(of_it[0].worker.topic.as_str(), "jobs");
    }
    tokio::time::timeout(WAIT, a.shutdown(ShutdownStrategy::Force))
        .await
        .expect("a's shutdown ended")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_taken_for_dead_while_paused_announces_its_workers_again() {
    let server = PostgresServer::start();
    let watch = Probe::new();
    let a = start_a(&server, &watch, &[("discovery", WORKER_DISCOVERY)]).await;

    let (b, mut lines) = start_b(&server.url());
    expect_line(&mut lines, "ready").await;
    watch
        .wait_until("b's two workers joined", WAIT, |s| {
            both(&of_b(s, DiscoveryEvent::Joined))
        })
        .await;

    // Paused, `b` falls silent: `a` evicts it and announces its workers dead.
    signal(&b, "-STOP");
    watch
        .wait_until("b's two workers announced dead", WAIT, |s| {
            both(&of_b(s, DiscoveryEvent::Dead))
        })
        .await;
    let after_dead = watch.seen().len();

    // Running again, `b` finds it was taken for dead and says its workers are back.
    signal(&b, "-CONT");
    watch
        .wait_until("b's two workers joined again", WAIT, |s| {
            both(&of_b(&s[after_dead..], DiscoveryEvent::Joined))
        })
        .await;
    // And it lists them again, so that a later death is announced too.
    let listed =
        server.sql("SELECT name FROM event_base_nodes WHERE workers <> '[]' ORDER BY name");
    assert_eq!(
        listed.split_whitespace().collect::<Vec<_>>(),
        ["a", "b"],
        "a's and b's workers listed again"
    );
    tokio::time::timeout(WAIT, a.shutdown(ShutdownStrategy::Force))
        .await
        .expect("a's shutdown ended")
        .unwrap();
}
