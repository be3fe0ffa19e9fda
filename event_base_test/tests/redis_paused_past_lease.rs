//! A worker process paused (SIGSTOP) past its lease does not redo, once it runs again
//! (SIGCONT), the work another process took over meanwhile.
//!
//! Two worker processes share handler `work` of topic `jobs`; a sender fills the stream. Once
//! the slow one (`a`, one worker) has claimed a backlog and begun handling it, it is frozen
//! until the other one (`b`) has taken over every entry it held, then resumed. Its entries
//! are taken over in either of the two ways a pause loses them: their leases ran out (a
//! pause longer than the visibility timeout), or, with a visibility timeout longer than the
//! pause, the janitor (`b`, a `Host`) evicted `a` after three silent heartbeats. Every handling prints a line
//! (`h <id>`), and the parent counts the handlings of each message: a message handled
//! twice is one that `a` handled after `b` took it over. Only the messages whose handler had
//! already started when `a` froze (one per worker of `a`) may come twice: `a` confirms its
//! old claims with Redis before starting a handler on them, and drops those it lost.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use event_base_test::child_node::ChildNode;
use event_base_test::redis_server::RedisServer;

const STREAM: &str = "eb:{jobs}:s:work";
const GROUP: &str = "work";
const MESSAGES: usize = 400;
/// The frozen process is frozen at least this long (and until it lost every entry it held).
const PAUSE: Duration = Duration::from_secs(4);
/// Workers of the frozen process: the most messages whose handler it can have begun.
const A_WORKERS: usize = 1;
/// Claim batch of the frozen process: it holds about twice this (the batch being handed
/// out, the work channel) beyond the message in hand.
const A_BATCH: usize = 16;
/// Claim batch of the other one: a sweep takes over this many at most, so all `a` held in
/// one sweep.
const B_BATCH: usize = 64;
/// Per message, so the frozen process holds a backlog when it freezes.
const WORK: Duration = Duration::from_millis(20);

/// Starts a `redis_node` child process (see [`ChildNode`]).
fn start_node(index: usize, args: &[String], events: &mpsc::Sender<(usize, String)>) -> ChildNode {
    ChildNode::start(env!("CARGO_BIN_EXE_redis_node"), index, args, events)
}

/// Entries of the group pending with the consumers of process `pid` (a consumer's name
/// starts with its node id, `<pid>-…`).
fn pending_of(server: &RedisServer, pid: u32) -> i64 {
    let reply = server.query(&["XPENDING", STREAM, GROUP]);
    let prefix = format!("{pid}-");
    let mut n = 0;
    if let Some(consumers) = reply.items().get(3) {
        for c in consumers.items() {
            let name = c.items()[0].as_str().expect("a consumer name");
            if name.starts_with(&prefix) {
                n += c.items()[1].as_int().expect("a count");
            }
        }
    }
    n
}

fn xlen(server: &RedisServer) -> i64 {
    server
        .query(&["XLEN", STREAM])
        .as_int()
        .expect("XLEN answers a number")
}

/// How the frozen process loses its entries.
struct Scenario {
    /// The lease of a claim: once it runs out unrenewed (its process frozen), another
    /// consumer's sweep (every half of it) takes the entry over.
    visibility: Duration,
    /// `Some`: both processes beat this often and `b` is a `Host` (the janitor), which
    /// evicts `a` three beats into its pause, its entries claimable at once.
    heartbeat: Option<Duration>,
}

impl Scenario {
    fn worker_args(
        &self,
        server: &RedisServer,
        (batch, workers): (usize, usize),
        host: bool,
    ) -> Vec<String> {
        let mut args = vec![
            "worker".into(),
            server.url(),
            self.visibility.as_millis().to_string(),
            batch.to_string(),
            workers.to_string(),
            WORK.as_micros().to_string(),
        ];
        if let Some(beat) = self.heartbeat {
            args.push(beat.as_millis().to_string());
            if host {
                args.push("host".into());
            }
        }
        args
    }
}

/// Waits for `want` from child `from`, recording every `h <id>` line meanwhile in `handled`
/// and every `sent <id>` in `sent`.
struct Lines {
    events: mpsc::Receiver<(usize, String)>,
    handled: Vec<Vec<String>>,
    sent: HashSet<String>,
    sender_done: bool,
}

impl Lines {
    /// Reads one line (up to 50 ms); `false` if none came.
    fn step(&mut self, deadline: Instant) -> Option<(usize, String)> {
        assert!(Instant::now() < deadline, "not finished in time");
        match self.events.recv_timeout(Duration::from_millis(50)) {
            Ok((i, line)) => {
                if let Some(id) = line.strip_prefix("h ") {
                    self.handled[i].push(id.to_owned());
                } else if let Some(id) = line.strip_prefix("sent ") {
                    self.sent.insert(id.to_owned());
                } else if line == "done" {
                    self.sender_done = true;
                }
                Some((i, line))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("every child's output ended"),
        }
    }

    fn wait_line(&mut self, from: usize, want: &str, deadline: Instant) {
        loop {
            if let Some((i, line)) = self.step(deadline) {
                if i == from && line == want {
                    return;
                }
            }
        }
    }

    fn handled_ids(&self) -> HashSet<&str> {
        self.handled.iter().flatten().map(String::as_str).collect()
    }
}

#[test]
fn a_worker_paused_past_its_lease_does_not_redo_what_was_taken_over() {
    // Short, so the pause outlasts it quickly.
    run(&Scenario {
        visibility: Duration::from_millis(1500),
        heartbeat: None,
    });
}

#[test]
fn a_worker_paused_past_three_heartbeats_does_not_redo_what_the_janitor_released() {
    // The default, longer than the pause: the entries move because the janitor evicted `a`
    // (its claims' leases have not run half their time when it resumes), and `b` takes them
    // with its first sweep, half of it after it started.
    run(&Scenario {
        visibility: Duration::from_secs(30),
        heartbeat: Some(Duration::from_millis(250)),
    });
}

/// Frozen, then resumed, as the module docs say; panics if a message was handled twice
/// beyond the bound.
fn run(scenario: &Scenario) {
    const A: usize = 0;
    const B: usize = 1;
    const SENDER: usize = 2;
    let server = RedisServer::start();
    let deadline = Instant::now() + Duration::from_secs(90);
    let (tx, events) = mpsc::channel();
    let mut lines = Lines {
        events,
        handled: vec![Vec::new(); 2],
        sent: HashSet::new(),
        sender_done: false,
    };
    let mut a = start_node(
        A,
        &scenario.worker_args(&server, (A_BATCH, A_WORKERS), false),
        &tx,
    );
    lines.wait_line(A, "ready", deadline);
    let mut b = start_node(B, &scenario.worker_args(&server, (B_BATCH, 4), true), &tx);
    lines.wait_line(B, "ready", deadline);
    let _sender = start_node(
        SENDER,
        &[
            "sender".into(),
            server.url(),
            MESSAGES.to_string(),
            "4".into(),
        ],
        &tx,
    );
    drop(tx);

    // Freeze `a` once everything is sent and it is under way.
    while !(lines.sender_done && lines.handled[A].len() >= 5) {
        lines.step(deadline);
    }
    a.signal("-STOP");
    let frozen_at = Instant::now();
    let handled_before_pause = lines.handled[A].len();
    let held_at_pause = pending_of(&server, a.pid());
    // Frozen past its lease, until `b` took over all it held. Redis offers nothing to wait
    // on: its pending list is looked at while the lines are read.
    while frozen_at.elapsed() < PAUSE || pending_of(&server, a.pid()) > 0 {
        lines.step(deadline);
    }
    a.signal("-CONT");
    let paused_for = frozen_at.elapsed();

    // Every message handled and acked, then both processes settled all they hold.
    loop {
        let all = lines.sent.len() == MESSAGES && {
            let handled = lines.handled_ids();
            lines.sent.iter().all(|id| handled.contains(id.as_str()))
        };
        if all && xlen(&server) == 0 {
            break;
        }
        lines.step(deadline);
    }
    a.say("idle");
    lines.wait_line(A, "idle", deadline);
    b.say("idle");
    lines.wait_line(B, "idle", deadline);

    let mut times: HashMap<&str, usize> = HashMap::new();
    for id in lines.handled.iter().flatten() {
        *times.entry(id.as_str()).or_default() += 1;
    }
    let duplicates: usize = times.values().map(|n| n - 1).sum();
    let after_resume = lines.handled[A].len() - handled_before_pause;
    println!(
        "held by a when frozen: {held_at_pause}; frozen for {paused_for:?}; handled by a \
         after it resumed: {after_resume}; duplicates: {duplicates}"
    );
    assert_eq!(times.len(), MESSAGES, "every message handled, nothing else");
    assert!(
        held_at_pause > 2 * A_WORKERS as i64,
        "`a` held a backlog when frozen ({held_at_pause}), or the test shows nothing"
    );
    assert!(
        duplicates <= A_WORKERS,
        "{duplicates} messages handled twice: `a` ran handlers on entries `b` had taken over \
         while it was frozen (at most {A_WORKERS}, the handlers already running, may)"
    );
}
