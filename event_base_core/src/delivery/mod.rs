//! A message's path through a running bus, from `send` to the worker that takes it, and its
//! final state.
//!
//! May import: `message/`, `backend/` and `observe/`'s recorders. What its paths share is
//! the [`DeliveryHub`](hub::DeliveryHub) (`hub.rs`); the bus (`bus/shared.rs`) holds one, and
//! the workers (`worker/`) import this folder, not the other way round.
//!
//! ```text
//! TopicRouter::send                       send/topic_router.rs
//!   └─ admit: checks, Arc                 send/accept.rs (DeliveryHub::admit)
//!      └─ WAL append (Pending)            send/accept.rs → backend/wal.rs
//!         ├─ deliver_at ahead → timer     send/scheduler.rs
//!         └─ the topic's log, once        log/ (Route::log; TopicEntry::producer for one
//!            (in-memory backends), or        handler's copy), or each handler's queue
//!            each handler's queue         (shared backends); several handlers: settle/fan_out.rs
//!            └─ claimed, routed           subscription/consumer_router.rs → job.rs, job_channel.rs
//!               └─ worker                 worker/ (deliver, decide, act)
//!                  ├─ Ack → Complete      settle/final_state.rs (finish_ok)
//!                  ├─ retry → timer       send/scheduler.rs
//!                  └─ dead → Failed       settle/final_state.rs (dead_letter)
//! start-up: unfinished WAL records        send/replay.rs
//! ```
//!
//! | folder | holds |
//! |---|---|
//! | `send/` | the accept path: a send checked, stamped, appended to the WAL and queued; the timer of delayed sends and retries; start-up replay |
//! | `subscription/` | a topic's handlers: the topic table, each subscription's queue, router, jobs, key lines, pause switch and rate gate |
//! | `settle/` | final states: a copy's end, the fan-out of several handlers' copies, the records completed on the sender |
//! | `remote/` | the handlers other processes run, on a shared backend |
//! | `dedup/` | the dedup window and the 128-bit id keys it (and the fan-out table) holds ids by |
//! | `hub.rs` | `DeliveryHub`: the state the send, route and settle paths of one bus share |
//! | `in_flight.rs` | `InFlight`: what this process holds and has not finished, for `wait_idle` and `Drain`; `Held`, a claimed entry of a shared queue |
//! | `cache_padded.rs` | `CachePadded`: a value on cache lines of its own |
//! | `log/` | the in-process topic log of in-memory backends: one append, a cursor per subscription, runs claimed at once by its workers |

pub(crate) mod cache_padded;
pub(crate) mod dedup;
pub(crate) mod hub;
pub(crate) mod in_flight;
pub(crate) mod log;
pub(crate) mod remote;
pub(crate) mod send;
pub(crate) mod settle;
pub(crate) mod subscription;
