//! What travels: [`EMessage`](crate::EMessage) and its parts, its id, the context a handler
//! runs in, what a handler answers ([`Ack`](crate::Ack)) and what a dead letter keeps.
//!
//! May import: `constant`, `error`. Nothing here knows a handler, a backend or a running bus;
//! everything else builds on these types.
//!
//! | file | holds |
//! |---|---|
//! | `emessage.rs` | `EMessage`, `IntoMessage`, `TryIntoMessage`, `JsonPayload`, `MESSAGE_VERSION` |
//! | `json.rs` | `Json<T>`: a payload as a typed value, both ways |
//! | `topic.rs` | `MessageTopic` |
//! | `payload.rs` | `MessagePayload` |
//! | `metadata.rs` | `MessageMetadata` |
//! | `headers.rs` | `MessageHeaders`: the ordering key, trace context and the application's headers |
//! | `delivery_mode.rs` | `DeliveryMode` |
//! | `id.rs` | `new_message_id`: fast UUID v4 ids; `check_id`, the length check of any id |
//! | `minted.rs` | the ids this process minted and no send has taken yet (their first send skips the dedup lookup) |
//! | `ack.rs` | `Ack`, `DeadReason` |
//! | `dead_letter.rs` | `DeadLetterMessage` |
//! | `context.rs` | `current_message`: the message being handled, and the provenance a message sent from a handler inherits |

pub(crate) mod ack;
pub(crate) mod context;
pub(crate) mod dead_letter;
pub(crate) mod delivery_mode;
pub(crate) mod emessage;
pub(crate) mod headers;
pub(crate) mod id;
pub(crate) mod json;
pub(crate) mod metadata;
pub(crate) mod minted;
pub(crate) mod payload;
pub(crate) mod topic;
