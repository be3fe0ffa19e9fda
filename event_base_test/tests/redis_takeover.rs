//! Entries claimed by a process that dies are taken over by another one: a child process
//! sends messages to Redis queues and claims them with a handler that never finishes, and
//! is killed with SIGKILL mid-message; a bus in this process then delivers every one of them
//! (`XAUTOCLAIM` once their lease ran out), and acks them.
//!
//! And the other side of the lease: a handler that runs longer than the visibility timeout
//! keeps its entry (its consumer renews the lease), so a second bus does not take it over.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use event_base::{Ack, EventBus, HandlerSpec, RedisQueueFactory};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Gate, Probe, WAIT};

const VISIBILITY: Duration = Duration::from_millis(600);

async fn bus(server: &RedisServer, handler: HandlerSpec) -> EventBus {
    let queue = RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .visibility_timeout(VISIBILITY);
    EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(handler)
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_consumers_entries_are_delivered_by_another_process() {
    const N: usize = 20;
    let server = RedisServer::start();
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_redis_child"))
            .args([
                server.url(),
                N.to_string(),
                VISIBILITY.as_millis().to_string(),
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start redis_child"),
    );
    let out = BufReader::new(child.0.stdout.take().expect("piped"));
    // The child's output: every accepted id, the flush, and the handler starting one.
    let reader = tokio::task::spawn_blocking(move || {
        let mut sent = Vec::new();
        let mut started = None;
        let mut flushed = false;
        for line in out.lines() {
            let Ok(line) = line else { break };
            if let Some(id) = line.strip_prefix("sent ") {
                sent.push(id.to_owned());
            } else if line == "flushed" {
                flushed = true;
            } else if let Some(id) = line.strip_prefix("started ") {
                started = Some(id.to_owned());
            }
            if flushed && started.is_some() {
                break;
            }
        }
        (sent, started)
    });
    let (sent, started) = tokio::time::timeout(WAIT, reader)
        .await
        .expect("the child sent its messages and began one")
        .expect("reader thread");
    let started = started.expect("the child's handler began a message");
    assert_eq!(sent.len(), N);
    // Mid-message: its handler holds one, its router has claimed the rest.
    child.0.kill().expect("SIGKILL the child");
    child.0.wait().expect("reap the child");

    let probe = Probe::new();
    let bus = bus(&server, probe.handler("work", "jobs", |_| Ack::Ack)).await;
    probe.wait_for(N, WAIT).await;
    let seen: HashSet<String> = probe.seen().into_iter().map(|s| s.id).collect();
    let want: HashSet<String> = sent.into_iter().collect();
    assert_eq!(seen, want, "every message the child accepted");
    assert!(seen.contains(&started), "the one it was handling too");
    assert_eq!(probe.count(), N, "each once: the child finished none");
    // Acked by the new owner: the stream ends empty.
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.command(&["XLEN", "eb:{jobs}:s:work"]) != ":0" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "entries left in the stream"
        );
        // Redis offers nothing to wait on.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(bus);
}

/// Kills the child process if the test ends early.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_longer_than_the_visibility_timeout_keeps_its_entry() {
    let server = RedisServer::start();
    let gate = Gate::new();
    let first = Probe::new();
    let a = bus(
        &server,
        first.gated_handler("work", "jobs", &gate, |_| Ack::Ack),
    )
    .await;
    let id = a.send("jobs", b"long".to_vec()).await.unwrap();
    first.wait_for(1, WAIT).await;
    // A second process's bus on the same subscription, looking for stale entries.
    let second = Probe::new();
    let b = bus(&server, second.handler("work", "jobs", |_| Ack::Ack)).await;
    // The property is about time passing: three visibility timeouts, in which `b` sweeps
    // several times. The lease is renewed meanwhile, so nothing is stale.
    tokio::time::sleep(VISIBILITY * 3).await;
    assert_eq!(
        second.count(),
        0,
        "the entry was taken over while its handler ran"
    );
    gate.open();
    a.wait_idle(WAIT).await.unwrap();
    assert_eq!(first.count_of(&id), 1);
    assert_eq!(second.count(), 0);
    drop(b);
}
