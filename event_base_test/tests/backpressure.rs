//! Backpressure through the whole bus, on every in-memory queue backend: with the handler
//! held, a bounded queue fills up, `try_send` is refused, and a plain `send` waits (it does
//! not grow a buffer) until the handler frees room; then it is delivered, last.

use event_base::backend::QueueFactory;
use event_base::{
    Ack, CoreError, EMessage, FlumeQueueFactory, MemoryWal, MpmcQueueFactory, SendOptions,
};
use event_base_test::conformance::finishes_at_once;
use event_base_test::{Gate, Probe, WAIT};

const BOUND: usize = 4;

/// The queue (`BOUND`), the shared work channel, the router's hand and the worker's: a held
/// bus accepts no more than that.
fn within_bound(accepted: &[String]) {
    assert!(
        accepted.len() <= BOUND + 3,
        "a held bus bounded to {BOUND} accepted {} messages",
        accepted.len()
    );
}

async fn a_full_bus_makes_a_sender_wait(queue: impl QueueFactory) {
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = event_base::EventBus::builder()
        .wal(MemoryWal::new())
        .queue(queue)
        .batch_size(1)
        .handler(probe.gated_handler("slow", "slow", &gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();

    // Fill the pipeline until `try_send` is refused, then make a plain send. The router may
    // still be moving a message down the pipeline, which frees a place: then the send goes
    // through at once and the bus is filled again, until a send finds no room at all.
    let mut accepted = Vec::new();
    let (mut blocked, last_id) = loop {
        loop {
            let msg = EMessage::standard("slow", b"fill".to_vec());
            match bus
                .send_with("slow", msg, SendOptions::new().try_send())
                .await
            {
                Ok(id) => accepted.push(id.to_string()),
                Err(CoreError::QueueFull { topic }) => {
                    assert_eq!(topic, "slow");
                    break;
                }
                Err(e) => panic!("unexpected {e:?}"),
            }
            within_bound(&accepted);
        }
        let last = EMessage::standard("slow", b"last".to_vec());
        let id = last.id.clone();
        let mut send = Box::pin(bus.send("slow", last));
        match finishes_at_once(&mut send).await {
            // A send into a full bus waits.
            None => break (send, id),
            Some(done) => {
                done.unwrap();
                accepted.push(id);
                within_bound(&accepted);
            }
        }
    };

    gate.open();
    let id = tokio::time::timeout(WAIT, &mut blocked)
        .await
        .expect("the send finished once the handler made room")
        .unwrap();
    assert_eq!(id, last_id);
    bus.wait_idle(WAIT).await.unwrap();
    let delivered: Vec<String> = probe.seen().into_iter().map(|s| s.id).collect();
    let mut expected = accepted;
    expected.push(last_id);
    assert_eq!(delivered, expected, "all of them, once, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flume() {
    a_full_bus_makes_a_sender_wait(FlumeQueueFactory::bounded(BOUND)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kanal() {
    a_full_bus_makes_a_sender_wait(MpmcQueueFactory::bounded(BOUND)).await;
}
