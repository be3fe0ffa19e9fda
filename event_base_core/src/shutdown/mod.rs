//! How a bus stops, in the words applications use: [`ShutdownStrategy`](crate::ShutdownStrategy)
//! (what to do), [`ShutdownReport`](crate::ShutdownReport) (what it did), and the payloads of
//! `_system.shutdown` and `_system.shutdown_ack`. The table of what each strategy does is on
//! `ShutdownStrategy`'s module page.
//!
//! May import: nothing of the crate. These are plain data that every floor may name
//! ([`CoreError::ShutdownTimeout`](crate::CoreError::ShutdownTimeout) carries the report); the
//! machinery that carries a strategy out is the running bus's (`bus/stop/`).
//!
//! | file | holds |
//! |---|---|
//! | `strategy.rs` | the public types: `ShutdownStrategy`, `ShutdownReport`, `WorkerOutcome`, `WorkerShutdown`, `ShutdownCommand`, `ShutdownAck` |

pub(crate) mod strategy;
