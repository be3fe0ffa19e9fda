//! The bus's own topics, under the reserved `_system.` prefix (see
//! [`constant`](crate::constant)): what the bus announces there, the payloads it announces, and
//! the handlers it registers for itself. This is the only meaning of "system" in the code; one
//! running bus is a bus.
//!
//! May import: `backend/routes.rs` (what a shared backend says of other processes), `bus/` (shared state, tasks), `shutdown/`'s types and `bus/stop/coordinator.rs` (shutdown by message),
//! `delivery/send/accept.rs` (announcements take the send path without its `accepting` check),
//! `delivery/remote/elsewhere.rs` and `topic_table.rs` (routes, and the subscribers other processes
//! run, through the bus's remote table).
//!
//! | file | holds |
//! |---|---|
//! | `announce.rs` | `BusShared::announce`: publishes on a system topic when something subscribes, here or (shared backend) in another process |
//! | `evicted.rs` | lists this process's workers with a shared backend; announces the workers of a process the backend evicted as `Dead` |
//! | `discovery.rs` | `WorkerDiscovery`, `TopicSync`, `TopicDiscovery`, `TopicInfo` (`DiscoveryEvent`, what happened to a worker, is `worker/registry.rs`'s) |
//! | `handlers.rs` | handlers for `_system.shutdown` and `_system.topic_discovery` |

pub(crate) mod announce;
pub(crate) mod discovery;
pub(crate) mod evicted;
pub(crate) mod handlers;
