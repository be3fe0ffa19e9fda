//! Conformance suites: the same cases run over every backend of a contract.
//!
//! - [`wal`]: the [`Wal`](event_base::backend::Wal) contract, over a [`wal::WalBackend`]
//!   (all of it for a WAL that keeps records of its own; the dead letters for a view of the
//!   queues' entries such as `RedisWal`, [`wal_view_conformance!`](crate::wal_view_conformance),
//!   `tests/redis_wal_conformance.rs`).
//! - [`queue`]: the [`QueueFactory`](event_base::backend::QueueFactory) contract, over a function
//!   that makes a factory with a given bound.
//! - [`bus`]: the bus's behaviour (delivery modes, retries, dead letters, delayed delivery,
//!   backpressure, `Drain`) over a [`bus::BusBackend`] that builds an
//!   [`EventBus`](event_base::EventBus) on its WAL and queues.
//!
//! Each case is a public `async fn` that panics on the first broken promise, so it can be
//! called from any test. The [`wal_conformance!`](crate::wal_conformance),
//! [`queue_conformance!`](crate::queue_conformance) and
//! [`bus_conformance!`](crate::bus_conformance) macros turn a list of backends into one
//! `#[tokio::test]` per case and backend (`tests/wal_conformance.rs`,
//! `tests/queue_conformance.rs`, `tests/bus_conformance.rs`): a new backend plugs in with one
//! line there. A new case is
//! a function here plus its name in the macro's list.

pub mod bus;
pub mod queue;
pub mod wal;

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

/// Polls `fut` once and says whether it finished, leaving it to be awaited afterwards.
///
/// How a case shows that something *waits* without sleeping: a future that is still pending
/// after a poll has not happened yet, whatever the scheduler does.
pub async fn finishes_at_once<F: Future + ?Sized>(fut: &mut Pin<Box<F>>) -> Option<F::Output> {
    std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
        Poll::Ready(v) => Poll::Ready(Some(v)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

/// One module per backend with one `#[tokio::test]` per case of `suite`; the expansion of
/// [`wal_conformance!`](crate::wal_conformance),
/// [`queue_conformance!`](crate::queue_conformance) and
/// [`bus_conformance!`](crate::bus_conformance).
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($suite:ident, $backend:ident => $make:expr; $($case:ident),* $(,)?) => {
        mod $backend {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let backend = $make;
                    $crate::conformance::$suite::$case(&backend).await;
                }
            )*
        }
    };
}
