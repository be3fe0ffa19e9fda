//! Discovery, shutdown commands and eviction between two processes sharing a backend, the
//! same scenario on every backend that has nodes (Redis, PostgreSQL): the test's bus (node
//! `a`) watches `_system.worker_discovery` (and the topic tables and shutdown acks); a child
//! process (node `b`, the backend's `host` role: two workers of `work` on `jobs`) is seen
//! joining, answers a topic discovery request, and stops on a shutdown command sent from `a`,
//! its acks reaching `a`. Killed instead (SIGKILL), its workers are announced dead by `a`
//! when `a` evicts it; only paused (SIGSTOP) past the silence limit, the same, and then,
//! running again (SIGCONT), it announces its workers joined again.
//!
//! A backend's test gives a [`Cluster`]: how to start `a`, the child's command line, and how
//! many processes list live workers with the backend.

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use event_base::constant::{SHUTDOWN_ACK, TOPIC_DISCOVERY, TOPIC_SYNC, WORKER_DISCOVERY};
use event_base::{
    DiscoveryEvent, EMessage, EventBus, ShutdownAck, ShutdownStrategy, TopicDiscovery, TopicSync,
    WorkerDiscovery, WorkerOutcome,
};
use tokio::sync::mpsc;

use crate::shutdown_scenario::send_drain_command;
use crate::{decode, Probe, Seen, WAIT};

/// Starts node `a`: a bus named `a` whose handlers record, in the probe given, the topics
/// given (label, topic); returns once its subscriptions are known to the backend.
pub type StartA<'a> = Box<
    dyn Fn(
            Arc<Probe>,
            Vec<(&'static str, &'static str)>,
        ) -> Pin<Box<dyn Future<Output = EventBus> + 'a>>
        + 'a,
>;

/// What a backend's test gives the scenario.
pub struct Cluster<'a> {
    /// Starts node `a`.
    pub start_a: StartA<'a>,
    /// The child `b`'s program and arguments: a `Host` bus named `b` with two workers of
    /// `work` on `jobs`, printing `ready` once built and `stopped` after a shutdown command.
    pub b: (String, Vec<String>),
    /// How many processes list live workers with the backend now.
    pub listed: Box<dyn Fn() -> usize + 'a>,
}

impl std::fmt::Debug for Cluster<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("b", &self.b)
            .finish_non_exhaustive()
    }
}

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

/// Starts `b`; its stdout lines go to the receiver.
fn start_b(cluster: &Cluster<'_>) -> (Node, mpsc::UnboundedReceiver<String>) {
    let (program, args) = &cluster.b;
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the child node");
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

async fn stop_a(a: EventBus) {
    tokio::time::timeout(WAIT, a.shutdown(ShutdownStrategy::Force))
        .await
        .expect("a's shutdown ended")
        .unwrap();
}

/// `a` sees `b`'s workers join; asked, both answer with their tables; a command from `a`
/// stops `b` (and `a`), `b`'s acks reach `a`, and `b` no longer lists workers.
pub async fn another_process_is_discovered_answers_and_acks_its_shutdown(cluster: Cluster<'_>) {
    let watch = Probe::new();
    let a = (cluster.start_a)(
        watch.clone(),
        vec![
            ("discovery", WORKER_DISCOVERY),
            ("sync", TOPIC_SYNC),
            ("acks", SHUTDOWN_ACK),
        ],
    )
    .await;

    let (_b, mut lines) = start_b(&cluster);
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
    send_drain_command(&a).await;
    expect_line(&mut lines, "stopped").await;
    // Stopped cleanly, `b` no longer lists workers (only `a` does): it will not be
    // announced dead when it is evicted.
    assert_eq!((cluster.listed)(), 1, "only a's workers listed");
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
    stop_a(a).await;
}

/// Killed (SIGKILL), `b` says nothing more: `a` evicts it after the silence limit and
/// announces each of its workers dead once.
pub async fn the_workers_of_a_killed_process_are_announced_dead(cluster: Cluster<'_>) {
    let watch = Probe::new();
    let a = (cluster.start_a)(watch.clone(), vec![("discovery", WORKER_DISCOVERY)]).await;

    let (mut b, mut lines) = start_b(&cluster);
    expect_line(&mut lines, "ready").await;
    watch
        .wait_until("b's two workers joined", WAIT, |s| {
            both(&of_b(s, DiscoveryEvent::Joined))
        })
        .await;
    // No worker of `b` is dead while it runs.
    assert!(!of::<WorkerDiscovery>(&watch.seen(), "discovery")
        .iter()
        .any(|d| d.event == DiscoveryEvent::Dead));

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
    stop_a(a).await;
}

/// Paused (SIGSTOP) past the silence limit, `b` is evicted and its workers announced dead;
/// running again (SIGCONT), it finds it was taken for dead, announces them joined again and
/// lists them again.
pub async fn a_process_taken_for_dead_while_paused_announces_its_workers_again(
    cluster: Cluster<'_>,
) {
    let watch = Probe::new();
    let a = (cluster.start_a)(watch.clone(), vec![("discovery", WORKER_DISCOVERY)]).await;

    let (b, mut lines) = start_b(&cluster);
    expect_line(&mut lines, "ready").await;
    watch
        .wait_until("b's two workers joined", WAIT, |s| {
            both(&of_b(s, DiscoveryEvent::Joined))
        })
        .await;

    signal(&b, "-STOP");
    watch
        .wait_until("b's two workers announced dead", WAIT, |s| {
            both(&of_b(s, DiscoveryEvent::Dead))
        })
        .await;
    let after_dead = watch.seen().len();

    signal(&b, "-CONT");
    watch
        .wait_until("b's two workers joined again", WAIT, |s| {
            both(&of_b(&s[after_dead..], DiscoveryEvent::Joined))
        })
        .await;
    // And it lists them again, so that a later death is announced too.
    assert_eq!((cluster.listed)(), 2, "a's and b's workers listed again");
    stop_a(a).await;
}
