//! The [`Wal`] contract, case by case, for any backend.
//!
//! What is checked is what `event_base_core::wal` promises: the state machine
//! (`append` → `Pending` → `begin` → `Processing` → `complete` → gone; `retry` back to
//! `Pending`; `fail` → a dead letter with its reason; `cancel` only of a `Pending` record),
//! the dead-letter operations, `append_batch`, the counters of `stats`, safety under
//! concurrent callers, and that the state is still there when the backend is opened again.
//!
//! Run them all over a backend with [`wal_conformance!`](crate::wal_conformance).
//!
//! Two kinds of WAL, told apart by [`Wal::keeps_own_records`]:
//!
//! - A WAL that keeps records of its own (`MemoryWal`, `PersistentWal`) passes every case
//!   ([`wal_conformance!`](crate::wal_conformance)).
//! - A WAL that is a view of the queues' entries (`RedisWal`) holds no record states: by
//!   DESIGN §11 "the stream is the log: `RedisWal` is a façade over the queue's keys, not a
//!   second record store", so its `pending` is empty, its `begin` answers `true` and its
//!   `complete`, `retry` and `cancel` change nothing; the queue conformance suite checks
//!   the entries' life instead. It keeps the dead letters, and passes their cases and the
//!   view's own ([`wal_view_conformance!`](crate::wal_view_conformance)). The cases of the
//!   records' states say so at their start ([`keeps_records`]), and the dead-letter cases
//!   check the live records beside the dead letters only on a WAL that keeps them.

use std::collections::HashSet;
use std::sync::Arc;

use event_base::backend::{Wal, WalRecord, WalRecordState};
use event_base::{DeadReason, EMessage};

/// A WAL backend under test.
pub trait WalBackend {
    /// The WAL it opens.
    type Wal: Wal;

    /// Opens the backend's WAL. Called again once every handle to the previous one is
    /// dropped, it opens the same storage, as a restarted process would (for `MemoryWal`,
    /// which survives only within a process, that is the same instance handed to the next
    /// system).
    fn open(&self) -> Self::Wal;
}

/// A standard message on topic `t` whose payload is the one byte `i`.
pub fn msg(i: u8) -> Arc<EMessage> {
    Arc::new(EMessage::standard("t", vec![i]))
}

/// `(payload byte, state, attempts)` of every live record, sorted by payload.
pub async fn live(wal: &impl Wal) -> Vec<(u8, WalRecordState, u32)> {
    let mut v: Vec<_> = wal
        .pending()
        .await
        .unwrap()
        .iter()
        .map(|r| (r.message.payload.0[0], r.state, r.message.attempts))
        .collect();
    v.sort_unstable_by_key(|t| t.0);
    v
}

/// `(payload byte, reason)` of every dead letter, sorted by payload.
pub async fn dead(wal: &impl Wal) -> Vec<(u8, DeadReason)> {
    let mut v: Vec<_> = wal
        .dead_letters()
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.message.payload.0[0], d.reason))
        .collect();
    v.sort_unstable_by_key(|t| t.0);
    v
}

fn record_of<'a>(records: &'a [WalRecord], id: &str) -> &'a WalRecord {
    records
        .iter()
        .find(|r| r.message.id == id)
        .unwrap_or_else(|| panic!("no record of {id}"))
}

async fn append(wal: &impl Wal, m: &Arc<EMessage>) {
    wal.append(m).unwrap().wait().await.unwrap();
}

/// Opens the backend for a case of the records' states, which only a WAL that keeps
/// records of its own promises (see the module docs): a view of the queues' entries
/// (`RedisWal`) fails here, by name, rather than on the case's first state.
pub fn keeps_records<B: WalBackend>(b: &B, case: &str) -> B::Wal {
    let wal = b.open();
    assert!(
        wal.keeps_own_records(),
        "`{case}` checks the states of the WAL's own records, and this WAL is a view of the \
         queues' entries (keeps_own_records() is false: DESIGN §11, the stream is the log); \
         run it with wal_view_conformance!, not wal_conformance!"
    );
    wal
}

/// Asserts the live records are `want`, on a WAL that keeps records of its own; a view of
/// the queues' entries holds none (see the module docs), and `pending()` answers none.
async fn live_records_are(wal: &impl Wal, want: Vec<(u8, WalRecordState, u32)>) {
    if wal.keeps_own_records() {
        assert_eq!(live(wal).await, want);
    } else {
        assert!(
            wal.pending().await.unwrap().is_empty(),
            "a view holds no record"
        );
    }
}

/// `append` makes a `Pending` record of the message as given, counted as appended and live.
pub async fn append_shows_pending(b: &impl WalBackend) {
    let wal = keeps_records(b, "append_shows_pending");
    assert!(
        wal.pending().await.unwrap().is_empty(),
        "a new WAL is empty"
    );
    let m = Arc::new(EMessage::standard("orders", b"x".to_vec()).with_trace_id("tr-1"));
    append(&wal, &m).await;
    let pending = wal.pending().await.unwrap();
    assert_eq!(pending.len(), 1);
    let r = record_of(&pending, &m.id);
    assert_eq!(r.state, WalRecordState::Pending);
    assert_eq!(*r.message, *m);
    assert_eq!(r.dead_reason, None);
    let s = wal.stats();
    assert_eq!((s.appended, s.live, s.completed, s.dead), (1, 1, 0, 0));
}

/// `begin` answers `true` and moves the record to `Processing`; it stays in `pending()`
/// (replay must see it).
pub async fn begin_marks_processing(b: &impl WalBackend) {
    let wal = keeps_records(b, "begin_marks_processing");
    let (m0, m1) = (msg(0), msg(1));
    append(&wal, &m0).await;
    append(&wal, &m1).await;
    assert!(wal.begin(&m1.id).unwrap());
    assert_eq!(
        live(&wal).await,
        vec![
            (0, WalRecordState::Pending, 0),
            (1, WalRecordState::Processing, 0)
        ]
    );
    assert_eq!(wal.stats().live, 2, "Processing is live");
}

/// `begin` of a record that is gone (never appended, completed, cancelled) answers `false`.
pub async fn begin_of_a_gone_record_is_false(b: &impl WalBackend) {
    let wal = keeps_records(b, "begin_of_a_gone_record_is_false");
    assert!(!wal.begin(&msg(99).id).unwrap(), "never appended");
    let (done, cancelled) = (msg(0), msg(1));
    append(&wal, &done).await;
    append(&wal, &cancelled).await;
    assert!(wal.begin(&done.id).unwrap());
    wal.complete(&done.id).unwrap();
    assert!(!wal.begin(&done.id).unwrap(), "completed");
    wal.cancel(&cancelled.id)
        .unwrap()
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert!(!wal.begin(&cancelled.id).unwrap(), "cancelled");
    assert!(wal.pending().await.unwrap().is_empty());
}

/// `complete` removes the record from `pending()` and counts it; completing again changes
/// nothing.
pub async fn complete_removes_the_record(b: &impl WalBackend) {
    let wal = keeps_records(b, "complete_removes_the_record");
    let (m0, m1) = (msg(0), msg(1));
    append(&wal, &m0).await;
    append(&wal, &m1).await;
    assert!(wal.begin(&m0.id).unwrap());
    wal.complete(&m0.id).unwrap();
    assert_eq!(live(&wal).await, vec![(1, WalRecordState::Pending, 0)]);
    wal.complete(&m0.id).unwrap();
    let s = wal.stats();
    assert_eq!((s.appended, s.completed, s.live), (2, 1, 1));
}

/// `retry` puts a `Processing` record back to `Pending` with the new `attempts` and
/// `deliver_at`.
pub async fn retry_returns_to_pending_with_attempts(b: &impl WalBackend) {
    let wal = keeps_records(b, "retry_returns_to_pending_with_attempts");
    let m = msg(0);
    append(&wal, &m).await;
    assert!(wal.begin(&m.id).unwrap());
    let mut again = (*m).clone();
    again.attempts = 2;
    let again = Arc::new(again.with_delay(std::time::Duration::from_secs(60)));
    wal.retry(&again).unwrap();
    let pending = wal.pending().await.unwrap();
    assert_eq!(pending.len(), 1);
    let r = record_of(&pending, &m.id);
    assert_eq!(r.state, WalRecordState::Pending);
    assert_eq!(r.message.attempts, 2);
    assert_eq!(r.message.deliver_at, again.deliver_at);
    assert!(
        wal.begin(&m.id).unwrap(),
        "a retried record can begin again"
    );
    assert_eq!(wal.stats().live, 1);
}

/// `append_unique` appends an id it does not hold, and refuses (writing nothing) one it
/// holds live or dead, alone or in a batch; a completed id is free again.
pub async fn append_unique_refuses_an_id_it_holds(b: &impl WalBackend) {
    let wal = keeps_records(b, "append_unique_refuses_an_id_it_holds");
    let (m0, m1, m2) = (msg(0), msg(1), msg(2));
    wal.append_unique(&m0)
        .unwrap()
        .expect("new")
        .wait()
        .await
        .unwrap();
    assert!(wal.append_unique(&m0).unwrap().is_none(), "pending: held");
    assert!(wal.begin(&m0.id).unwrap());
    assert!(
        wal.append_unique(&m0).unwrap().is_none(),
        "processing: held"
    );
    wal.fail(&m0, &DeadReason::Explicit, &[]).unwrap();
    assert!(
        wal.append_unique(&m0).unwrap().is_none(),
        "a dead letter: held"
    );
    let (commit, appended) = wal
        .append_batch_unique(&[m1.clone(), m0.clone(), m1.clone(), m2.clone()])
        .unwrap();
    commit.wait().await.unwrap();
    assert_eq!(appended, [true, false, false, true]);
    assert!(wal.begin(&m2.id).unwrap());
    wal.complete(&m2.id).unwrap();
    let again = wal.append_unique(&m2).unwrap();
    assert!(again.is_some(), "completed: the WAL no longer holds it");
    again.unwrap().wait().await.unwrap();
    assert_eq!(
        live(&wal).await,
        vec![
            (1, WalRecordState::Pending, 0),
            (2, WalRecordState::Pending, 0)
        ]
    );
    assert_eq!(wal.stats().dead, 1);
}

/// `fail` turns the record into a dead letter with its reason, attempts and the handlers
/// whose copy died; it leaves `pending()`.
pub async fn fail_makes_a_dead_letter(b: &impl WalBackend) {
    let wal = b.open();
    let (m0, m1) = (msg(0), msg(1));
    append(&wal, &m0).await;
    append(&wal, &m1).await;
    assert!(wal.begin(&m1.id).unwrap());
    let mut last = (*m1).clone();
    last.attempts = 4;
    let handlers = ["notify".to_owned()];
    wal.fail(
        &Arc::new(last),
        &DeadReason::Other("bad input".into()),
        &handlers,
    )
    .unwrap();
    live_records_are(&wal, vec![(0, WalRecordState::Pending, 0)]).await;
    let letters = wal.dead_letters().await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].message.id, m1.id);
    assert_eq!(letters[0].reason, DeadReason::Other("bad input".into()));
    assert_eq!(letters[0].attempts, 4);
    assert_eq!(letters[0].handlers, handlers);
    let taken = wal.take_dead_letter(&m1.id).await.unwrap().unwrap();
    assert_eq!(taken.handlers, handlers, "taken with its handlers");
    wal.fail(
        &taken.message.clone().into(),
        &taken.reason,
        &taken.handlers,
    )
    .unwrap();
    let s = wal.stats();
    assert_eq!(s.dead, 1, "made, taken, made again");
    if wal.keeps_own_records() {
        assert_eq!(s.live, 1);
    }
}

/// A dead letter answers `begin` with `true` and keeps its state, and a later `complete`
/// (the other copy of a broadcast finishing) does not erase it.
pub async fn a_dead_letter_survives_begin_and_complete(b: &impl WalBackend) {
    let wal = b.open();
    let m = msg(0);
    append(&wal, &m).await;
    assert!(wal.begin(&m.id).unwrap());
    wal.fail(&m, &DeadReason::Explicit, &[]).unwrap();
    assert!(wal.begin(&m.id).unwrap(), "a dead letter answers true");
    wal.complete(&m.id).unwrap();
    assert_eq!(dead(&wal).await, vec![(0, DeadReason::Explicit)]);
    assert!(wal.pending().await.unwrap().is_empty());
    assert_eq!(wal.stats().dead, 1);
}

/// `fail` of a message whose record is gone (completed: on shared queues the sender
/// completes it once the backend confirmed the copies, and a copy may die later) or was never
/// appended (a copy another node sent) makes a dead letter all the same, and it survives a
/// reopen: a dead letter is never dropped for want of a record.
pub async fn fail_without_a_live_record_keeps_the_dead_letter(b: &impl WalBackend) {
    let (gone, never) = (msg(0), msg(1));
    {
        let wal = b.open();
        append(&wal, &gone).await;
        wal.complete(&gone.id).unwrap();
        wal.fail(&gone, &DeadReason::Explicit, &["h2".to_owned()])
            .unwrap();
        wal.fail(&never, &DeadReason::Explicit, &["h1".to_owned()])
            .unwrap();
        assert!(wal.pending().await.unwrap().is_empty());
        assert_eq!(
            dead(&wal).await,
            vec![(0, DeadReason::Explicit), (1, DeadReason::Explicit)]
        );
        wal.flush().await.unwrap();
    }
    let wal = b.open();
    assert!(wal.pending().await.unwrap().is_empty(), "nothing to replay");
    let mut letters = wal.dead_letters().await.unwrap();
    letters.sort_by_key(|d| d.message.payload.0[0]);
    let handlers: Vec<Vec<String>> = letters.iter().map(|d| d.handlers.clone()).collect();
    assert_eq!(handlers, [vec!["h2".to_owned()], vec!["h1".to_owned()]]);
}

/// `cancel` of a `Pending` record answers a commit and removes it.
pub async fn cancel_of_pending_removes_it(b: &impl WalBackend) {
    let wal = keeps_records(b, "cancel_of_pending_removes_it");
    let (m0, m1) = (msg(0), msg(1));
    append(&wal, &m0).await;
    append(&wal, &m1).await;
    let commit = wal.cancel(&m0.id).unwrap();
    commit
        .expect("a pending record is cancelled")
        .wait()
        .await
        .unwrap();
    assert_eq!(live(&wal).await, vec![(1, WalRecordState::Pending, 0)]);
    assert_eq!(wal.stats().live, 1);
    assert!(wal.cancel(&m0.id).unwrap().is_none(), "already gone");
}

/// `cancel` of a record a handler has (`Processing`), of a dead letter, or of an unknown id
/// answers `None` and changes nothing.
pub async fn cancel_of_a_non_pending_record_is_none(b: &impl WalBackend) {
    let wal = keeps_records(b, "cancel_of_a_non_pending_record_is_none");
    let (taken, died) = (msg(0), msg(1));
    append(&wal, &taken).await;
    append(&wal, &died).await;
    assert!(wal.begin(&taken.id).unwrap());
    wal.fail(&died, &DeadReason::Timeout, &[]).unwrap();
    assert!(wal.cancel(&taken.id).unwrap().is_none(), "processing");
    assert!(wal.cancel(&died.id).unwrap().is_none(), "dead letter");
    assert!(wal.cancel(&msg(99).id).unwrap().is_none(), "unknown");
    assert_eq!(live(&wal).await, vec![(0, WalRecordState::Processing, 0)]);
    assert_eq!(dead(&wal).await, vec![(1, DeadReason::Timeout)]);
}

/// `take_dead_letter` removes and returns one dead letter; it does not touch live records.
pub async fn take_dead_letter_removes_one(b: &impl WalBackend) {
    let wal = b.open();
    let (d0, d1, live_one) = (msg(0), msg(1), msg(2));
    for m in [&d0, &d1, &live_one] {
        append(&wal, m).await;
    }
    wal.fail(&d0, &DeadReason::NoHandler, &[]).unwrap();
    wal.fail(&d1, &DeadReason::UnknownWorker("w9".into()), &[])
        .unwrap();
    let taken = wal.take_dead_letter(&d0.id).await.unwrap().unwrap();
    assert_eq!(taken.message.id, d0.id);
    assert_eq!(taken.reason, DeadReason::NoHandler);
    assert!(wal.take_dead_letter(&d0.id).await.unwrap().is_none());
    assert!(
        wal.take_dead_letter(&live_one.id).await.unwrap().is_none(),
        "a live record is not a dead letter"
    );
    assert_eq!(
        dead(&wal).await,
        vec![(1, DeadReason::UnknownWorker("w9".into()))]
    );
    live_records_are(&wal, vec![(2, WalRecordState::Pending, 0)]).await;
    assert_eq!(wal.stats().dead, 1);
}

/// `purge_dead_letters` removes every dead letter, says how many, and leaves live records.
pub async fn purge_removes_every_dead_letter(b: &impl WalBackend) {
    let wal = b.open();
    for i in 0..4 {
        let m = msg(i);
        append(&wal, &m).await;
        if i > 0 {
            wal.fail(&m, &DeadReason::MaxRetriesExceeded, &[]).unwrap();
        }
    }
    assert_eq!(wal.purge_dead_letters().await.unwrap(), 3);
    assert!(wal.dead_letters().await.unwrap().is_empty());
    live_records_are(&wal, vec![(0, WalRecordState::Pending, 0)]).await;
    assert_eq!(wal.stats().dead, 0);
    assert_eq!(wal.purge_dead_letters().await.unwrap(), 0);
}

/// Appending a message whose id is a dead letter (a replayed dead letter) replaces it: it is
/// no longer a dead letter (and, on a WAL that keeps records, its record is `Pending`
/// again).
pub async fn append_over_a_dead_letter_replaces_it(b: &impl WalBackend) {
    let wal = b.open();
    let m = msg(0);
    append(&wal, &m).await;
    wal.fail(&m, &DeadReason::Explicit, &[]).unwrap();
    let mut replayed = (*m).clone();
    replayed.attempts = 0;
    append(&wal, &Arc::new(replayed)).await;
    assert!(wal.dead_letters().await.unwrap().is_empty());
    live_records_are(&wal, vec![(0, WalRecordState::Pending, 0)]).await;
    let s = wal.stats();
    assert_eq!(s.dead, 0);
    if wal.keeps_own_records() {
        assert_eq!(s.live, 1);
    }
}

/// `append_batch` appends every message as `Pending` behind one commit; an empty batch is
/// fine.
pub async fn append_batch_appends_all(b: &impl WalBackend) {
    let wal = keeps_records(b, "append_batch_appends_all");
    wal.append_batch(&[]).unwrap().wait().await.unwrap();
    let batch: Vec<_> = (0..5).map(msg).collect();
    wal.append_batch(&batch).unwrap().wait().await.unwrap();
    let want: Vec<_> = (0..5).map(|i| (i, WalRecordState::Pending, 0)).collect();
    assert_eq!(live(&wal).await, want);
    let s = wal.stats();
    assert_eq!((s.appended, s.live), (5, 5));
    // Each record of a batch is on its own afterwards.
    assert!(wal.begin(&batch[3].id).unwrap());
    wal.complete(&batch[3].id).unwrap();
    assert_eq!(wal.pending().await.unwrap().len(), 4);
}

/// `stats` counts through a mixed life: appended and completed only grow, live and dead
/// follow the records held.
pub async fn stats_follow_every_transition(b: &impl WalBackend) {
    let wal = keeps_records(b, "stats_follow_every_transition");
    let ms: Vec<_> = (0..6).map(msg).collect();
    for m in &ms {
        append(&wal, m).await;
    }
    for m in &ms[..3] {
        assert!(wal.begin(&m.id).unwrap());
    }
    wal.complete(&ms[0].id).unwrap();
    wal.complete(&ms[1].id).unwrap();
    wal.fail(&ms[2], &DeadReason::Explicit, &[]).unwrap();
    wal.cancel(&ms[3].id)
        .unwrap()
        .unwrap()
        .wait()
        .await
        .unwrap();
    let s = wal.stats();
    assert_eq!(
        (s.appended, s.completed, s.live, s.dead),
        (6, 2, 2, 1),
        "{s:?}"
    );
    wal.flush().await.unwrap();
    assert_eq!(wal.purge_dead_letters().await.unwrap(), 1);
    let s = wal.stats();
    assert_eq!((s.appended, s.completed, s.live, s.dead), (6, 2, 2, 0));
}

/// Many tasks appending, beginning and completing at once lose nothing and count right.
pub async fn concurrent_callers_lose_nothing(b: &impl WalBackend) {
    let wal = Arc::new(keeps_records(b, "concurrent_callers_lose_nothing"));
    let tasks: Vec<_> = (0..8u8)
        .map(|t| {
            let wal = wal.clone();
            tokio::spawn(async move {
                let mut kept = Vec::new();
                for i in 0..50u8 {
                    let m = Arc::new(EMessage::standard("t", vec![t, i]));
                    append(&*wal, &m).await;
                    if i % 2 == 0 {
                        assert!(wal.begin(&m.id).unwrap());
                        wal.complete(&m.id).unwrap();
                    } else {
                        kept.push(m.id.clone());
                    }
                }
                kept
            })
        })
        .collect();
    let mut kept = HashSet::new();
    for t in tasks {
        kept.extend(t.await.unwrap());
    }
    let pending: HashSet<String> = wal
        .pending()
        .await
        .unwrap()
        .iter()
        .map(|r| r.message.id.clone())
        .collect();
    assert_eq!(pending, kept);
    let s = wal.stats();
    assert_eq!((s.appended, s.completed, s.live), (400, 200, 200), "{s:?}");
}

/// Opened again after every handle is dropped, the WAL holds what it held: pending and
/// processing records (with their latest message) for replay, dead letters with their
/// reason; nothing completed, cancelled or purged; a dead letter appended again is live.
pub async fn state_survives_a_reopen(b: &impl WalBackend) {
    let ms: Vec<_> = (0..7).map(msg).collect();
    let mut retried = (*ms[3]).clone();
    retried.attempts = 2;
    let retried = Arc::new(retried.with_trace_id("after-retry"));
    {
        let wal = keeps_records(b, "state_survives_a_reopen");
        for m in &ms {
            append(&wal, m).await;
        }
        // 0 stays pending; 1 is processing; 2 completes; 3 is retried; 4 dies; 5 is cancelled;
        // 6 dies and is appended again (a replayed dead letter).
        assert!(wal.begin(&ms[1].id).unwrap());
        assert!(wal.begin(&ms[2].id).unwrap());
        wal.complete(&ms[2].id).unwrap();
        assert!(wal.begin(&ms[3].id).unwrap());
        wal.retry(&retried).unwrap();
        let handlers = ["billing".to_owned(), "notify".to_owned()];
        wal.fail(&ms[4], &DeadReason::Other("bad input".into()), &handlers)
            .unwrap();
        wal.cancel(&ms[5].id)
            .unwrap()
            .unwrap()
            .wait()
            .await
            .unwrap();
        wal.fail(&ms[6], &DeadReason::Explicit, &[]).unwrap();
        append(&wal, &ms[6]).await;
        wal.flush().await.unwrap();
    }
    let wal = b.open();
    assert_eq!(
        live(&wal).await,
        vec![
            (0, WalRecordState::Pending, 0),
            (1, WalRecordState::Processing, 0),
            (3, WalRecordState::Pending, 2),
            (6, WalRecordState::Pending, 0),
        ]
    );
    let pending = wal.pending().await.unwrap();
    assert_eq!(*record_of(&pending, &ms[0].id).message, *ms[0]);
    assert_eq!(*record_of(&pending, &retried.id).message, *retried);
    assert_eq!(
        dead(&wal).await,
        vec![(4, DeadReason::Other("bad input".into()))]
    );
    assert_eq!(
        wal.dead_letters().await.unwrap()[0].handlers,
        ["billing", "notify"],
        "a dead letter keeps the handlers whose copy died"
    );
    assert_eq!(wal.stats().live, 4);
    assert_eq!(wal.stats().dead, 1);

    assert_eq!(wal.purge_dead_letters().await.unwrap(), 1);
    wal.flush().await.unwrap();
    drop(wal);
    let wal = b.open();
    assert!(wal.dead_letters().await.unwrap().is_empty(), "purge lasts");
    assert_eq!(wal.pending().await.unwrap().len(), 4);
}

/// `begin_batch` answers one flag per id, as `begin` would (a gone record is `false`), and
/// `complete_batch` completes every record named; both survive a reopen as their one-by-one
/// forms do.
pub async fn batch_begin_and_complete_act_on_each(b: &impl WalBackend) {
    let ms: Vec<_> = (0..4).map(msg).collect();
    {
        let wal = keeps_records(b, "batch_begin_and_complete_act_on_each");
        for m in &ms[..3] {
            append(&wal, m).await;
        }
        let ids: Vec<&str> = ms.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(
            wal.begin_batch(&ids).unwrap(),
            [true, true, true, false],
            "3 was never appended"
        );
        assert_eq!(
            live(&wal).await,
            vec![
                (0, WalRecordState::Processing, 0),
                (1, WalRecordState::Processing, 0),
                (2, WalRecordState::Processing, 0),
            ]
        );
        wal.complete_batch(&[&ms[0].id, &ms[2].id]).unwrap();
        assert_eq!(live(&wal).await, vec![(1, WalRecordState::Processing, 0)]);
        let s = wal.stats();
        assert_eq!((s.appended, s.completed, s.live), (3, 2, 1));
        wal.complete_batch(&[]).unwrap();
        wal.flush().await.unwrap();
    }
    let wal = b.open();
    assert_eq!(live(&wal).await, vec![(1, WalRecordState::Processing, 0)]);
}

/// A view of the queues' entries (`RedisWal`: see the module docs) holds no record of its
/// own, and says so (`keeps_own_records` is `false`): `pending()` answers none whatever was
/// appended, `begin` answers `true` (a claimed entry is live by definition, and may have
/// been sent by another process), `cancel` answers a commit (the queue's write is the
/// record, and a refused send made none), and `complete` and `retry` change nothing: no
/// dead letter, no count.
pub async fn a_view_holds_no_records_of_its_own(b: &impl WalBackend) {
    let wal = b.open();
    assert!(
        !wal.keeps_own_records(),
        "this WAL keeps records of its own: run it with wal_conformance!"
    );
    let (m0, m1) = (msg(0), msg(1));
    append(&wal, &m0).await;
    wal.append_batch(std::slice::from_ref(&m1))
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert!(
        wal.pending().await.unwrap().is_empty(),
        "appended: no record"
    );
    assert!(wal.begin(&m0.id).unwrap());
    assert!(
        wal.begin(&msg(99).id).unwrap(),
        "an entry another node sent"
    );
    wal.complete(&m0.id).unwrap();
    wal.retry(&m1).unwrap();
    wal.cancel(&m1.id)
        .unwrap()
        .expect("a refused send left nothing to withdraw")
        .wait()
        .await
        .unwrap();
    wal.flush().await.unwrap();
    assert!(wal.pending().await.unwrap().is_empty());
    assert!(wal.dead_letters().await.unwrap().is_empty());
    let s = wal.stats();
    assert_eq!((s.live, s.dead), (0, 0), "{s:?}");
}

/// Runs every case of this module over each backend given, one `#[tokio::test]` per case,
/// in a module per backend: `name => expression making a fresh backend`.
///
/// ```ignore
/// event_base_test::wal_conformance! {
///     memory => MemoryBackend::default(),
///     persistent_always => Persistent::new(SyncPolicy::Always),
/// }
/// ```
#[macro_export]
macro_rules! wal_conformance {
    ($($backend:ident => $make:expr),* $(,)?) => {
        $(
            $crate::__conformance_cases!(wal, $backend => $make;
                append_shows_pending,
                begin_marks_processing,
                begin_of_a_gone_record_is_false,
                complete_removes_the_record,
                retry_returns_to_pending_with_attempts,
                fail_makes_a_dead_letter,
                a_dead_letter_survives_begin_and_complete,
                fail_without_a_live_record_keeps_the_dead_letter,
                cancel_of_pending_removes_it,
                cancel_of_a_non_pending_record_is_none,
                take_dead_letter_removes_one,
                purge_removes_every_dead_letter,
                append_over_a_dead_letter_replaces_it,
                append_batch_appends_all,
                append_unique_refuses_an_id_it_holds,
                batch_begin_and_complete_act_on_each,
                stats_follow_every_transition,
                concurrent_callers_lose_nothing,
                state_survives_a_reopen,
            );
        )*
    };
}

/// Runs the cases a WAL that is a view of the queues' entries promises (see the module
/// docs: the dead letters, and the view's own case) over each backend given, as
/// [`wal_conformance!`](crate::wal_conformance) does.
///
/// ```ignore
/// event_base_test::wal_view_conformance! {
///     redis => RedisBackend::start(),
/// }
/// ```
#[macro_export]
macro_rules! wal_view_conformance {
    ($($backend:ident => $make:expr),* $(,)?) => {
        $(
            $crate::__conformance_cases!(wal, $backend => $make;
                a_view_holds_no_records_of_its_own,
                fail_makes_a_dead_letter,
                a_dead_letter_survives_begin_and_complete,
                fail_without_a_live_record_keeps_the_dead_letter,
                take_dead_letter_removes_one,
                purge_removes_every_dead_letter,
                append_over_a_dead_letter_replaces_it,
            );
        )*
    };
}
