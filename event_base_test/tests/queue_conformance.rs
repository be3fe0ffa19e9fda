//! Every queue backend passes the same cases (`event_base_test::conformance::queue`).
//!
//! A backend is a function from a bound to its factory; a new one is one line below.

use event_base::{FlumeQueueFactory, MpmcQueueFactory};

event_base_test::queue_conformance! {
    flume => FlumeQueueFactory::bounded,
    kanal => MpmcQueueFactory::bounded,
}
