//! A handler's outbox: messages a handler with `outbox` sends while it runs are held and
//! released only with its `Ack`, in the same WAL record as its completion; on `NoAck`,
//! `Dead`, a panic or a timeout they are discarded, so a retried handler never sends twice.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use event_base::backend::Wal;
use event_base::{
    handler_fn, Ack, EMessage, EventBus, HandlerSpec, PersistentWal, ShutdownStrategy,
};
use event_base_test::{Gate, Probe, WAIT};

/// An `orders` handler with an outbox that sends two `mail` messages per delivery, then
/// answers what `answer` says for that attempt (1-based).
fn sender(
    answer: impl Fn(u32) -> Ack + Send + Sync + 'static,
    runs: Arc<AtomicU32>,
) -> HandlerSpec {
    let answer = Arc::new(answer);
    HandlerSpec::new(
        "bill",
        "orders",
        handler_fn(move |msg: EMessage| {
            let (answer, runs) = (answer.clone(), runs.clone());
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                for n in 0..2 {
                    let body = format!("{}:{n}:attempt{}", msg.id, msg.attempts);
                    event_base::send_msg!("mail", body.into_bytes())
                        .await
                        .expect("a held send answers Ok");
                }
                answer(msg.attempts)
            }
        }),
    )
    .outbox(true)
}

async fn start(sender: HandlerSpec, probe: &Arc<Probe>) -> EventBus {
    event_base::builder()
        .handler(sender)
        .handler(probe.handler("mail", "mail", |_| Ack::Ack))
        .build()
        .await
        .unwrap()
}

fn mail_of(probe: &Probe) -> Vec<String> {
    let mut v: Vec<String> = probe
        .seen()
        .into_iter()
        .filter(|s| s.label == "mail")
        .map(|s| String::from_utf8_lossy(&s.payload).into_owned())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_releases_what_the_handler_sent() {
    let probe = Probe::new();
    let runs = Arc::new(AtomicU32::new(0));
    let bus = start(sender(|_| Ack::Ack, runs.clone()), &probe).await;
    let id = bus.send("orders", b"o".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        mail_of(&probe),
        [format!("{id}:0:attempt1"), format!("{id}:1:attempt1")]
    );
    assert_eq!(bus.wal_stats().live, 0);
    assert_eq!(bus.metrics().topic("mail").unwrap().sent, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_handler_sends_only_from_the_run_that_acked() {
    let probe = Probe::new();
    let runs = Arc::new(AtomicU32::new(0));
    let answer = |attempt: u32| {
        if attempt < 3 {
            Ack::NoAck {
                retry_after: None,
                max_retries: 5,
            }
        } else {
            Ack::Ack
        }
    };
    let bus = start(sender(answer, runs.clone()), &probe).await;
    let id = bus.send("orders", b"o".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 3, "two NoAcks, then the Ack");
    assert_eq!(
        mail_of(&probe),
        [format!("{id}:0:attempt3"), format!("{id}:1:attempt3")],
        "the NoAck runs' sends were discarded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_panic_and_timeout_discard_the_outbox() {
    // Dead at once.
    let probe = Probe::new();
    let bus = start(sender(|_| Ack::dead(), Arc::new(AtomicU32::new(0))), &probe).await;
    bus.send("orders", b"o".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert!(mail_of(&probe).is_empty(), "Dead releases nothing");
    assert_eq!(bus.dead_letters().await.unwrap().len(), 1);

    // A panic on every attempt: retried, then dead; nothing released.
    let probe = Probe::new();
    let panics = sender(|_| panic!("boom"), Arc::new(AtomicU32::new(0))).retries(1);
    let bus = start(panics, &probe).await;
    bus.send("orders", b"o".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert!(mail_of(&probe).is_empty(), "a panic releases nothing");

    // A timeout: the handler sends, then hangs past its limit.
    let probe = Probe::new();
    let hangs = HandlerSpec::new(
        "bill",
        "orders",
        handler_fn(|_msg: EMessage| async {
            event_base::send_msg!("mail", b"x".to_vec()).await.unwrap();
            std::future::pending::<Ack>().await
        }),
    )
    .outbox(true)
    .timeout(Duration::from_millis(50))
    .retries(0);
    let bus = start(hangs, &probe).await;
    bus.send("orders", b"o".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert!(mail_of(&probe).is_empty(), "a timeout releases nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_outbox_sends_go_out_at_once_even_if_the_handler_then_fails() {
    let probe = Probe::new();
    let plain = HandlerSpec::new(
        "bill",
        "orders",
        handler_fn(|_msg: EMessage| async {
            event_base::send_msg!("mail", b"x".to_vec()).await.unwrap();
            Ack::dead()
        }),
    );
    let bus = start(plain, &probe).await;
    bus.send("orders", b"o".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        mail_of(&probe).len(),
        1,
        "the control case: no outbox, no holding"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_completion_and_the_released_messages_are_one_record_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Gate::new(); // the mail handler never finishes: its messages stay pending
    let probe = Probe::new();
    let id = {
        let bus = event_base::builder()
            .wal(PersistentWal::open(dir.path()).unwrap())
            .handler(sender(|_| Ack::Ack, Arc::new(AtomicU32::new(0))))
            .handler(probe.gated_handler("mail", "mail", &gate, |_| Ack::Ack))
            .build()
            .await
            .unwrap();
        let id = bus.send("orders", b"o".to_vec()).await.unwrap();
        probe.wait_for(1, WAIT).await; // released: one mail message is in hand
        bus.wal().flush().await.unwrap();
        bus.shutdown(ShutdownStrategy::Force).await.unwrap();
        id
    };
    let wal = PersistentWal::open(dir.path()).unwrap();
    let pending = wal.pending().await.unwrap();
    let mut topics: Vec<&str> = pending.iter().map(|r| r.message.topic.as_str()).collect();
    topics.sort();
    assert_eq!(
        topics,
        ["mail", "mail"],
        "the order completed, both its messages pending"
    );
    assert!(pending
        .iter()
        .all(|r| r.message.metadata.causation_id.as_deref() == Some(id.as_str())));
}

/// The `#[handler]` flag sets the same outbox.
#[event_base::handler(topic = "outbox.macro", outbox)]
async fn macro_sender(_msg: &EMessage) -> Ack {
    event_base::send_msg!("mail", b"from the macro".to_vec())
        .await
        .expect("held");
    Ack::dead() // not an Ack: what it sent is discarded
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_macro_takes_outbox_as_a_flag() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .with_registered_handlers()
        .handler(probe.handler("mail", "mail", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    bus.send("outbox.macro", b"o".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert!(
        mail_of(&probe).is_empty(),
        "held, then discarded with the Dead"
    );
    assert_eq!(bus.dead_letters().await.unwrap().len(), 1);
}
