//! What a command answers ([`Shown`], or [`Done::Streamed`] for a stream it printed as it
//! went) and how an answer is printed in the chosen format: shared by `commands.rs` and
//! `top.rs`, and read by `main.rs`.

use std::io::Write;

use serde_json::Value;

use crate::cli::Format;

/// An answer, for both audiences.
pub(crate) struct Shown {
    pub(crate) json: Value,
    pub(crate) text: String,
}

/// How a command ends: its answer, or (streams) having printed as it went.
pub(crate) enum Done {
    Show(Shown),
    Streamed,
}

/// Prints one answer in `format`.
pub(crate) fn print(format: Format, shown: &Shown) {
    let mut out = std::io::stdout().lock();
    let _ = match format {
        Format::Table => writeln!(out, "{}", shown.text),
        Format::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&shown.json).unwrap_or_default()
        ),
        Format::Jsonl => writeln!(out, "{}", shown.json),
    };
}
