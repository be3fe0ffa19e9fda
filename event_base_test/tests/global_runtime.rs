//! The global bus lives as long as the runtime it was started on: once that runtime is gone,
//! `send_msg!` no longer answers `Ok` for a bus that cannot run, and `start_system!` on a new
//! runtime starts a fresh one (as two `#[tokio::test]`s in one file need).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use event_base::prelude::*;

static HANDLED: AtomicUsize = AtomicUsize::new(0);

#[handler(topic = "runtime.jobs")]
async fn job(_msg: &EMessage) -> Ack {
    HANDLED.fetch_add(1, Ordering::SeqCst);
    Ack::Ack
}

#[test]
fn a_global_bus_ends_with_its_runtime() {
    let first = tokio::runtime::Runtime::new().unwrap();
    first.block_on(async {
        let bus = start_system!().await.unwrap();
        send_msg!("runtime.jobs", "one").await.unwrap();
        bus.wait_idle(Duration::from_secs(5)).await.unwrap();
    });
    assert_eq!(HANDLED.load(Ordering::SeqCst), 1);
    drop(first); // no shutdown: the test's runtime just ends

    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        let bus = start_system!()
            .await
            .expect("a new global bus on the new runtime");
        send_msg!("runtime.jobs", "two").await.unwrap();
        bus.wait_idle(Duration::from_secs(5)).await.unwrap();
        bus.shutdown(ShutdownStrategy::Force).await.unwrap();
    });
    assert_eq!(HANDLED.load(Ordering::SeqCst), 2);
}
