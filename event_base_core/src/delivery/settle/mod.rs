//! Final states: how a message's copies end, and when the message as a whole is final.
//!
//! `final_state.rs` ends a handler's copy (`Ack`, or a dead letter) and, once the message is
//! final, completes its WAL record or records it `Failed`. `fan_out.rs` counts the copies
//! still out of a message of a topic with several handlers, and how the ended ones did,
//! by id; `copy_slab.rs` does the same by index for the messages a topic log took once for
//! every handler, whose jobs carry the index.
//!
//! `sender_completions.rs` completes, on the sender, the WAL records of messages whose every
//! copy went to a shared queue, once the backend confirmed those copies (another node may
//! handle them all).

pub(crate) mod copy_slab;
pub(crate) mod fan_out;
pub(crate) mod final_state;
pub(crate) mod sender_completions;
