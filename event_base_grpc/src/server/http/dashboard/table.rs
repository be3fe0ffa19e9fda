//! [`Table`]: a table of the page as the server describes it, columns and rows, so that the
//! page draws every table with one piece of script and what a table shows is decided here,
//! next to the code that fills it.
//!
//! A column says how its cells read ([`Kind`]): text, a number, a state, a duration, or a
//! rate, which the page works out itself from two snapshots (the difference of a counter over
//! the time between them: the server keeps no history). A row may carry actions: a button
//! for admins that asks for confirmation, then `POST`s `{}` to the row's endpoint.

use serde_json::{json, Map, Value};

/// How the page shows a column's cells.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    /// Text as it is.
    Text,
    /// A number.
    Count,
    /// A state (`idle`, `working`, ...), shown with a colour of its own.
    State,
    /// Milliseconds.
    Millis,
    /// Per second: the difference of the counter in cell `of` between two snapshots, over
    /// the time between them (empty on the first snapshot; a counter that went down counts
    /// as no change).
    Rate {
        /// The key of the counter's cell.
        of: &'static str,
    },
}

/// A column: the key of its cells in each row, its heading, how it reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Column {
    pub(super) key: &'static str,
    pub(super) title: &'static str,
    pub(super) kind: Kind,
}

/// A column (for the `const` tables of columns).
pub(super) const fn column(key: &'static str, title: &'static str, kind: Kind) -> Column {
    Column { key, title, kind }
}

impl Column {
    fn to_json(self) -> Value {
        let (kind, of) = match self.kind {
            Kind::Text => ("text", None),
            Kind::Count => ("count", None),
            Kind::State => ("state", None),
            Kind::Millis => ("millis", None),
            Kind::Rate { of } => ("rate", Some(of)),
        };
        json!({"key": self.key, "title": self.title, "kind": kind, "of": of})
    }
}

/// A button on a row, for admins: the page asks `confirm` first, then `POST`s `{}` to
/// `post` (relative to the page).
#[derive(Debug, Clone)]
pub(super) struct Action {
    pub(super) label: &'static str,
    pub(super) post: String,
    pub(super) confirm: String,
}

/// A row: its key (stable between snapshots: rates pair rows by it), its cells by column
/// key, its actions.
#[derive(Debug, Clone, Default)]
pub(super) struct Row {
    key: String,
    cells: Map<String, Value>,
    actions: Vec<Action>,
}

impl Row {
    /// A row keyed `key`, with no cells yet.
    pub(super) fn new(key: impl Into<String>) -> Self {
        Row {
            key: key.into(),
            ..Row::default()
        }
    }

    /// Sets the cell of column `key`.
    pub(super) fn cell(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.cells.insert(key.to_owned(), value.into());
        self
    }

    /// Adds a button.
    pub(super) fn action(mut self, action: Action) -> Self {
        self.actions.push(action);
        self
    }

    fn to_json(&self) -> Value {
        json!({
            "key": self.key,
            "cells": self.cells,
            "actions": self.actions.iter().map(|a| json!({
                "label": a.label, "post": a.post, "confirm": a.confirm,
            })).collect::<Vec<_>>(),
        })
    }
}

/// A table: its columns and rows, as the page reads it (`{"columns": [..], "rows": [..]}`).
pub(super) fn table(columns: &[Column], rows: &[Row]) -> Value {
    json!({
        "columns": columns.iter().map(|c| c.to_json()).collect::<Vec<_>>(),
        "rows": rows.iter().map(Row::to_json).collect::<Vec<_>>(),
    })
}

/// A duration in milliseconds, with microseconds as the fraction.
pub(super) fn millis(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A path segment for an endpoint in a row's action: percent-encoded, so any name (with `/`,
/// spaces, ...) stays one segment.
pub(super) fn segment(name: &str) -> String {
    percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC).to_string()
}
