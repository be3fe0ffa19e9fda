//! gRPC management API for event_base.
//!
//! This crate will hold a tonic server exposing a running system (status, topics, workers,
//! metrics, publish, dead-letter list/replay/purge, WAL stats, shutdown) with server
//! reflection and the standard health service, and the `ebctl` command-line client built on
//! it. It depends on nothing heavy yet, so builds stay fast until that issue lands.

#![deny(unsafe_code)]
