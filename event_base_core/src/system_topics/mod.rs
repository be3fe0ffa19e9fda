//! The bus's own topics, under the reserved `_system.` prefix (see
//! [`constant`](crate::constant)): what the bus announces there, the payloads it announces, and
//! the handlers it registers for itself. This is the only meaning of "system" in the code; one
//! running bus is a bus.
//!
//! May import: `backend/routes.rs` (what a shared backend says of other processes),
//! `delivery/` (the hub it announces through, `delivery/send/announce.rs`), `worker/registry.rs`
//! and `node.rs`. Nothing of `bus/`: the bus holds an [`Announcer`](announcer::Announcer), and
//! handles `_system.shutdown` itself (`bus/stop/shutdown_command.rs`).
//!
//! | file | holds |
//! |---|---|
//! | `announcer.rs` | `Announcer`: its workers' `Joined`/`Left` and the topic table, when something subscribes |
//! | `evicted.rs` | lists this process's workers with a shared backend; announces the workers of a process the backend evicted as `Dead` |
//! | `discovery.rs` | `WorkerDiscovery`, `TopicSync`, `TopicDiscovery`, `TopicInfo` (`DiscoveryEvent`, what happened to a worker, is `worker/registry.rs`'s) |
//! | `handlers.rs` | the handler for `_system.topic_discovery` |

pub(crate) mod announcer;
pub(crate) mod discovery;
pub(crate) mod evicted;
pub(crate) mod handlers;
