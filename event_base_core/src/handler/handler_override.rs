//! [`HandlerOverride`]: settings that replace a handler's own, by handler name, when a bus is
//! built (a config file's `[handlers.<name>]`, or code that tunes a `#[handler]` it did not
//! write).

use std::time::Duration;

use crate::error::CoreError;
use crate::handler::rate::Rate;
use crate::handler::spec::HandlerSpec;

/// Settings that replace what a handler was declared with, for one bus. Each field left
/// `None` keeps the handler's own value.
///
/// Added with [`EventBusBuilder::handler_override`](crate::EventBusBuilder::handler_override);
/// applied when the bus is built, to a handler added by value or by `#[handler]` alike.
///
/// ```
/// use event_base_core::HandlerOverride;
/// use std::time::Duration;
///
/// let more = HandlerOverride::new().workers(8).retries(5).timeout(Duration::from_secs(30));
/// assert_eq!(more.workers, Some(8));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "an override does nothing until it is given to EventBusBuilder::handler_override"]
pub struct HandlerOverride {
    /// Number of workers (at least 1).
    pub workers: Option<usize>,
    /// Retries before a message becomes a dead letter.
    pub retries: Option<u32>,
    /// Per-delivery timeout.
    pub timeout: Option<Duration>,
    /// At most this many handler starts per period ([`HandlerSpec::rate`]).
    pub rate: Option<Rate>,
    /// Where the override comes from (e.g. `eb.toml: handlers.send_email`), named in the
    /// error when it names no handler of the bus.
    pub origin: Option<String>,
}

impl HandlerOverride {
    /// An override that changes nothing yet.
    pub fn new() -> Self {
        HandlerOverride::default()
    }

    /// Replaces the number of workers.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// Replaces the retries.
    pub fn retries(mut self, n: u32) -> Self {
        self.retries = Some(n);
        self
    }

    /// Replaces the per-delivery timeout.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// Replaces the rate ([`HandlerSpec::rate`]).
    pub fn rate(mut self, rate: Rate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// Says where the override comes from, for the error when it names no handler.
    pub fn origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = Some(origin.into());
        self
    }

    /// Applies the override to `spec`.
    fn apply(&self, spec: &mut HandlerSpec) {
        if let Some(n) = self.workers {
            spec.workers = n;
        }
        if let Some(n) = self.retries {
            spec.retries = Some(n);
        }
        if let Some(t) = self.timeout {
            spec.timeout = Some(t);
        }
        if let Some(r) = self.rate {
            spec.rate = Some(r);
        }
    }
}

/// Applies each `(name, override)` to the spec of that name; a name no spec has is an error
/// that lists the names there are (a typo in a config file must not go unnoticed).
pub(crate) fn apply_overrides(
    specs: &mut [HandlerSpec],
    overrides: &[(String, HandlerOverride)],
) -> Result<(), CoreError> {
    for (name, o) in overrides {
        let Some(spec) = specs.iter_mut().find(|s| s.name == *name) else {
            let mut names: Vec<&str> = specs
                .iter()
                .filter(|s| !s.topic.is_system())
                .map(|s| s.name.as_str())
                .collect();
            names.sort_unstable();
            let from = o
                .origin
                .as_deref()
                .map(|o| format!(" (from {o})"))
                .unwrap_or_default();
            return Err(CoreError::Config(format!(
                "a handler override{from} names handler `{name}`, which this bus does not have; its handlers are: {}. use a handler's name (a #[handler]'s is its function's name; a HandlerSpec's, the name it was given)",
                if names.is_empty() { "none".to_owned() } else { names.join(", ") }
            )));
        };
        o.apply(spec);
    }
    Ok(())
}
