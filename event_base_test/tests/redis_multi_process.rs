//! Many processes, one bus: three worker processes and one sender process share handler
//! `work` of topic `jobs` through a real `redis-server`. One worker is killed with SIGKILL
//! mid-run. Every message the sender had confirmed is handled at least once, and the
//! duplicates are bounded by what the killed worker held (claimed and not yet acked): each
//! worker prints a line for each message it handled before acking it, and the parent counts.
//!
//! And the other kind of failure: a worker frozen (SIGSTOP) past its lease, whose entry
//! another consumer took over, wakes up (SIGCONT) and acks: its ack is fenced (the owner
//! check of the ack script), the entry stays with its new owner, who settles it once.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use event_base::{Ack, EventBus, RedisQueueFactory};
use event_base_test::child_node::ChildNode;
use event_base_test::redis_server::RedisServer;
use event_base_test::{Gate, Probe, WAIT};

const STREAM: &str = "eb:{jobs}:s:work";
const GROUP: &str = "work";

/// Starts a `redis_node` child process (see [`ChildNode`]).
fn start_node(index: usize, args: &[String], events: &mpsc::Sender<(usize, String)>) -> ChildNode {
    ChildNode::start(env!("CARGO_BIN_EXE_redis_node"), index, args, events)
}

/// `XPENDING <stream> <group>`: entries pending per consumer name.
fn pending_per_consumer(server: &RedisServer) -> HashMap<String, i64> {
    let reply = server.query(&["XPENDING", STREAM, GROUP]);
    let mut per = HashMap::new();
    if let Some(consumers) = reply.items().get(3) {
        for c in consumers.items() {
            let name = c.items()[0].as_str().expect("a consumer name").to_owned();
            per.insert(name, c.items()[1].as_int().expect("a count"));
        }
    }
    per
}

fn xlen(server: &RedisServer) -> i64 {
    server
        .query(&["XLEN", STREAM])
        .as_int()
        .expect("XLEN answers a number")
}

const MESSAGES: usize = 10_000;
const WORKER_PROCESSES: usize = 3;
/// The claim batch of each worker process.
const BATCH: usize = 16;
/// Workers (handler tasks) per process.
const WORKERS: usize = 4;
/// Entries the router's settler acks in one call at most (`consumer_router.rs`).
const SETTLE_CHUNK: usize = 512;
/// Short, so that the killed worker's entries are taken over within the test's time.
const VISIBILITY: Duration = Duration::from_millis(2000);
/// The killed worker is killed once it has handled this many.
const KILL_AFTER: usize = 1_000;

/// What one worker process can hold at a time, claimed and not acked, by the router's
/// design: the batch it is handing out, the work channel (`max(batch, workers)` jobs), one
/// job per worker, and what finished since the settler's last ack call (one call, at most
/// [`SETTLE_CHUNK`] entries, in flight while the next ones finish).
fn held_bound() -> usize {
    BATCH + BATCH.max(WORKERS) + WORKERS + SETTLE_CHUNK
}

/// What a run with a killed worker saw: the ids the sender confirmed, the ids each worker
/// process handled (in order), and what the killed one held when it died.
struct Outcome {
    sent: HashSet<String>,
    handled: Vec<Vec<String>>,
    held_at_kill: i64,
}

/// Reads the children's lines until every confirmed message was handled and acked, killing
/// worker `killed` (SIGKILL) once it has handled [`KILL_AFTER`]; then stops the others and
/// reads what they printed to the end.
fn run_and_kill(
    server: &RedisServer,
    workers: &mut [ChildNode],
    killed: usize,
    sender_index: usize,
    events: &mpsc::Receiver<(usize, String)>,
) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(60);
    let next = |events: &mpsc::Receiver<(usize, String)>| {
        let left = deadline.saturating_duration_since(Instant::now());
        events.recv_timeout(left.min(Duration::from_millis(50)))
    };
    let mut sent: HashSet<String> = HashSet::new();
    let mut sender_done = false;
    let mut handled: Vec<Vec<String>> = vec![Vec::new(); WORKER_PROCESSES];
    let mut handled_ids: HashSet<String> = HashSet::new();
    let mut held_at_kill: Option<i64> = None;
    // Sent and confirmed, not yet handled.
    let mut unhandled = 0usize;
    loop {
        assert!(
            Instant::now() < deadline,
            "not finished in time: {} sent ({sender_done}), {} handled, killed: {held_at_kill:?}, stream holds {}",
            sent.len(),
            handled_ids.len(),
            xlen(server)
        );
        match next(events) {
            Ok((i, line)) if i == sender_index => {
                if let Some(id) = line.strip_prefix("sent ") {
                    if sent.insert(id.to_owned()) && !handled_ids.contains(id) {
                        unhandled += 1;
                    }
                } else if line == "done" {
                    sender_done = true;
                }
            }
            Ok((i, line)) => {
                if let Some(id) = line.strip_prefix("h ") {
                    handled[i].push(id.to_owned());
                    if handled_ids.insert(id.to_owned()) && sent.contains(id) {
                        unhandled -= 1;
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("every child's output ended"),
        }
        if held_at_kill.is_none() && handled[killed].len() >= KILL_AFTER {
            let pid = workers[killed].pid();
            workers[killed].kill();
            // What it held is still its own: nobody takes an entry over before its lease (a
            // visibility timeout) has run out, and it renewed them every third of one.
            let prefix = format!("{pid}-");
            let held: i64 = pending_per_consumer(server)
                .into_iter()
                .filter(|(name, _)| name.starts_with(&prefix))
                .map(|(_, n)| n)
                .sum();
            held_at_kill = Some(held);
            assert!(
                handled_ids.len() < MESSAGES,
                "killed mid-run: {} of {MESSAGES} handled before the kill",
                handled_ids.len()
            );
        }
        if held_at_kill.is_some()
            && sender_done
            && sent.len() == MESSAGES
            && unhandled == 0
            && xlen(server) == 0
        {
            break;
        }
    }
    // Every entry is acked and deleted: no more deliveries come. Stop the survivors and read
    // what they printed to the end.
    for w in workers.iter_mut() {
        w.kill();
    }
    while let Ok((i, line)) = events.recv_timeout(WAIT) {
        if let Some(id) = line.strip_prefix("h ") {
            if i < WORKER_PROCESSES {
                handled[i].push(id.to_owned());
            }
        }
    }

    Outcome {
        sent,
        handled,
        held_at_kill: held_at_kill.expect("killed"),
    }
}

#[test]
fn three_workers_and_a_sender_survive_a_sigkilled_worker() {
    let server = RedisServer::start();
    let (tx, events) = mpsc::channel();
    let mut workers: Vec<ChildNode> = (0..WORKER_PROCESSES)
        .map(|i| {
            start_node(
                i,
                &[
                    "worker".into(),
                    server.url(),
                    VISIBILITY.as_millis().to_string(),
                    BATCH.to_string(),
                    WORKERS.to_string(),
                    "1000".into(), // 1 ms of work per message
                ],
                &tx,
            )
        })
        .collect();
    let sender_index = WORKER_PROCESSES;
    let _sender = start_node(
        sender_index,
        &[
            "sender".into(),
            server.url(),
            MESSAGES.to_string(),
            "16".into(),
        ],
        &tx,
    );
    drop(tx);

    let killed = 0;
    let Outcome {
        sent,
        handled,
        held_at_kill: held,
    } = run_and_kill(&server, &mut workers, killed, sender_index, &events);
    assert!(held > 0, "the killed worker held entries when it died");
    assert!(
        held as usize <= held_bound(),
        "the killed worker held {held}, more than its settings allow ({})",
        held_bound()
    );
    let mut times: HashMap<&str, usize> = HashMap::new();
    for id in handled.iter().flatten() {
        *times.entry(id.as_str()).or_default() += 1;
    }
    assert!(
        sent.iter().all(|id| times.contains_key(id.as_str())),
        "every confirmed message handled at least once"
    );
    assert_eq!(times.len(), MESSAGES, "nothing handled that was not sent");
    let duplicates: usize = times.values().map(|n| n - 1).sum();
    assert!(
        duplicates as i64 <= held,
        "{duplicates} duplicates, more than the {held} entries the killed worker held"
    );
    // Only the killed worker's entries come twice: one of the two handlings is its own.
    let by_killed: HashSet<&str> = handled[killed].iter().map(String::as_str).collect();
    for (id, n) in &times {
        if *n > 1 {
            assert_eq!(*n, 2, "{id} handled {n} times");
            assert!(by_killed.contains(id), "{id} handled twice by survivors");
        }
    }
    assert!(
        pending_per_consumer(&server).values().all(|n| *n == 0),
        "nothing left pending"
    );
    println!(
        "handled {} (killed worker {} before it died), held at the kill {held}, duplicates {duplicates}, bound {}",
        times.values().sum::<usize>(),
        handled[killed].len(),
        held_bound()
    );
}

/// The next line of `lines` that `pred` accepts.
async fn expect(
    lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    let found = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.recv().await {
            if pred(&line) {
                return Some(line);
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(line)) => line,
        Ok(None) => panic!("the zombie's output ended before {what}"),
        Err(_) => panic!("the zombie did not print {what} in time"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_frozen_past_its_lease_cannot_ack_what_was_taken_over() {
    const FROZEN_VISIBILITY: Duration = Duration::from_millis(600);
    let server = RedisServer::start();
    let (tx, events) = mpsc::channel();
    let mut zombie = start_node(
        0,
        &[
            "zombie".into(),
            server.url(),
            FROZEN_VISIBILITY.as_millis().to_string(),
        ],
        &tx,
    );
    drop(tx);
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        while let Ok((_, line)) = events.recv() {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let started = expect(&mut lines, "`started`", |l| l.starts_with("started ")).await;
    let id = started["started ".len()..].to_owned();
    let zombie_consumer = {
        let per = pending_per_consumer(&server);
        let prefix = format!("{}-", zombie.pid());
        let (name, n) = per
            .into_iter()
            .find(|(name, _)| name.starts_with(&prefix))
            .expect("the zombie's consumer holds the entry");
        assert_eq!(n, 1);
        name
    };

    zombie.signal("-STOP");
    // Another process's consumer takes the entry over once its lease ran out, and holds it
    // (its handler waits on the gate).
    let gate = Gate::new();
    let probe = Probe::new();
    let queue = RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .visibility_timeout(FROZEN_VISIBILITY);
    let bus = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(probe.gated_handler("work", "jobs", &gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    probe.wait_for(1, WAIT).await;
    assert_eq!(probe.seen()[0].id, id, "the frozen worker's entry");
    let owners = pending_per_consumer(&server);
    assert_eq!(owners.get(&zombie_consumer), None, "no longer the zombie's");
    assert_eq!(owners.values().sum::<i64>(), 1, "held by the new owner");

    // The zombie wakes up and its handler acks: fenced.
    zombie.say("go");
    zombie.signal("-CONT");
    expect(&mut lines, "`returning`", |l| {
        l == format!("returning {id}")
    })
    .await;
    let warning = expect(&mut lines, "the fenced ack's warning", |l| {
        l.contains("fenced=")
    })
    .await;
    assert!(warning.contains("fenced=1"), "{warning}");
    // Its ack changed nothing: the entry is still in the stream, pending with its new owner.
    assert_eq!(xlen(&server), 1, "the zombie's ack deleted nothing");
    let owners = pending_per_consumer(&server);
    assert_eq!(owners.values().sum::<i64>(), 1);
    assert_eq!(owners.get(&zombie_consumer), None);

    // The new owner settles it, once.
    gate.open();
    bus.wait_idle(WAIT).await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while xlen(&server) != 0 {
        assert!(tokio::time::Instant::now() < deadline, "never acked");
        // Redis offers nothing to wait on.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(probe.count_of(&id), 1, "handled once by the new owner");
    assert!(pending_per_consumer(&server).values().all(|n| *n == 0));
    assert_eq!(
        server.query(&["XLEN", "eb:{jobs}:dlq"]).as_int(),
        Some(0),
        "no dead letter"
    );
    drop(bus);
}
