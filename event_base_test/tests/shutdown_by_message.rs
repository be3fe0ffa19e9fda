//! A `ShutdownCommand` sent on `_system.shutdown` shuts the system down, and every worker's
//! outcome is announced on `_system.shutdown_ack`.

use std::collections::HashSet;
use std::time::Duration;

use event_base::constant::{SHUTDOWN, SHUTDOWN_ACK};
use event_base::{Ack, EMessage, ShutdownAck, ShutdownCommand, ShutdownStrategy, WorkerOutcome};
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_message_stops_the_system_and_workers_answer() {
    let probe = Probe::new();
    let acks = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("orders", "orders", |_| Ack::Ack).workers(3))
        .handler(probe.handler("mail", "mail", |_| Ack::Ack))
        .handler(acks.handler("acks", SHUTDOWN_ACK, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let cmd = ShutdownCommand {
        strategy: ShutdownStrategy::Drain {
            timeout: Duration::from_secs(5),
        },
        reason: Some("test".into()),
    };
    let msg = EMessage::json(SHUTDOWN, &cmd).unwrap();
    bus.send(SHUTDOWN, msg).await.unwrap();

    // Every user worker answers once.
    acks.wait_for(4, WAIT).await;
    let answered: HashSet<String> = acks
        .seen()
        .iter()
        .map(|s| {
            let ack: ShutdownAck = EMessage::standard("x", s.payload.clone())
                .json_payload()
                .unwrap();
            assert_eq!(ack.outcome, WorkerOutcome::Completed);
            ack.worker
        })
        .collect();
    let expected: HashSet<String> = ["orders-0", "orders-1", "orders-2", "mail-0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(answered, expected);
    // And the system is down.
    let refused = tokio::time::timeout(WAIT, async {
        loop {
            if bus.send("orders", b"x".to_vec()).await.is_err() {
                break;
            }
            tokio::task::yield_now().await;
        }
    });
    refused.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_shutdown_command_is_a_dead_letter_not_a_panic() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("orders", "orders", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    bus.send(SHUTDOWN, b"{not json".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let dead = bus.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert!(format!("{}", dead[0].reason).contains("invalid shutdown command"));
    assert!(bus.is_accepting(), "the system keeps running");
}
