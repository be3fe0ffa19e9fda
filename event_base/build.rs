//! Prepares the guide pages for rustdoc.
//!
//! The pages in `guide/` link to each other as markdown files (`[Handlers](handler.md)`), which
//! is what a reader of the repository (or of the package's files) follows. In the API docs the
//! same pages are modules (`event_base::guide::ch03_handler`), where `handler.md` leads
//! nowhere. This script copies every page to `$OUT_DIR/guide/` with each link to another page
//! turned into an intra-doc link to that page's module (`crate::guide::ch03_handler`, anchor
//! kept), so both readings work; `src/lib.rs` includes the copies. A link to a page whose
//! feature is off points at the guide's index instead, so no build has a broken link.
//!
//! The page list below and the `guide` module in `src/lib.rs` must agree (same module names,
//! same features); `event_base_test/tests/doc_links.rs` checks the markdown side.

use std::error::Error;
use std::fs;
use std::path::Path;

/// Each page: its file, its module in `event_base::guide`, and the features it needs beyond
/// the guide's own (`memory` and `macro`), as `CARGO_FEATURE_*` names.
const PAGES: &[(&str, &str, &[&str])] = &[
    ("quick-start.md", "ch01_quick_start", &[]),
    ("core-concepts.md", "ch02_core_concepts", &[]),
    ("handler.md", "ch03_handler", &[]),
    ("middleware.md", "ch04_middleware", &["MIDDLEWARE"]),
    ("sending.md", "ch05_sending", &[]),
    ("testing.md", "ch06_testing", &[]),
    ("shutdown.md", "ch07_shutdown", &[]),
    ("observability.md", "ch08_observability", &["AUDIT"]),
    ("persistence.md", "ch09_persistence", &["PERSISTENT"]),
    ("grpc.md", "ch10_grpc", &["GRPC"]),
    ("distributed.md", "ch11_distributed", &["REDIS"]),
    ("config.md", "ch12_config", &["CONFIG"]),
    ("ordering.md", "ch13_ordering", &[]),
    ("operating.md", "ch14_operating", &[]),
    ("requests.md", "ch15_requests", &[]),
    ("schedules.md", "ch16_schedules", &[]),
    ("rate-limits.md", "ch17_rate_limits", &[]),
    ("postgres.md", "ch18_postgres", &["POSTGRES"]),
];

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo::rerun-if-changed=guide");
    let out_dir = std::env::var("OUT_DIR")?;
    let out = Path::new(&out_dir).join("guide");
    fs::create_dir_all(&out)?;
    for (file, _, _) in PAGES {
        let text = fs::read_to_string(Path::new("guide").join(file))?;
        fs::write(out.join(file), rewrite_links(&text))?;
    }
    Ok(())
}

/// The intra-doc target for a link to `target` (`handler.md#anchor`), if it names a page.
fn page_link(target: &str) -> Option<String> {
    let (file, anchor) = match target.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (target, None),
    };
    let (_, module, features) = PAGES.iter().find(|(name, _, _)| *name == file)?;
    let built = features
        .iter()
        .all(|f| std::env::var_os(format!("CARGO_FEATURE_{f}")).is_some());
    Some(match (built, anchor) {
        (true, Some(anchor)) => format!("crate::guide::{module}#{anchor}"),
        (true, None) => format!("crate::guide::{module}"),
        (false, _) => "crate::guide".to_string(),
    })
}

/// `text` with every `](page.md…)` link target replaced by its intra-doc form.
fn rewrite_links(text: &str) -> String {
    let mut result = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("](") {
        let (before, after) = rest.split_at(start + 2);
        result.push_str(before);
        let Some(end) = after.find(')') else {
            rest = after;
            continue;
        };
        let target = &after[..end];
        match page_link(target) {
            Some(link) => result.push_str(&link),
            None => result.push_str(target),
        }
        rest = &after[end..];
    }
    result.push_str(rest);
    result
}
