//! [`Failure`]: the one place a `PersistentWal` records that a write or sync of its files
//! failed, after which it accepts nothing more.
//!
//! Why it never goes on: a write cut short by a full disk leaves part of a record in the
//! file, and on Linux a failed `fdatasync` drops the dirty pages it could not write (the
//! next `fdatasync` succeeds without them). Records written later and acknowledged would
//! then sit behind bytes that never reach the disk, and a reopen would find damage where it
//! should find a torn tail. Stopping at the first failure keeps the log what recovery
//! expects: whole synced records, then at most a torn tail.
//!
//! The writer thread and the sync thread set it; the `PersistentWal` reads it on every send
//! (one atomic load while nothing failed) to refuse new records with
//! [`WalError::Failed`], and for `WalStats::failed` and `Wal::failure`.
//!
//! What it may import: the standard library, the core's `WalError`.

use std::error::Error;
use std::sync::OnceLock;

use event_base_core::WalError;

/// Set once, at the first failed write or sync; never cleared (a restart recovers).
#[derive(Debug, Default)]
pub(crate) struct Failure {
    cause: OnceLock<String>,
    /// Wakes those waiting for the failure (health checks).
    set: tokio::sync::Notify,
}

impl Failure {
    /// Records `error` as the cause unless a failure is recorded already (the first one is
    /// the cause; what fails after it follows from it), and logs it once.
    pub(crate) fn set(&self, what: &str, error: &dyn Error) {
        let mut first = false;
        self.cause.get_or_init(|| {
            first = true;
            describe(what, error)
        });
        if first {
            self.set.notify_waiters();
            tracing::error!(target: event_base_core::constant::target::WAL, cause = %self.cause().unwrap_or_default(), "the WAL failed and accepts nothing more; free disk space or repair the device, then restart the process (every acknowledged message is recovered from the files)");
        }
    }

    /// Waits until something has failed; its cause.
    pub(crate) async fn wait(&self) -> String {
        loop {
            let mut set = std::pin::pin!(self.set.notified());
            // Registered before looking, so a failure between the look and the wait wakes it.
            set.as_mut().enable();
            if let Some(cause) = self.cause() {
                return cause.to_owned();
            }
            set.await;
        }
    }

    /// Whether a write or sync has failed.
    pub(crate) fn is_set(&self) -> bool {
        self.cause.get().is_some()
    }

    /// What failed, once something has.
    pub(crate) fn cause(&self) -> Option<&str> {
        self.cause.get().map(String::as_str)
    }

    /// The error a refused request gets, once something has failed.
    pub(crate) fn error(&self) -> Option<WalError> {
        self.cause().map(|cause| WalError::Failed {
            cause: cause.to_owned(),
        })
    }
}

/// "`what`: error: its source: …", the whole chain on one line.
fn describe(what: &str, error: &dyn Error) -> String {
    let mut text = format!("{what}: {error}");
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_is_the_cause_and_names_the_whole_chain() {
        let failure = Failure::default();
        assert!(!failure.is_set() && failure.error().is_none());
        let full = WalError::Io {
            path: "/wal/00000003.log".into(),
            source: std::io::Error::from_raw_os_error(28),
        };
        failure.set("write", &full);
        failure.set("sync", &std::io::Error::other("later"));
        let cause = failure.cause().unwrap();
        assert!(
            cause.starts_with("write: WAL I/O error on /wal/00000003.log: "),
            "{cause}"
        );
        assert!(!cause.contains("later"), "{cause}");
        match failure.error() {
            Some(WalError::Failed { cause: c }) => assert_eq!(c, cause),
            other => panic!("{other:?}"),
        }
        let text = failure.error().unwrap().to_string();
        assert!(text.contains("free disk space"), "{text}");
    }
}
