//! A TOML config file, with `EB_…` environment variables over it, into the builder (feature
//! `config`): the backends, per-handler overrides, and the admin server's settings.
//!
//! - [`Config::load`] reads a file and the process's `EB_…` variables;
//!   [`Config::load_with_vars`] takes the variables from you (tests, another source).
//! - `event_base::builder().config("eb.toml").await?` ([`ConfigExt::config`]) and
//!   `start_system!(config: "eb.toml")` build a bus from it; [`Config::apply`] does the same
//!   for a [`Config`] in hand.
//! - [`Config::grpc_server`] (feature `gRPC`) makes the admin server's builder from
//!   `[admin]`; the application serves it.
//!
//! Precedence, lowest first: the defaults, the file, the `EB_…` variables. `EB_WAL__DIR` sets
//! `wal.dir`, `EB_HANDLERS__SEND_EMAIL__WORKERS` sets `handlers.send_email.workers`: a double
//! underscore between levels, upper case folded to lower (so a variable reaches a handler
//! whose name is lower case). Variables with `EB_` but no double underscore are other
//! tools' and not read.
//!
//! Errors never guess: an unknown key, a value a key does not take, a missing file are each
//! a [`ConfigError`] naming the file (or the variable), the key, and what is allowed:
//!
//! ```text
//! eb.toml: wal.sync_policy: unknown variant `sometimes`, expected one of `always`, `batch`, `never`
//! ```
//!
//! The guide's `config` page is the reference of every key, with a complete file.
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | [`Config`]: loading, the origin of each key, [`IntoConfig`], [`ConfigExt`] |
//! | `sections.rs` | the sections as the file spells them |
//! | `env.rs` | the `EB_…` variables: names to keys, text to values |
//! | `apply.rs` | a [`Config`] into an [`EventBusBuilder`]: backends, bus settings, overrides |
//! | `grpc.rs` | [`Config::grpc_server`] (feature `gRPC`) |

mod apply;
mod env;
#[cfg(feature = "gRPC")]
mod grpc;
mod sections;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use event_base_core::ConfigError;
pub use sections::{
    AdminSection, BusSection, HandlerSection, NodeKind, QueueKind, QueueSection, RedisSection,
    SyncPolicyName, WalKind, WalSection,
};

use event_base_core::{CoreError, EventBusBuilder};

/// A config file's settings, with the `EB_…` variables over them. Every section is optional
/// and defaults as the guide's `config` page says.
///
/// ```
/// use event_base::config::{Config, WalKind};
///
/// # fn main() -> Result<(), event_base::config::ConfigError> {
/// let dir = std::env::temp_dir().join(format!("eb-config-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("eb.toml");
/// std::fs::write(&path, "[wal]\nkind = \"persistent\"\ndir = \"/var/lib/orders/wal\"\n").unwrap();
///
/// let vars = [("EB_WAL__DIR".to_string(), "/tmp/wal".to_string())];
/// let config = Config::load_with_vars(&path, vars)?;
/// assert_eq!(config.wal.kind, WalKind::Persistent);
/// assert_eq!(config.wal.dir.as_deref(), Some(std::path::Path::new("/tmp/wal"))); // the variable wins
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Config {
    /// `[bus]`: name, node, batch size, dedup window, audit.
    #[serde(default)]
    pub bus: BusSection,
    /// `[wal]`: the write-ahead log.
    #[serde(default)]
    pub wal: WalSection,
    /// `[queue]`: the queues.
    #[serde(default)]
    pub queue: QueueSection,
    /// `[redis]`: the server of the Redis backends.
    #[serde(default)]
    pub redis: RedisSection,
    /// `[handlers.<name>]`: overrides by handler name.
    #[serde(default)]
    pub handlers: BTreeMap<String, HandlerSection>,
    /// `[admin]`: the admin server.
    #[serde(default)]
    pub admin: AdminSection,
    /// Where each key came from, for errors found after loading.
    #[serde(skip)]
    origins: Origins,
}

/// The file a config came from and the variables that set its keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Origins {
    /// The file, if any.
    file: Option<PathBuf>,
    /// `key -> EB_… variable` for each key a variable set.
    vars: BTreeMap<String, String>,
}

impl Origins {
    /// Where `key` (dotted) came from: the variable that set it or a key under it, else the
    /// file.
    fn of(&self, key: &str) -> String {
        let var = self.vars.iter().find(|(k, _)| {
            k.as_str() == key
                || k.starts_with(&format!("{key}."))
                || key.starts_with(&format!("{k}."))
        });
        match (var, &self.file) {
            (Some((_, var)), _) => var.clone(),
            (None, Some(file)) => file.display().to_string(),
            (None, None) => "the config".to_owned(),
        }
    }

    /// An [`ConfigError::Invalid`] for `key`.
    fn invalid(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            origin: self.of(key),
            key: key.to_owned(),
            message: message.into(),
        }
    }
}

impl Config {
    /// Reads the TOML file at `path`, then the process's `EB_…` variables over it, and
    /// checks the result (see the module docs for the variables).
    ///
    /// Errors: [`ConfigError::Read`] naming the path if it cannot be read;
    /// [`ConfigError::Syntax`] if it is not TOML; [`ConfigError::Invalid`] naming the file
    /// or variable, the key and what is allowed for an unknown key or a bad value.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        Self::load_with_vars(
            path,
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
    }

    /// [`load`](Self::load) with these variables instead of the process's (only those
    /// starting with `EB_` and holding a double underscore are read).
    pub fn load_with_vars(
        path: impl AsRef<Path>,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, Some(path), vars)
    }

    /// The settings in `text` (TOML), with these variables over them; errors name "the
    /// config" where [`load`](Self::load)'s name the file.
    pub fn from_toml_str(
        text: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        Self::parse(text, None, vars)
    }

    fn parse(
        text: &str,
        file: Option<&Path>,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let shown = file.map_or_else(|| PathBuf::from("the config"), Path::to_owned);
        let mut table: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: shown.clone(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let vars = env::overlay(&mut table, vars)?;
        let origins = Origins {
            file: file.map(Path::to_owned),
            vars,
        };
        let mut config: Config = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| {
                let key = match e.path().to_string() {
                    dot if dot == "." => "(top level)".to_owned(),
                    key => key,
                };
                origins.invalid(&key, e.into_inner().message().trim_end().to_owned())
            })?;
        config.origins = origins;
        config.check()?;
        Ok(config)
    }

    /// Checks what one key cannot say alone: the keys a backend needs, the backends that
    /// go together.
    fn check(&self) -> Result<(), ConfigError> {
        let o = &self.origins;
        if self.wal.kind == WalKind::Persistent && self.wal.dir.is_none() {
            return Err(o.invalid(
                "wal.dir",
                "missing: wal.kind = \"persistent\" needs the WAL's directory, e.g. dir = \"/var/lib/app/wal\"",
            ));
        }
        let redis_wal = self.wal.kind == WalKind::Redis;
        let redis_queue = self.queue.kind == QueueKind::Redis;
        if redis_wal != redis_queue {
            let key = if redis_wal { "wal.kind" } else { "queue.kind" };
            return Err(o.invalid(
                key,
                "the Redis WAL is a view of the Redis queue's streams: set both wal.kind and queue.kind to \"redis\", or neither",
            ));
        }
        if redis_wal && self.redis.url.is_none() {
            return Err(o.invalid(
                "redis.url",
                "missing: the Redis backends need the server, e.g. url = \"redis://127.0.0.1:6379/0\"",
            ));
        }
        for (name, h) in &self.handlers {
            if h.workers == Some(0) {
                return Err(o.invalid(
                    &format!("handlers.{name}.workers"),
                    "0 workers would never handle a message; give at least 1",
                ));
            }
        }
        if self.queue.bound == Some(0) {
            return Err(o.invalid("queue.bound", "a queue holds at least 1 message"));
        }
        if self.bus.batch_size == Some(0) {
            return Err(o.invalid("bus.batch_size", "a batch holds at least 1 message"));
        }
        if self.admin.tls_cert.is_some() != self.admin.tls_key.is_some() {
            let key = if self.admin.tls_cert.is_some() {
                "admin.tls_key"
            } else {
                "admin.tls_cert"
            };
            return Err(o.invalid(key, "missing: TLS needs both tls_cert and tls_key"));
        }
        Ok(())
    }

    /// The file this config was read from, if any.
    pub fn file(&self) -> Option<&Path> {
        self.origins.file.as_deref()
    }
}

/// What names a config: a path (`&str`, `String`, `&Path`, `PathBuf`), read with
/// [`Config::load`], or a [`Config`] already loaded.
pub trait IntoConfig {
    /// The config, read if need be.
    fn into_config(self) -> Result<Config, ConfigError>;
}

impl IntoConfig for Config {
    fn into_config(self) -> Result<Config, ConfigError> {
        Ok(self)
    }
}

impl IntoConfig for &Config {
    fn into_config(self) -> Result<Config, ConfigError> {
        Ok(self.clone())
    }
}

macro_rules! path_into_config {
    ($($t:ty),*) => {$(
        impl IntoConfig for $t {
            fn into_config(self) -> Result<Config, ConfigError> {
                Config::load(self)
            }
        }
    )*};
}

path_into_config!(&str, String, &String, &Path, PathBuf, &PathBuf);

/// `.config(path)` on an [`EventBusBuilder`] (feature `config`; in the prelude).
pub trait ConfigExt: Sized {
    /// Reads the config (a path, with the `EB_…` variables over it, or a [`Config`]) and
    /// applies it to the builder: its backends (connecting to Redis if it names Redis), the
    /// bus settings it sets, and its handler overrides. What the builder is given after this
    /// call wins over the file.
    ///
    /// ```
    /// use event_base::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), CoreError> {
    /// let dir = std::env::temp_dir().join(format!("eb-config-ext-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join("eb.toml");
    /// std::fs::write(&path, "[queue]\nbound = 100\n\n[handlers.echo]\nworkers = 3\n").unwrap();
    ///
    /// let echo = HandlerSpec::new("echo", "echo", event_base::handler_fn(|_m: EMessage| async { Ack::Ack }));
    /// let bus = event_base::builder().handler(echo).config(&path).await?.build().await?;
    /// assert_eq!(bus.workers("echo").len(), 3);
    /// bus.shutdown(ShutdownStrategy::Force).await?;
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok(()) }
    /// ```
    fn config(
        self,
        config: impl IntoConfig + Send,
    ) -> impl Future<Output = Result<EventBusBuilder, CoreError>> + Send;
}

impl ConfigExt for EventBusBuilder {
    async fn config(self, config: impl IntoConfig + Send) -> Result<EventBusBuilder, CoreError> {
        let config = config.into_config()?;
        config.apply(self).await
    }
}
