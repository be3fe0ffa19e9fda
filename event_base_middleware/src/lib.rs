//! Built-in middleware for event_base.
//!
//! This crate will hold the middleware that ships with the bus, one folder per concern in the
//! tower manner (`logger/`, `timeout/`, `metrics/`, `retry/`): `LoggerMiddleware` (a tracing
//! span per message with id, topic, attempt, outcome and duration), `TimeoutMiddleware`,
//! `MetricsMiddleware`, and a retry-policy middleware. They arrive with the middleware and
//! observability issue; until then the [`Middleware`](event_base_core::Middleware) trait in
//! `event_base_core` is the way to write your own.

#![deny(unsafe_code)]
