//! The `EB_…` environment variables over a config file.
//!
//! `EB_<SECTION>__<KEY>` sets `<section>.<key>` (`EB_WAL__DIR` is `wal.dir`), and
//! `EB_HANDLERS__<NAME>__<KEY>` sets `handlers.<name>.<key>`: a double underscore between
//! levels, upper case folded to lower. A variable that starts with `EB_` but has no double
//! underscore is not read (other tools' `EB_GRPC_ADDR`, `EB_REDIS_URL` stay theirs). A
//! variable naming a section or key the file does not have is an error naming it.
//!
//! Each key has a kind (string, whole number, boolean), so a variable's text becomes the value
//! its key takes: `EB_ADMIN__ADMIN_TOKEN=12345` stays the string "12345".

use std::collections::BTreeMap;

use event_base_core::ConfigError;

/// What a key's value is, to read a variable's text as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Text (names, paths, URLs, tokens, durations, enum names).
    Str,
    /// A whole number.
    Int,
    /// `true` or `false`.
    Bool,
}

use Kind::{Bool, Int, Str};

/// Every section and its keys with their kinds; `handlers` holds these keys per handler.
/// `tests::every_key_is_a_field` checks each against the sections' fields.
const SECTIONS: &[(&str, &[(&str, Kind)])] = &[
    (
        "bus",
        &[
            ("name", Str),
            ("node_name", Str),
            ("node_type", Str),
            ("batch_size", Int),
            ("dedup_window", Str),
            ("audit_capacity", Int),
        ],
    ),
    (
        "wal",
        &[
            ("kind", Str),
            ("dir", Str),
            ("sync_policy", Str),
            ("batch_max_records", Int),
            ("batch_max_delay", Str),
            ("segment_bytes", Int),
        ],
    ),
    ("queue", &[("kind", Str), ("bound", Int)]),
    (
        "redis",
        &[
            ("url", Str),
            ("prefix", Str),
            ("visibility_timeout", Str),
            ("heartbeat", Str),
        ],
    ),
    (
        "handlers",
        &[
            ("workers", Int),
            ("retries", Int),
            ("timeout", Str),
            ("rate", Str),
        ],
    ),
    (
        "admin",
        &[
            ("grpc_addr", Str),
            ("http_addr", Str),
            ("dashboard", Bool),
            ("read_token", Str),
            ("admin_token", Str),
            ("allow_unauthenticated", Bool),
            ("tls_cert", Str),
            ("tls_key", Str),
            ("request_timeout", Str),
            ("concurrency_limit_per_connection", Int),
            ("max_decoding_message_size", Int),
            ("max_encoding_message_size", Int),
            ("health", Bool),
            ("reflection", Bool),
        ],
    ),
];

/// The prefix of the variables read.
pub(crate) const PREFIX: &str = "EB_";

/// Sets the keys the `EB_…` variables among `vars` name in `table` (a variable wins over the
/// file), and answers which key each variable set: `key -> variable`.
pub(crate) fn overlay(
    table: &mut toml::Table,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut origins = BTreeMap::new();
    let mut vars: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(name, _)| name.starts_with(PREFIX) && name.contains("__"))
        .collect();
    // One order whatever the environment's: the same error for the same variables.
    vars.sort();
    for (name, text) in vars {
        let path: Vec<String> = name[PREFIX.len()..]
            .split("__")
            .map(str::to_lowercase)
            .collect();
        let kind = kind_of(&name, &path)?;
        let key = path.join(".");
        let value = parse(&name, &key, kind, &text)?;
        insert(table, &name, &path, value)?;
        origins.insert(key, name);
    }
    Ok(origins)
}

/// The kind of the key `path` names, or the error naming the variable.
fn kind_of(var: &str, path: &[String]) -> Result<Kind, ConfigError> {
    let invalid = |key: String, message: String| ConfigError::Invalid {
        origin: var.to_owned(),
        key,
        message,
    };
    let section = path.first().map(String::as_str).unwrap_or_default();
    let Some((_, keys)) = SECTIONS.iter().find(|(s, _)| *s == section) else {
        let names: Vec<&str> = SECTIONS.iter().map(|(s, _)| *s).collect();
        return Err(invalid(
            section.to_owned(),
            format!(
                "unknown section; the sections are {} (EB_<SECTION>__<KEY>, e.g. EB_WAL__DIR)",
                names.join(", ")
            ),
        ));
    };
    let (key, expected) = if section == "handlers" {
        match path {
            [_, handler, key] if !handler.is_empty() => (key, 3),
            _ => {
                return Err(invalid(
                    path.join("."),
                    "a handler's key is set by EB_HANDLERS__<HANDLER NAME>__<KEY>, e.g. EB_HANDLERS__SEND_EMAIL__WORKERS".into(),
                ))
            }
        }
    } else {
        match path {
            [_, key] => (key, 2),
            _ => {
                return Err(invalid(
                    path.join("."),
                    format!(
                        "a key of [{section}] is set by EB_{}__<KEY>, one double underscore",
                        section.to_uppercase()
                    ),
                ))
            }
        }
    };
    debug_assert_eq!(path.len(), expected);
    match keys.iter().find(|(k, _)| k == key) {
        Some((_, kind)) => Ok(*kind),
        None => {
            let names: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
            Err(invalid(
                path.join("."),
                format!("unknown key; [{section}] has {}", names.join(", ")),
            ))
        }
    }
}

/// The variable's text as a value of `kind`.
fn parse(var: &str, key: &str, kind: Kind, text: &str) -> Result<toml::Value, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        origin: var.to_owned(),
        key: key.to_owned(),
        message,
    };
    match kind {
        Str => Ok(toml::Value::String(text.to_owned())),
        Int => text
            .trim()
            .parse::<i64>()
            .map(toml::Value::Integer)
            .map_err(|_| invalid(format!("\"{text}\" is not a whole number"))),
        Bool => match text.trim() {
            "true" => Ok(toml::Value::Boolean(true)),
            "false" => Ok(toml::Value::Boolean(false)),
            _ => Err(invalid(format!("\"{text}\" is neither true nor false"))),
        },
    }
}

/// Puts `value` at `path` in `table`, making the tables on the way.
fn insert(
    table: &mut toml::Table,
    var: &str,
    path: &[String],
    value: toml::Value,
) -> Result<(), ConfigError> {
    let Some((last, parents)) = path.split_last() else {
        return Ok(());
    };
    let mut at = table;
    for (i, part) in parents.iter().enumerate() {
        let entry = at
            .entry(part.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        at = match entry {
            toml::Value::Table(t) => t,
            _ => {
                return Err(ConfigError::Invalid {
                    origin: var.to_owned(),
                    key: path[..=i].join("."),
                    message: "the file gives this a value that is not a table, so the variable cannot set a key in it; make it a [section] in the file".into(),
                })
            }
        };
    }
    at.insert(last.clone(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key the variables may set is a field of its section: a table with all of them
    /// set deserializes.
    #[test]
    fn every_key_is_a_field() {
        let mut vars = Vec::new();
        for (section, keys) in SECTIONS {
            for (key, kind) in *keys {
                let text = match (key, kind) {
                    (_, Int) => "7",
                    (_, Bool) => "true",
                    (&"kind", _) if *section == "wal" => "memory",
                    (&"kind", _) => "flume",
                    (&"node_type", _) => "worker",
                    (&"sync_policy", _) => "batch",
                    (&"rate", _) => "7/s",
                    (k, _)
                        if k.contains("delay")
                            || k.contains("timeout")
                            || k.contains("window")
                            || *k == "heartbeat" =>
                    {
                        "1s"
                    }
                    _ => "text",
                };
                let name = if *section == "handlers" {
                    format!("EB_HANDLERS__H__{}", key.to_uppercase())
                } else {
                    format!("EB_{}__{}", section.to_uppercase(), key.to_uppercase())
                };
                vars.push((name, text.to_owned()));
            }
        }
        let mut table = toml::Table::new();
        let origins = overlay(&mut table, vars).unwrap();
        assert!(origins.contains_key("handlers.h.workers"));
        let config: super::super::Config = toml::Value::Table(table).try_into().unwrap();
        assert_eq!(config.handlers["h"].workers, Some(7));
        assert_eq!(config.admin.admin_token.as_deref(), Some("text"));
    }

    #[test]
    fn a_variable_without_a_double_underscore_is_not_read() {
        let mut table = toml::Table::new();
        let origins = overlay(&mut table, [("EB_GRPC_ADDR".to_owned(), "x".to_owned())]).unwrap();
        assert!(origins.is_empty() && table.is_empty());
    }
}
