//! Idempotent sends, and the keys that stand for ids.
//!
//! `dedup_window.rs` is the dedup window: the ids of messages completed within it.
//! `id_key.rs` makes the 128-bit keys by which the dedup window and the fan-out table
//! (`settle/fan_out.rs`) hold ids; `key_set.rs` is the set of keys the dedup window's
//! generations are.

pub(crate) mod dedup_window;
pub(crate) mod id_key;
pub(crate) mod key_set;
