//! The patterns applications build on a bus, built here on the bus's own API so that they
//! need not be built by hand: request/reply (`request.rs`), recurring schedules
//! (`schedule.rs`, with the slot arithmetic in `slots.rs`) and taking back a delayed
//! message (`cancel.rs`).
//!
//! May import every folder below it; nothing imports this folder but `lib.rs`. Each file
//! adds its methods to [`EventBus`](crate::EventBus) in an `impl` block of its own, and keeps
//! what it needs per bus in the bus's extensions (`bus/extensions.rs`), so that the bus
//! knows nothing of it.
//!
//! | file | holds |
//! |---|---|
//! | `request.rs` | `EventBus::request`, [`reply`](crate::reply), [`reply_json`](crate::reply_json): one answer, correlated by the request's id |
//! | `schedule.rs` | `EventBus::schedule`, `unschedule`, `schedules`: one message per slot, kept by the WAL |
//! | `slots.rs` | [`Schedule`](crate::Schedule), [`CatchUp`](crate::CatchUp): which slots fire, and which of the missed ones |
//! | `cancel.rs` | `EventBus::cancel`: a delayed message taken back before its time |

pub(crate) mod cancel;
pub(crate) mod request;
pub(crate) mod schedule;
pub(crate) mod slots;
