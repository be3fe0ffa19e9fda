//! Every relative link in the repository's markdown (README.md, CHANGELOG.md, docs/ and the
//! guide pages in event_base/guide/) leads to a file that exists, and a link with an anchor
//! (`page.md#section`, `#section`) to a heading of that page, as GitHub renders it.
//!
//! Rustdoc checks the other reading of the guide: `RUSTDOCFLAGS="-D warnings" cargo doc`
//! fails on a broken intra-doc link, including the page links `event_base/build.rs` makes.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("event_base_test is a folder of the workspace")
        .to_path_buf()
}

/// The markdown files the check covers.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    for dir in ["docs", "event_base/guide"] {
        let mut pages: Vec<PathBuf> = fs::read_dir(root.join(dir))
            .expect("the folder exists")
            .map(|entry| entry.expect("a readable entry").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
            .collect();
        pages.sort();
        files.extend(pages);
    }
    files
}

/// The text of `markdown` outside fenced code blocks and inline code, line by line (1-based).
fn prose_lines(markdown: &str) -> Vec<(usize, String)> {
    let mut lines = Vec::new();
    let mut in_fence = false;
    for (i, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        // Drop inline code spans: a `](x)` inside backticks is not a link.
        let mut prose = String::new();
        for (n, part) in line.split('`').enumerate() {
            if n % 2 == 0 {
                prose.push_str(part);
            }
        }
        lines.push((i + 1, prose));
    }
    lines
}

/// The targets of the inline links `[text](target)` in one line of prose.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find("](") {
        let after = &rest[start + 2..];
        match after.find(')') {
            Some(end) => {
                targets.push(after[..end].trim().to_string());
                rest = &after[end..];
            }
            None => break,
        }
    }
    targets
}

/// The anchors GitHub gives the headings of `markdown`: lower case, spaces to `-`, every
/// character other than letters, digits, `-` and `_` dropped, `-1`, `-2`, ... on repeats.
fn anchors(markdown: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut in_fence = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let mut anchor = String::new();
        for c in heading.to_lowercase().chars() {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                anchor.push(c);
            } else if c == ' ' {
                anchor.push('-');
            }
        }
        let mut candidate = anchor.clone();
        let mut n = 1;
        while seen.contains(&candidate) {
            candidate = format!("{anchor}-{n}");
            n += 1;
        }
        seen.insert(candidate);
    }
    seen
}

/// Why `target`, linked from `file`, is broken; `None` if it is fine or not a relative link.
fn check(root: &Path, file: &Path, target: &str) -> Option<String> {
    let external = ["http://", "https://", "mailto:"];
    if target.is_empty() || external.iter().any(|p| target.starts_with(p)) {
        return None;
    }
    // Intra-doc links (`crate::MessageId`) are rustdoc's to check.
    if target.contains("::") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let dest = if path.is_empty() {
        file.to_path_buf()
    } else {
        file.parent().expect("a file has a folder").join(path)
    };
    if !dest.exists() {
        let shown = dest.strip_prefix(root).unwrap_or(&dest);
        return Some(format!("{} does not exist", shown.display()));
    }
    let anchor = anchor?;
    if dest.extension().is_none_or(|ext| ext != "md") {
        return None;
    }
    let text = fs::read_to_string(&dest).expect("a readable page");
    if anchors(&text).contains(anchor) {
        None
    } else {
        Some(format!("no heading with anchor #{anchor}"))
    }
}

#[test]
fn every_relative_markdown_link_resolves() {
    let root = repo_root();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files(&root) {
        let text = fs::read_to_string(&file).expect("a readable page");
        for (line, prose) in prose_lines(&text) {
            for target in link_targets(&prose) {
                checked += 1;
                if let Some(why) = check(&root, &file, &target) {
                    let shown = file.strip_prefix(&root).unwrap_or(&file);
                    broken.push(format!("{}:{line}: ({target}): {why}", shown.display()));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the scan broken?"
    );
    assert!(
        broken.is_empty(),
        "broken links in the markdown:\n{}",
        broken.join("\n")
    );
}

#[test]
fn anchors_follow_github() {
    let page = "# Title\n## `wait_idle` and `Drain` across nodes\n## Typed handlers: `Json<T>` in, `Result` out\n## Title\n";
    let found = anchors(page);
    for expected in [
        "title",
        "wait_idle-and-drain-across-nodes",
        "typed-handlers-jsont-in-result-out",
        "title-1",
    ] {
        assert!(found.contains(expected), "{expected} not in {found:?}");
    }
}
