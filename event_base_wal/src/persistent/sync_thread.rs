//! [`SyncThread`]: the thread that runs the writer's `fdatasync`s for waiting senders, so the
//! writer gathers and writes the next batch while the disk syncs the last one.
//!
//! Without it one thread alternates: it syncs (the disk busy, the senders all waiting), then
//! answers, then waits while the answered senders produce their next records (the CPUs busy,
//! the disk idle). With it the two overlap: while batch N syncs, the writer takes in the
//! records that arrive and writes them as batch N+1 the moment sync N returns, so many
//! senders settle into groups that take turns at the disk instead of queueing behind it.
//!
//! The order that keeps `SyncPolicy::Always` durable: the writer writes a batch, then hands
//! the sync thread its waiters with a handle on the file; the sync thread's `fdatasync`
//! starts after that write returned, so it covers it and every write before it, and only
//! then are the waiters answered. A batch handed over while another is still waiting to be
//! synced joins it (one sync covers both). A failed sync is final: every waiter after it is
//! answered with an error (the kernel may have dropped the data, see `wal_writer`).
//!
//! A lone sender keeps syncing on the writer thread itself ([`SyncThread::inline`]): a
//! hand-off to another thread would add a wake-up to each of its sends and gain nothing.
//! Off by default (`PersistentWalBuilder::overlap_syncs`): then no thread starts and the
//! writer makes every sync itself, as one thread taking turns.
//!
//! What it may import: the file layer (`fs`), the group-commit rule, the standard library.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use event_base_core::backend::WalCommitter;
use event_base_core::WalError;

use super::failure::Failure;
use super::fs::WalSyncer;
use super::group_commit::GroupCommit;

/// A sync asked for: the file, and who waits for it.
struct Request {
    file: Arc<dyn WalSyncer>,
    path: PathBuf,
    waiters: Vec<WalCommitter>,
}

#[derive(Default)]
struct State {
    /// Handed over and not started yet (at most one: later batches join it).
    next: Option<Request>,
    /// Whether a sync is running.
    busy: bool,
    /// The writer is done: finish what was handed over, then stop.
    closing: bool,
    /// The size and time of the last group synced, for the writer's gathering wait.
    group: GroupCommit,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the sync thread: a request, or closing.
    work: Condvar,
    /// Wakes the writer: a sync ended.
    done: Condvar,
    /// `fdatasync` calls made (what `WalStats::syncs` reports; shared with the writer).
    syncs: Arc<AtomicU64>,
    /// The WAL's failure (shared with the writer): set by a failed sync here, or by the
    /// writer; from then on nothing is acknowledged.
    failure: Arc<Failure>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The sync thread of one writer; dropping it finishes the syncs handed over and joins it.
pub(crate) struct SyncThread {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl SyncThread {
    /// Starts the thread; `syncs` counts the syncs it makes. With `overlap` false no thread
    /// starts and every sync is made inline (`PersistentWalBuilder::overlap_syncs`).
    pub(crate) fn start(
        syncs: Arc<AtomicU64>,
        overlap: bool,
        failure: Arc<Failure>,
    ) -> std::io::Result<SyncThread> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            done: Condvar::new(),
            syncs,
            failure,
        });
        let thread = if overlap {
            let run = shared.clone();
            Some(
                std::thread::Builder::new()
                    .name("event_base-wal-sync".into())
                    .spawn(move || run_syncs(&run))?,
            )
        } else {
            None
        };
        Ok(SyncThread { shared, thread })
    }

    /// Whether a batch with `waiters` waiting should be synced on the writer thread: nothing
    /// is in flight here and the last group was a lone sender too, so no one would join.
    pub(crate) fn inline(&self, waiters: usize) -> bool {
        if self.thread.is_none() {
            return true;
        }
        let st = self.shared.lock();
        waiters <= 1 && !st.busy && st.next.is_none() && st.group.last_group() <= 1
    }

    /// Records a sync the writer made itself for `waiters` waiters.
    pub(crate) fn synced_inline(&self, waiters: usize, took: Duration) {
        self.shared.lock().group.synced(waiters, took);
    }

    /// How many waiters to gather before handing a batch over, and until when (see
    /// [`GroupCommit`]); `None` while a sync runs (the batch waits for it in
    /// [`wait_idle`](Self::wait_idle) anyway) or when `have` needs no company.
    pub(crate) fn wait_for(&self, have: usize) -> Option<(usize, Instant)> {
        let st = self.shared.lock();
        if st.busy || st.next.is_some() {
            return None;
        }
        st.group.wait_for(have)
    }

    /// Whether a sync is running or waiting to run.
    pub(crate) fn busy(&self) -> bool {
        let st = self.shared.lock();
        st.busy || st.next.is_some()
    }

    /// Blocks until no sync runs or waits (or one failed): the moment to write the next
    /// batch, with everything that arrived meanwhile.
    pub(crate) fn wait_idle(&self) {
        let mut st = self.shared.lock();
        while (st.busy || st.next.is_some()) && !self.shared.failure.is_set() {
            st = self
                .shared
                .done
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Hands over the waiters of a batch already written to `file`: they are answered once
    /// a sync that started after this call returns. Joins a request not started yet.
    pub(crate) fn submit(
        &self,
        file: Arc<dyn WalSyncer>,
        path: PathBuf,
        mut waiters: Vec<WalCommitter>,
    ) {
        if self.shared.failure.is_set() {
            for w in waiters {
                w.answer(Err(refusal(&self.shared.failure)));
            }
            return;
        }
        let mut st = self.shared.lock();
        match st.next.as_mut() {
            // The newer file: a batch on the older one was synced when it was sealed.
            Some(next) => {
                next.waiters.append(&mut waiters);
                next.file = file;
                next.path = path;
            }
            None => {
                st.next = Some(Request {
                    file,
                    path,
                    waiters,
                })
            }
        }
        drop(st);
        self.shared.work.notify_one();
    }
}

impl Drop for SyncThread {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.work.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run_syncs(shared: &Shared) {
    loop {
        let request = {
            let mut st = shared.lock();
            loop {
                if let Some(r) = st.next.take() {
                    st.busy = true;
                    break r;
                }
                if st.closing {
                    return;
                }
                st = shared.work.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
        };
        let started = Instant::now();
        if !shared.failure.is_set() {
            match request.file.sync_data() {
                Ok(()) => {
                    shared.syncs.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    let what = format!("syncing {}", request.path.display());
                    shared.failure.set(&what, &e);
                }
            }
        }
        {
            let mut st = shared.lock();
            st.busy = false;
            st.group.synced(request.waiters.len(), started.elapsed());
        }
        // The writer may write the next batch while these are answered.
        shared.done.notify_all();
        let failed = shared.failure.is_set();
        for w in request.waiters {
            w.answer(if failed {
                Err(refusal(&shared.failure))
            } else {
                Ok(())
            });
        }
    }
}

/// What a waiter gets once the WAL has failed.
fn refusal(failure: &Failure) -> WalError {
    failure
        .error()
        .unwrap_or_else(|| WalError::Closed("the WAL writer has stopped".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use event_base_core::backend::WalCommit;
    use std::sync::atomic::AtomicBool;

    /// A file whose "writes" are a counter: a sync makes durable what was written when it
    /// ran, and fails while `fail` is set.
    #[derive(Default)]
    struct Counted {
        written: AtomicU64,
        durable: AtomicU64,
        fail: AtomicBool,
    }

    impl WalSyncer for Counted {
        fn sync_data(&self) -> std::io::Result<()> {
            if self.fail.load(Ordering::SeqCst) {
                return Err(std::io::Error::other("disk gone"));
            }
            let w = self.written.load(Ordering::SeqCst);
            self.durable.fetch_max(w, Ordering::SeqCst);
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_waiter_is_answered_only_after_a_sync_covers_its_write() {
        let syncs = Arc::new(AtomicU64::new(0));
        let thread = SyncThread::start(syncs.clone(), true, Arc::default()).expect("starts");
        let file = Arc::new(Counted::default());
        for n in 1..=200u64 {
            file.written.store(n, Ordering::SeqCst);
            let (commit, committer) = WalCommit::pending();
            thread.submit(file.clone(), PathBuf::from("f"), vec![committer]);
            commit.wait().await.expect("synced");
            assert!(
                file.durable.load(Ordering::SeqCst) >= n,
                "answered before its sync"
            );
        }
        assert!(syncs.load(Ordering::Relaxed) >= 1);
        thread.wait_idle();
        assert!(!thread.busy());
    }

    /// A file whose first sync blocks until the test lets it go.
    struct Gated {
        entered: Mutex<std::sync::mpsc::Sender<()>>,
        release: Mutex<std::sync::mpsc::Receiver<()>>,
        first: AtomicBool,
    }

    impl WalSyncer for Gated {
        fn sync_data(&self) -> std::io::Result<()> {
            if !self.first.swap(true, Ordering::SeqCst) {
                let _ = self.entered.lock().unwrap().send(());
                let _ = self.release.lock().unwrap().recv();
            }
            Ok(())
        }
    }

    #[tokio::test]
    async fn batches_handed_over_during_a_sync_share_the_next_one() {
        let syncs = Arc::new(AtomicU64::new(0));
        let thread = SyncThread::start(syncs.clone(), true, Arc::default()).expect("starts");
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel();
        let file = Arc::new(Gated {
            entered: Mutex::new(entered_tx),
            release: Mutex::new(release_rx),
            first: AtomicBool::new(false),
        });
        let (first, committer) = WalCommit::pending();
        thread.submit(file.clone(), PathBuf::from("f"), vec![committer]);
        entered.recv().expect("the first sync runs");
        assert!(thread.busy());
        let mut later = Vec::new();
        for _ in 0..63 {
            let (commit, committer) = WalCommit::pending();
            thread.submit(file.clone(), PathBuf::from("f"), vec![committer]);
            later.push(commit);
        }
        release.send(()).expect("released");
        first.wait().await.expect("synced");
        for c in later {
            c.wait().await.expect("synced");
        }
        assert_eq!(
            syncs.load(Ordering::Relaxed),
            2,
            "the 63 batches handed over during the first sync share the second"
        );
    }

    #[tokio::test]
    async fn after_a_failed_sync_nothing_is_acknowledged() {
        let failure = Arc::new(Failure::default());
        let thread =
            SyncThread::start(Arc::new(AtomicU64::new(0)), true, failure.clone()).expect("starts");
        let file = Arc::new(Counted::default());
        file.fail.store(true, Ordering::SeqCst);
        let (commit, committer) = WalCommit::pending();
        thread.submit(file.clone(), PathBuf::from("f"), vec![committer]);
        assert!(commit.wait().await.is_err());
        // The disk answers again, but what the failed sync dropped is gone: still no.
        file.fail.store(false, Ordering::SeqCst);
        thread.wait_idle();
        assert!(failure.cause().is_some_and(|c| c.contains("disk gone")));
        let (commit, committer) = WalCommit::pending();
        thread.submit(file.clone(), PathBuf::from("f"), vec![committer]);
        assert!(commit.wait().await.is_err());
    }

    #[test]
    fn without_overlap_every_sync_is_inline() {
        let thread =
            SyncThread::start(Arc::new(AtomicU64::new(0)), false, Arc::default()).expect("starts");
        thread.synced_inline(64, Duration::from_micros(100));
        assert!(thread.inline(64));
    }

    #[test]
    fn a_lone_sender_syncs_inline() {
        let thread =
            SyncThread::start(Arc::new(AtomicU64::new(0)), true, Arc::default()).expect("starts");
        assert!(thread.inline(1));
        thread.synced_inline(1, Duration::from_micros(100));
        assert!(thread.inline(1));
        assert!(!thread.inline(2), "two waiters: the sync thread");
        thread.synced_inline(8, Duration::from_micros(100));
        assert!(
            !thread.inline(1),
            "after a group of 8, company is likely: hand over"
        );
    }
}
