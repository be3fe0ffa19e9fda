//! Integration tests, crash tests and benchmarks of event_base.
//!
//! The tests live in `tests/`, one behaviour per file; shared helpers live here.

#![deny(unsafe_code)]
