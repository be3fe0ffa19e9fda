//! Audit writers for event_base.
//!
//! Turn auditing on with `EventBusBuilder::audit_writer(..)`; the bus hands these writers the
//! audit records in batches, on a thread of their own (see `event_base_core::AuditLog`).
//!
//! - [`JsonLinesWriter`]: one JSON object per line in a file, rotated by size
//!   (`audit.jsonl` → `audit.jsonl.1` → `audit.jsonl.2` ..., keeping a set number).
//! - [`TracingWriter`]: one `tracing` event per record (target `event_base::audit`), for
//!   whatever subscriber the application already has.

#![deny(unsafe_code)]

mod json_lines_writer;
mod tracing_writer;

pub use json_lines_writer::JsonLinesWriter;
pub use tracing_writer::TracingWriter;
