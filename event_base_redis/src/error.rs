//! [`RedisError`]: what can go wrong talking to Redis, each message saying what to do.

use event_base_core::{CoreError, QueueError, WalError};

/// Errors of the Redis backends. Converted into [`QueueError::Backend`] and
/// [`WalError::Backend`] (and so into [`CoreError`]) where the bus meets them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisError {
    /// The URL is not a Redis URL.
    #[error("`{url}` is not a Redis URL ({source}); write it as redis://host:port/db, e.g. redis://127.0.0.1:6379/0")]
    BadUrl {
        /// The URL given.
        url: String,
        /// The parser's complaint.
        #[source]
        source: redis::RedisError,
    },
    /// Redis could not be reached, or the connection broke.
    #[error("cannot reach Redis at {addr}: {source}; check that redis-server runs there and answers PING (the backend reconnects by itself once it does)")]
    Unreachable {
        /// Where Redis was expected.
        addr: String,
        /// The connection error.
        #[source]
        source: redis::RedisError,
    },
    /// A command was sent but its reply never came (the server is paused, overloaded, or
    /// the link broke while the command was in flight): it may or may not have taken effect.
    #[error("Redis at {addr} did not answer `{command}` in time ({source}); it may or may not have been applied: a send may be delivered even though it reported this error")]
    Unconfirmed {
        /// Where Redis was expected.
        addr: String,
        /// The command (its name only).
        command: &'static str,
        /// The client's error.
        #[source]
        source: redis::RedisError,
    },
    /// Redis answered a command with an error.
    #[error("Redis refused `{command}`: {message}")]
    Refused {
        /// The command (its name only).
        command: &'static str,
        /// The server's error text.
        message: String,
    },
    /// Redis answered something this backend cannot read.
    #[error("unexpected reply from Redis to `{command}`: {what}; is this a Redis 7 server, and are the keys under this prefix used only by event_base?")]
    UnexpectedReply {
        /// The command (its name only).
        command: &'static str,
        /// What was wrong.
        what: String,
    },
    /// A stream entry does not hold a message event_base wrote.
    #[error("stream entry {entry} of `{key}` is not an event_base message ({reason}); it was moved to `{poison}`: look there, and keep other writers off this prefix")]
    Undecodable {
        /// The stream key.
        key: String,
        /// The entry id.
        entry: String,
        /// What was wrong.
        reason: String,
        /// Where the entry now is.
        poison: String,
    },
    /// The server's `maxmemory-policy` lets it evict keys, which silently drops messages.
    #[error("Redis at {addr} has maxmemory-policy `{policy}`, which may evict stream keys and lose messages; set it to noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf)")]
    Evicting {
        /// The server.
        addr: String,
        /// Its policy.
        policy: String,
    },
    /// The server is older than this backend needs.
    #[error("Redis at {addr} is version {version}; event_base needs Redis 7.0 or newer (XAUTOCLAIM with deleted ids)")]
    TooOld {
        /// The server.
        addr: String,
        /// Its version.
        version: String,
    },
    /// Claims held since before a pause (or a stall) could not be confirmed as still this
    /// consumer's, because the confirmation just tried failed: it is not tried again for
    /// every delivery meanwhile.
    #[error("could not confirm that old claims are still this consumer's ({reason}); their handlers run anyway, so a message another consumer took over meanwhile may be handled twice; check that Redis answers (the next confirmation is tried within the claim block time)")]
    LeaseUnconfirmed {
        /// Why the confirmation failed.
        reason: String,
    },
    /// The backend's connection task has stopped (its runtime shut down).
    #[error("the Redis connection task has stopped (its tokio runtime ended); connect again from a running runtime")]
    Stopped,
}

impl RedisError {
    /// Whether the error is about reaching Redis (unreachable, no reply in time), as opposed
    /// to Redis refusing or the data being wrong: such errors pass once Redis is back.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            RedisError::Unreachable { .. } | RedisError::Unconfirmed { .. }
        )
    }
}

impl From<RedisError> for QueueError {
    fn from(e: RedisError) -> Self {
        QueueError::Backend(Box::new(e))
    }
}

impl From<RedisError> for WalError {
    fn from(e: RedisError) -> Self {
        WalError::Backend(Box::new(e))
    }
}

impl From<RedisError> for CoreError {
    fn from(e: RedisError) -> Self {
        CoreError::Queue(e.into())
    }
}
