//! Order per key across processes on Redis: two `redis_node keyed` processes run handler
//! `apply` of topic `ledger` with four workers each, and this process sends keyed messages
//! straight to the subscription's queue, keys interleaved. Each handling prints its key,
//! its sequence number in the key, and when it began and ended (the wall clock, one for
//! every process of the machine). For each key: no two handlings overlap in time, across
//! the processes, and each message is first handled after every earlier one of its key
//! (a redelivery after a crash may repeat some).
//!
//! Keyed messages go to the subscription's keyed stream, which only the holder of its
//! keyed lease reads; killed with SIGKILL, the holder's lease runs out, the other process
//! takes it and first claims what the dead one held, in order. Unkeyed messages still go
//! to the work stream, which both processes share.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_base::backend::{EProducer, QueueFactory};
use event_base::{EMessage, MessageTopic, RedisQueueFactory};
use event_base_test::child_node::ChildNode;
use event_base_test::redis_server::RedisServer;

const LEASE: &str = "eb:{ledger}:kl:apply";
const KEYED_STREAM: &str = "eb:{ledger}:k:apply";
/// Keys, and messages per key.
const KEYS: u32 = 8;
const PER_KEY: u32 = 50;
/// Workers per process.
const WORKERS: usize = 4;
/// The children's heartbeat: the lease's time to live is three of them.
const HEARTBEAT: Duration = Duration::from_millis(200);
/// How long each keyed handling takes: long enough that two processes handling one key at
/// once would overlap.
const WORK: Duration = Duration::from_millis(3);
/// The longest the whole run may take.
const DEADLINE: Duration = Duration::from_secs(60);

/// One keyed handling as a child printed it.
#[derive(Debug, Clone)]
struct Handling {
    process: usize,
    key: u32,
    seq: u32,
    start: u128,
    end: u128,
}

/// What the children printed.
#[derive(Default)]
struct Seen {
    keyed: Vec<Handling>,
    /// Unkeyed handlings per process.
    unkeyed: HashMap<usize, usize>,
    idle: HashSet<usize>,
}

impl Seen {
    fn take(&mut self, (process, line): (usize, String)) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["k", key, seq, start, end] => self.keyed.push(Handling {
                process,
                key: key.trim_start_matches('k').parse().expect("a key"),
                seq: seq.parse().expect("a sequence number"),
                start: start.parse().expect("a start"),
                end: end.parse().expect("an end"),
            }),
            ["u", _] => *self.unkeyed.entry(process).or_default() += 1,
            ["idle"] => {
                self.idle.insert(process);
            }
            _ => {}
        }
    }

    /// Distinct keyed messages handled.
    fn distinct(&self) -> usize {
        self.keyed
            .iter()
            .map(|h| (h.key, h.seq))
            .collect::<HashSet<_>>()
            .len()
    }
}

fn start_keyed(
    index: usize,
    server: &RedisServer,
    events: &mpsc::Sender<(usize, String)>,
) -> ChildNode {
    let args = [
        "keyed".to_owned(),
        server.url(),
        WORKERS.to_string(),
        HEARTBEAT.as_millis().to_string(),
        WORK.as_micros().to_string(),
    ];
    ChildNode::start(env!("CARGO_BIN_EXE_redis_node"), index, &args, events)
}

/// Starts two `keyed` children and waits for both to say `ready`.
fn two_processes(server: &RedisServer) -> (Vec<ChildNode>, mpsc::Receiver<(usize, String)>) {
    let (tx, rx) = mpsc::channel();
    let children = vec![start_keyed(0, server, &tx), start_keyed(1, server, &tx)];
    let mut ready = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while ready.len() < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        let (i, line) = rx.recv_timeout(left).expect("both children ready in time");
        if line == "ready" {
            ready.insert(i);
        }
    }
    (children, rx)
}

/// The subscription's producer, as a sender with no bus of its own uses it.
async fn producer(server: &RedisServer) -> Arc<dyn EProducer> {
    let queue = RedisQueueFactory::connect(&server.url()).await.unwrap();
    queue
        .create_subscription(&MessageTopic::from("ledger"), "apply")
        .unwrap()
        .producer
}

/// Sends `PER_KEY` messages for each of `KEYS` keys, keys interleaved (k0 0, k1 0, ...,
/// k0 1, ...), and `unkeyed` messages without a key among them.
async fn send_interleaved(producer: &dyn EProducer, unkeyed: u32) {
    for seq in 0..PER_KEY {
        for key in 0..KEYS {
            let m = EMessage::standard("ledger", seq.to_string().into_bytes())
                .with_key(format!("k{key}"));
            producer.send(Arc::new(m)).await.unwrap();
        }
        for _ in 0..unkeyed / PER_KEY {
            let m = EMessage::standard("ledger", b"-".to_vec());
            producer.send(Arc::new(m)).await.unwrap();
        }
    }
}

/// Reads lines until `done` holds of what was seen, or the deadline passes.
fn read_until(
    rx: &mpsc::Receiver<(usize, String)>,
    seen: &mut Seen,
    mut done: impl FnMut(&Seen) -> bool,
    what: &str,
) {
    let deadline = Instant::now() + DEADLINE;
    while !done(seen) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => seen.take(line),
            Err(_) => panic!(
                "{what}: not in time ({} keyed messages handled of {})",
                seen.distinct(),
                KEYS * PER_KEY
            ),
        }
    }
}

/// Asks every child in `alive` whether it is idle, and waits for each answer: everything
/// handled is acked, and nothing is left in the streams.
fn wait_idle(
    children: &mut [ChildNode],
    alive: &[usize],
    rx: &mpsc::Receiver<(usize, String)>,
    seen: &mut Seen,
) {
    seen.idle.clear();
    for &i in alive {
        children[i].say("idle");
    }
    read_until(
        rx,
        seen,
        |s| alive.iter().all(|i| s.idle.contains(i)),
        "idle",
    );
}

/// For each key: no two handlings overlap in time, and each message is first handled
/// after every earlier one of its key was. Without `repeats`, none is handled twice.
fn assert_key_order(seen: &Seen, repeats: bool) {
    let mut per_key: HashMap<u32, Vec<&Handling>> = HashMap::new();
    for h in &seen.keyed {
        per_key.entry(h.key).or_default().push(h);
    }
    assert_eq!(per_key.len(), KEYS as usize, "every key handled");
    for (key, mut hs) in per_key {
        hs.sort_by_key(|h| (h.start, h.end));
        for pair in hs.windows(2) {
            assert!(
                pair[1].start >= pair[0].end,
                "key k{key}: two handlings overlap: {:?} and {:?}",
                pair[0],
                pair[1]
            );
        }
        let mut next = 0;
        for h in &hs {
            if h.seq == next {
                next += 1;
            } else {
                assert!(
                    repeats && h.seq < next,
                    "key k{key}: message {} first handled before message {next}: {:?}",
                    h.seq,
                    hs.iter().map(|h| (h.process, h.seq)).collect::<Vec<_>>()
                );
            }
        }
        assert_eq!(next, PER_KEY, "key k{key}: every message handled");
        if !repeats {
            assert_eq!(hs.len(), PER_KEY as usize, "key k{key}: each once");
        }
    }
}

fn xlen(server: &RedisServer, key: &str) -> i64 {
    server
        .query(&["XLEN", key])
        .as_int()
        .expect("XLEN answers a number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_never_run_one_key_at_once_and_keep_its_order() {
    let server = RedisServer::start();
    let (mut children, rx) = two_processes(&server);
    let producer = producer(&server).await;
    send_interleaved(&*producer, 0).await;
    let mut seen = Seen::default();
    read_until(
        &rx,
        &mut seen,
        |s| s.distinct() == (KEYS * PER_KEY) as usize,
        "keyed messages",
    );
    wait_idle(&mut children, &[0, 1], &rx, &mut seen);
    assert_key_order(&seen, false);
    // The process holding the lease ran several keys at once (its four workers).
    let most = most_at_once(&seen.keyed);
    assert!(
        most > 1,
        "keys ran in parallel within the holder: at most {most} at once"
    );
    assert_eq!(xlen(&server, KEYED_STREAM), 0, "every keyed entry acked");
}

/// The most keyed handlings that ran at one time.
fn most_at_once(hs: &[Handling]) -> usize {
    let mut edges: Vec<(u128, i32)> = hs
        .iter()
        .flat_map(|h| [(h.start, 1), (h.end, -1)])
        .collect();
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// The index of the child whose process holds the keyed lease (its value names the
/// consumer, whose name begins with the process id), once one does.
fn lease_holder(server: &RedisServer, children: &[ChildNode]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let value = server.command(&["GET", LEASE]);
        let pid = value
            .trim_start_matches('+')
            .split('-')
            .next()
            .unwrap_or("");
        if let Some(i) = children.iter().position(|c| c.pid().to_string() == pid) {
            return i;
        }
        assert!(
            Instant::now() < deadline,
            "no child took the keyed lease: {value:?}"
        );
        // Redis offers nothing to wait on.
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_holder_killed_mid_run_the_other_takes_over_in_key_order() {
    let server = RedisServer::start();
    let (mut children, rx) = two_processes(&server);
    let producer = producer(&server).await;
    send_interleaved(&*producer, 0).await;
    let mut seen = Seen::default();
    // Mid-run: the holder has handled a fifth.
    read_until(
        &rx,
        &mut seen,
        |s| s.keyed.len() >= (KEYS * PER_KEY / 5) as usize,
        "the first fifth",
    );
    let holder = lease_holder(&server, &children);
    let survivor = 1 - holder;
    children[holder].kill();
    let killed_at = Instant::now();
    // Lines the dead process wrote before it died are still in the pipe.
    read_until(
        &rx,
        &mut seen,
        |s| s.keyed.iter().any(|h| h.process == survivor),
        "the survivor's first keyed message",
    );
    let failover = killed_at.elapsed();
    read_until(
        &rx,
        &mut seen,
        |s| s.distinct() == (KEYS * PER_KEY) as usize,
        "every keyed message",
    );
    wait_idle(&mut children, &[survivor], &rx, &mut seen);
    assert_key_order(&seen, true);
    let by_dead = seen.keyed.iter().filter(|h| h.process == holder).count();
    assert!(by_dead > 0, "the killed process handled some first");
    // The lease lives three heartbeats; the survivor looks again at most a heartbeat later.
    assert!(
        failover < HEARTBEAT * 3 + HEARTBEAT * 2 + Duration::from_secs(2),
        "the survivor took over after {failover:?}"
    );
    eprintln!(
        "failover after {failover:?}; {by_dead} handlings by the killed process, {} in all",
        seen.keyed.len()
    );
    assert_eq!(xlen(&server, KEYED_STREAM), 0, "every keyed entry acked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unkeyed_messages_still_spread_over_both_processes() {
    let server = RedisServer::start();
    let (mut children, rx) = two_processes(&server);
    let producer = producer(&server).await;
    const UNKEYED: u32 = 400;
    send_interleaved(&*producer, UNKEYED).await;
    let mut seen = Seen::default();
    read_until(
        &rx,
        &mut seen,
        |s| {
            s.distinct() == (KEYS * PER_KEY) as usize
                && s.unkeyed.values().sum::<usize>() >= UNKEYED as usize
        },
        "every message",
    );
    wait_idle(&mut children, &[0, 1], &rx, &mut seen);
    assert_key_order(&seen, false);
    for i in 0..2 {
        assert!(
            seen.unkeyed.get(&i).copied().unwrap_or(0) > 0,
            "process {i} handled no unkeyed message: {:?}",
            seen.unkeyed
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_keyed_message_joins_the_keyed_stream_when_due() {
    // It waits in the subscription's delayed set, and the consumer that moves what is due
    // puts it on the keyed stream (not the work stream), where the lease holder reads it.
    let server = RedisServer::start();
    let queue = RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .heartbeat(HEARTBEAT);
    let q = queue
        .create_subscription(&MessageTopic::from("ledger"), "apply")
        .unwrap();
    let m = EMessage::standard("ledger", b"0".to_vec())
        .with_key("k0")
        .with_delay(Duration::from_millis(100));
    let id = m.id.clone();
    q.producer.send(Arc::new(m)).await.unwrap();
    assert_eq!(
        server.query(&["ZCARD", "eb:{ledger}:d:apply"]).as_int(),
        Some(1)
    );
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        while out.is_empty() {
            q.consumer.claim_batch(16, &mut out).await.unwrap();
        }
    })
    .await
    .expect("claimed once due");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].message.id, id);
    assert_eq!(out[0].message.key(), Some("k0"));
    assert_eq!(xlen(&server, KEYED_STREAM), 1, "on the keyed stream");
    assert_eq!(
        xlen(&server, "eb:{ledger}:s:apply"),
        0,
        "not on the work stream"
    );
    q.consumer.ack(&out).await.unwrap();
    assert_eq!(xlen(&server, KEYED_STREAM), 0, "acked and deleted");
}
