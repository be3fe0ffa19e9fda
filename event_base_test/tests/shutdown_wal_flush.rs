//! A failed final WAL flush is not a clean shutdown: the report carries the error and says
//! the bus is not drained, since a completion that never reached the disk brings its message
//! back at the next start. `Drain`, which promises a clean end, returns it as an error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use event_base::backend::{Wal, WalCommit, WalRecord, WalStats};
use event_base::{
    async_trait, Ack, DeadLetterMessage, DeadReason, EMessage, MemoryWal, ShutdownStrategy,
    WalError,
};
use event_base_test::Probe;

/// A `MemoryWal` whose `flush` fails once `broken` is set.
struct FlushFails {
    inner: MemoryWal,
    broken: Arc<AtomicBool>,
}

#[async_trait]
impl Wal for FlushFails {
    fn append(&self, m: &Arc<EMessage>) -> Result<WalCommit, WalError> {
        self.inner.append(m)
    }
    fn begin(&self, id: &str) -> Result<bool, WalError> {
        self.inner.begin(id)
    }
    fn complete(&self, id: &str) -> Result<(), WalError> {
        self.inner.complete(id)
    }
    fn append_unique(&self, m: &Arc<EMessage>) -> Result<Option<WalCommit>, WalError> {
        self.inner.append_unique(m)
    }
    fn retry(&self, m: &Arc<EMessage>) -> Result<(), WalError> {
        self.inner.retry(m)
    }
    fn fail(&self, m: &Arc<EMessage>, r: &DeadReason, h: &[String]) -> Result<(), WalError> {
        self.inner.fail(m, r, h)
    }
    fn cancel(&self, id: &str) -> Result<Option<WalCommit>, WalError> {
        self.inner.cancel(id)
    }
    async fn pending(&self) -> Result<Vec<WalRecord>, WalError> {
        self.inner.pending().await
    }
    async fn dead_letters(&self) -> Result<Vec<DeadLetterMessage>, WalError> {
        self.inner.dead_letters().await
    }
    async fn take_dead_letter(&self, id: &str) -> Result<Option<DeadLetterMessage>, WalError> {
        self.inner.take_dead_letter(id).await
    }
    async fn purge_dead_letters(&self) -> Result<usize, WalError> {
        self.inner.purge_dead_letters().await
    }
    async fn flush(&self) -> Result<(), WalError> {
        if self.broken.load(Ordering::SeqCst) {
            return Err(WalError::Closed("test: the disk went away".into()));
        }
        self.inner.flush().await
    }
    fn stats(&self) -> WalStats {
        self.inner.stats()
    }
}

async fn shutdown_with(
    broken: bool,
    strategy: ShutdownStrategy,
) -> Result<event_base::ShutdownReport, event_base::CoreError> {
    let probe = Probe::new();
    let switch = Arc::new(AtomicBool::new(false));
    let bus = event_base::builder()
        .wal(FlushFails {
            inner: MemoryWal::new(),
            broken: switch.clone(),
        })
        .handler(probe.handler("jobs", "jobs", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    bus.send("jobs", b"x".to_vec()).await.unwrap();
    bus.wait_idle(event_base_test::WAIT).await.unwrap();
    switch.store(broken, Ordering::SeqCst);
    bus.shutdown(strategy).await
}

fn drain() -> ShutdownStrategy {
    ShutdownStrategy::Drain {
        timeout: Duration::from_secs(5),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_final_flush_is_in_the_report_and_not_drained() {
    let report = shutdown_with(true, ShutdownStrategy::Force).await.unwrap();
    let error = report.wal_flush_error.as_deref().unwrap_or_default();
    assert!(error.contains("the disk went away"), "{report:?}");
    assert!(!report.drained, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_final_flush_breaks_drains_promise_with_an_error_carrying_the_report() {
    let err = shutdown_with(true, drain()).await.unwrap_err();
    match err {
        event_base::CoreError::ShutdownFlush { error, report } => {
            assert!(error.contains("the disk went away"), "{error}");
            assert_eq!(report.wal_flush_error.as_deref(), Some(error.as_str()));
            assert!(!report.drained);
        }
        other => panic!("expected ShutdownFlush, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_final_flush_reports_no_error() {
    let report = shutdown_with(false, drain()).await.unwrap();
    assert_eq!(report.wal_flush_error, None);
    assert!(report.drained, "{report:?}");
}
