//! `wait_idle` fails with a matchable `IdleTimeout` (how many are still in flight) while a
//! handler is stuck, and succeeds once it finishes.

use std::time::Duration;

use event_base::{Ack, CoreError};
use event_base_test::{Gate, Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_idle_times_out_while_a_handler_is_stuck() {
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = event_base::builder()
        .handler(probe.gated_handler("stuck", "stuck", &gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    bus.send("stuck", b"x".to_vec()).await.unwrap();
    probe.wait_for(1, WAIT).await;

    let err = bus.wait_idle(Duration::from_millis(100)).await.unwrap_err();
    match &err {
        CoreError::IdleTimeout {
            in_flight,
            shared,
            after,
        } => {
            assert_eq!(*after, Duration::from_millis(100));
            assert_eq!(*in_flight, 1);
            assert_eq!(*shared, None, "no shared queue backend");
        }
        other => panic!("expected IdleTimeout, got {other:?}"),
    }
    assert!(
        err.to_string().contains("1 messages were still in flight"),
        "{err}"
    );

    gate.open();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(bus.in_flight(), 0);
}
