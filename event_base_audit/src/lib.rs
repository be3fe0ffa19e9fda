//! Audit writers for event_base.
//!
//! This crate will hold the `AuditWriter` implementations: a JSON-lines file writer with
//! rotation by size and a `tracing` writer, fed in batches from the bounded audit ring buffer
//! so that auditing never costs a bus round trip per message. They arrive with the middleware
//! and observability issue.

#![deny(unsafe_code)]
