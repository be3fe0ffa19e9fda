//! Request/reply across two processes on Redis: this test's bus (built with `replies(true)`
//! and a node name of its own) asks topic `ask`, which only a child process
//! (`redis_node replier`) handles; each of 10 concurrent requests gets its own answer, the
//! child's reply travelling back through Redis to this process's reply subscription.

use std::collections::HashSet;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use event_base::prelude::*;
use event_base::RedisQueueFactory;
use event_base_test::child_node::ChildNode;
use event_base_test::redis_server::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_requests_to_another_process_each_get_their_own_answer() {
    let server = RedisServer::start();
    let (tx, rx) = mpsc::channel();
    let mut child = ChildNode::start(
        env!("CARGO_BIN_EXE_redis_node"),
        0,
        &["replier".to_owned(), server.url()],
        &tx,
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let (_, line) = rx.recv_timeout(left).expect("the replier ready in time");
        if line == "ready" {
            break;
        }
    }
    let queue = RedisQueueFactory::connect(&server.url()).await.unwrap();
    let asker = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .node_name("asker")
        .replies(true)
        .build()
        .await
        .unwrap();
    let mut asking = Vec::new();
    for i in 0..10 {
        let asker = asker.clone();
        asking.push(tokio::spawn(async move {
            let question = format!("question {i}");
            let answer = asker
                .request(
                    "ask",
                    EMessage::standard("ask", question.clone().into_bytes()),
                    Duration::from_secs(10),
                )
                .await
                .expect("an answer in time");
            (
                question,
                String::from_utf8(answer.payload.0.to_vec()).unwrap(),
            )
        }));
    }
    let mut answers = HashSet::new();
    for a in asking {
        let (question, answer) = a.await.unwrap();
        assert_eq!(
            answer,
            question.to_uppercase(),
            "each asker gets its own answer"
        );
        answers.insert(answer);
    }
    assert_eq!(answers.len(), 10);
    asker.close().await.unwrap();
    child.kill();
}
