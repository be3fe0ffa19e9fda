//! Several processes on one PostgreSQL database (the `postgres_node` binary): workers
//! killed with SIGKILL, the server itself crashed and restarted mid-run, and the order per
//! key across processes. What a sender was told it sent is handled at least once; the
//! processes reconnect by themselves.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_base::backend::{EProducer, QueueFactory};
use event_base::{EMessage, MessageTopic, PostgresQueueFactory};
use event_base_test::child_node::ChildNode;
use event_base_test::postgres_server::PostgresServer;

/// The longest a run may take.
const DEADLINE: Duration = Duration::from_secs(90);

fn node(index: usize, args: &[String], events: &mpsc::Sender<(usize, String)>) -> ChildNode {
    ChildNode::start(env!("CARGO_BIN_EXE_postgres_node"), index, args, events)
}

/// A `worker` child: visibility 2 s (as the Redis test's: a lease renewed every third of
/// it must not run out on a loaded machine, or a living worker's message comes twice), 4
/// workers, 1 ms of work a message.
fn worker(
    index: usize,
    server: &PostgresServer,
    events: &mpsc::Sender<(usize, String)>,
) -> ChildNode {
    let args = ["worker", &server.url(), "2000", "4", "1000"].map(str::to_owned);
    node(index, &args, events)
}

/// Waits until each of `which` printed `ready`.
fn wait_ready(rx: &mpsc::Receiver<(usize, String)>, which: &[usize]) {
    let mut ready = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !which.iter().all(|i| ready.contains(i)) {
        let left = deadline.saturating_duration_since(Instant::now());
        let (i, line) = rx.recv_timeout(left).expect("the children ready in time");
        if line == "ready" {
            ready.insert(i);
        }
    }
}

/// What the workers handled and the sender sent.
#[derive(Default)]
struct Tally {
    sent: HashSet<String>,
    done: bool,
    /// Who handled each id (one entry a handling).
    handled: HashMap<String, Vec<usize>>,
    by: HashMap<usize, usize>,
}

impl Tally {
    fn take(&mut self, (i, line): (usize, String)) {
        if let Some(id) = line.strip_prefix("sent ") {
            self.sent.insert(id.to_owned());
        } else if line == "done" {
            self.done = true;
        } else if let Some(id) = line.strip_prefix("h ") {
            self.handled.entry(id.to_owned()).or_default().push(i);
            *self.by.entry(i).or_default() += 1;
        }
    }

    fn all_handled(&self) -> bool {
        self.done && self.sent.iter().all(|id| self.handled.contains_key(id))
    }

    fn read_until(
        &mut self,
        rx: &mpsc::Receiver<(usize, String)>,
        mut until: impl FnMut(&Tally) -> bool,
        what: &str,
    ) {
        let deadline = Instant::now() + DEADLINE;
        while !until(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => self.take(line),
                Err(_) => panic!(
                    "{what}: not in time ({} sent, done {}, {} handled)",
                    self.sent.len(),
                    self.done,
                    self.handled.len()
                ),
            }
        }
    }
}

#[test]
fn three_workers_one_killed_every_sent_message_is_handled() {
    let server = PostgresServer::start();
    let (tx, rx) = mpsc::channel();
    let mut workers: Vec<ChildNode> = (0..3).map(|i| worker(i, &server, &tx)).collect();
    wait_ready(&rx, &[0, 1, 2]);
    let args = ["bus-sender", &server.url(), "3000", "8"].map(str::to_owned);
    let _sender = node(9, &args, &tx);
    let mut tally = Tally::default();
    tally.read_until(
        &rx,
        |t| t.by.get(&0).copied().unwrap_or(0) >= 100,
        "worker 0 at work",
    );
    workers[0].kill();
    tally.read_until(&rx, Tally::all_handled, "every sent message handled");
    assert_eq!(
        tally.sent.len(),
        3000,
        "the sender was told every send went through"
    );
    // Only what the killed worker handled but had not acked when it died comes twice: once
    // by it, once by another; nothing the living ones handled comes again.
    for (id, by) in &tally.handled {
        if by.len() > 1 {
            assert!(
                by.len() == 2 && by.contains(&0),
                "{id} handled by {by:?}: only the killed worker's unacked messages may come twice"
            );
        }
    }
    drop(workers);
}

#[test]
fn the_server_crashes_mid_run_and_nothing_sent_is_lost() {
    let mut server = PostgresServer::start();
    let (tx, rx) = mpsc::channel();
    let workers: Vec<ChildNode> = (0..2).map(|i| worker(i, &server, &tx)).collect();
    wait_ready(&rx, &[0, 1]);
    let args = ["bus-sender", &server.url(), "3000", "4"].map(str::to_owned);
    let _sender = node(9, &args, &tx);
    let mut tally = Tally::default();
    tally.read_until(
        &rx,
        |t| t.handled.len() >= 300,
        "the first messages handled",
    );
    // SIGQUIT: the server stops at once, without a checkpoint, and recovers from its WAL.
    server.restart();
    tally.read_until(
        &rx,
        Tally::all_handled,
        "every sent message handled after the crash",
    );
    assert_eq!(tally.sent.len(), 3000);
    drop(workers);
}

/// Keys, and messages a key.
const KEYS: u32 = 8;
const PER_KEY: u32 = 40;

/// One keyed handling as a child printed it: `(process, key, seq, start, end)`.
type Handling = (usize, String, u32, u128, u128);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_keep_each_keys_order_and_never_run_it_twice_at_once() {
    let server = PostgresServer::start();
    let (tx, rx) = mpsc::channel();
    let args = ["keyed", &server.url(), "4", "2000"].map(str::to_owned);
    let _children = [node(0, &args, &tx), node(1, &args, &tx)];
    wait_ready(&rx, &[0, 1]);
    let queue = PostgresQueueFactory::connect(&server.url()).await.unwrap();
    let producer: Arc<dyn EProducer> = queue
        .create_subscription(&MessageTopic::from("jobs"), "work")
        .unwrap()
        .producer;
    for seq in 0..PER_KEY {
        for key in 0..KEYS {
            let m = EMessage::standard("jobs", seq.to_string()).with_key(format!("k{key}"));
            producer.send(Arc::new(m)).await.unwrap();
        }
    }
    let mut seen: Vec<Handling> = Vec::new();
    let deadline = Instant::now() + DEADLINE;
    while seen.len() < (KEYS * PER_KEY) as usize {
        let left = deadline.saturating_duration_since(Instant::now());
        let (p, line) = rx
            .recv_timeout(left)
            .expect("every keyed message handled in time");
        let w: Vec<&str> = line.split_whitespace().collect();
        if let ["k", key, seq, start, end] = w.as_slice() {
            seen.push((
                p,
                (*key).to_owned(),
                seq.parse().unwrap(),
                start.parse().unwrap(),
                end.parse().unwrap(),
            ));
        }
    }
    let mut per_key: HashMap<&str, Vec<&Handling>> = HashMap::new();
    for h in &seen {
        per_key.entry(&h.1).or_default().push(h);
    }
    assert_eq!(per_key.len(), KEYS as usize);
    for (key, mut hs) in per_key {
        hs.sort_by_key(|h| (h.3, h.4));
        for pair in hs.windows(2) {
            assert!(
                pair[1].3 >= pair[0].4,
                "key {key}: two handlings overlap: {:?} and {:?}",
                pair[0],
                pair[1]
            );
        }
        let order: Vec<u32> = hs.iter().map(|h| h.2).collect();
        assert_eq!(
            order,
            (0..PER_KEY).collect::<Vec<_>>(),
            "key {key}: in send order, once each"
        );
    }
    let processes: HashSet<usize> = seen.iter().map(|h| h.0).collect();
    assert_eq!(processes.len(), 2, "both processes took keyed messages");
}
