//! The layout of `event_base_core` as a contract: its files import each other without cycles,
//! the contracts (`message/`, `handler/`, `backend/`) import nothing of the running bus, and
//! every folder says in its `mod.rs` what it holds.
//!
//! An import is any `crate::a::b::…` path outside a comment; it resolves to the longest prefix
//! that is a module file (`a/b.rs`, or `a/b/mod.rs`). Paths through the crate root's re-exports
//! (`crate::EMessage`) resolve to `lib.rs`, which imports every folder, so they count as a
//! cycle too: inside the crate, import from the file that defines the item.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside the crate (`["delivery", "accept"]`); empty for `lib.rs`.
type Module = Vec<String>;

fn core_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../event_base_core/src")
}

/// Every `.rs` file below `dir`, by module path.
fn modules(root: &Path) -> BTreeMap<Module, PathBuf> {
    let mut found = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path.strip_prefix(root).unwrap().with_extension("");
            let mut module: Module = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|l| l == "mod") || module == ["lib"] {
                module.pop();
            }
            found.insert(module, path);
        }
    }
    found
}

/// The `crate::…` paths of one file's code (comments left out), as segments.
fn crate_paths(source: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            // `$crate::` and `my_crate::` are not this crate's paths.
            let before = rest[..at].chars().next_back();
            rest = &rest[at + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                continue;
            }
            let mut segments = Vec::new();
            let mut tail = rest;
            loop {
                let end = tail
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                if end == 0 {
                    break;
                }
                segments.push(tail[..end].to_owned());
                match tail[end..].strip_prefix("::") {
                    Some(next) => tail = next,
                    None => break,
                }
            }
            paths.push(segments);
        }
    }
    paths
}

/// Which modules each module imports.
fn import_graph() -> (
    BTreeMap<Module, BTreeSet<Module>>,
    BTreeMap<Module, PathBuf>,
) {
    let files = modules(&core_src());
    assert!(
        files.len() > 20,
        "expected the core's source tree at {}, found {} files",
        core_src().display(),
        files.len()
    );
    let mut graph = BTreeMap::new();
    for (module, path) in &files {
        let source = std::fs::read_to_string(path).unwrap();
        let mut imports = BTreeSet::new();
        for segments in crate_paths(&source) {
            let target = (0..=segments.len())
                .rev()
                .map(|n| segments[..n].to_vec())
                .find(|prefix| files.contains_key(prefix))
                .unwrap_or_default();
            if &target != module {
                imports.insert(target);
            }
        }
        graph.insert(module.clone(), imports);
    }
    (graph, files)
}

fn name(module: &Module) -> String {
    if module.is_empty() {
        "lib".to_owned()
    } else {
        module.join("/")
    }
}

/// A cycle in `graph`, if there is one, as the modules along it.
fn find_cycle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        marks: &mut BTreeMap<Module, Mark>,
        path: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = path.iter().position(|m| m == node).unwrap_or(0);
                let mut cycle = path[from..].to_vec();
                cycle.push(node.clone());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.clone(), Mark::Open);
        path.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks.insert(node.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut marks, &mut Vec::new()))
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let (graph, _) = import_graph();
    if let Some(cycle) = find_cycle(&graph) {
        let names: Vec<String> = cycle.iter().map(name).collect();
        panic!("import cycle in event_base_core: {}", names.join(" -> "));
    }
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let m = |s: &str| vec![s.to_owned()];
    let mut graph = BTreeMap::new();
    graph.insert(m("a"), BTreeSet::from([m("b")]));
    graph.insert(m("b"), BTreeSet::from([m("c")]));
    graph.insert(m("c"), BTreeSet::from([m("a")]));
    graph.insert(m("d"), BTreeSet::from([m("a")]));
    let cycle = find_cycle(&graph).expect("a -> b -> c -> a is a cycle");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4);
    graph.insert(m("c"), BTreeSet::new());
    assert_eq!(find_cycle(&graph), None);
}

#[test]
fn paths_are_read_from_code_not_comments() {
    let source = "use crate::delivery::accept::prepare; // crate::bus::shared\n\
                  /// see [`x`](crate::observe::snapshot)\n\
                  let x = $crate::EMessage::new(); let y = other_crate::a::b;\n\
                  fn f() { crate::shutdown::coordinator::shutdown(t, s) }";
    let paths = crate_paths(source);
    assert_eq!(
        paths,
        vec![
            vec!["delivery", "accept", "prepare"],
            vec!["shutdown", "coordinator", "shutdown"],
        ]
    );
}

/// The contracts, and what each may import besides itself (the crate's leaves: `constant`,
/// `error`, and `node`, the process's node name and type, which imports nothing of the crate).
const CONTRACTS: &[(&str, &[&str])] = &[
    ("message", &[]),
    ("handler", &["message"]),
    ("backend", &["message"]),
];

#[test]
fn contracts_import_nothing_of_the_running_bus() {
    let (graph, _) = import_graph();
    let mut wrong = Vec::new();
    for (module, imports) in &graph {
        let Some(folder) = module.first() else {
            continue;
        };
        let Some((_, allowed)) = CONTRACTS.iter().find(|(c, _)| c == folder) else {
            continue;
        };
        for import in imports {
            let top = import.first().map(String::as_str).unwrap_or("lib");
            let leaf = matches!(top, "constant" | "error" | "node");
            let ok = top == folder || leaf || allowed.contains(&top);
            if !ok {
                wrong.push(format!("{} imports {}", name(module), name(import)));
            }
        }
    }
    // `node` stays a leaf: it imports nothing of the crate.
    for (module, imports) in &graph {
        if module.first().map(String::as_str) == Some("node") && !imports.is_empty() {
            wrong.push(format!("the leaf {} imports {imports:?}", name(module)));
        }
    }
    assert!(wrong.is_empty(), "contracts reach into the bus: {wrong:#?}");
}

#[test]
fn every_folder_says_what_it_holds() {
    let (_, files) = import_graph();
    let mut silent = Vec::new();
    for (module, path) in &files {
        if path.file_name().is_some_and(|f| f == "mod.rs") {
            let source = std::fs::read_to_string(path).unwrap();
            if !source.starts_with("//!") {
                silent.push(name(module));
            }
        }
    }
    assert!(
        silent.is_empty(),
        "these folders' mod.rs do not open with a //! doc: {silent:?}"
    );
}

/// The crate's top-level files and folders from the ground up: each may import those below
/// it. (`observe/`'s readers and `error.rs` are the exceptions listed below: the layering in
/// `docs/log-core.md`'s first step is what takes them out.)
const FLOORS: &[&str] = &[
    "constant",
    "node",
    "error",
    "clock",
    "message",
    "handler",
    "backend",
    "observe",
    "delivery",
    "worker",
    "system_topics",
    "bus",
    "shutdown",
    "patterns",
];

/// The imports that run back up (a folder importing one on a floor above it), known today:
/// each goes with the log core's first step (`docs/log-core.md`: folders first). The test is
/// a ratchet: a new one fails it, and one that is gone must leave this list too.
const KNOWN_BACK_UP: &[(&str, &str)] = &[
    // `BusShared` (the hub) is in `bus/`, and every layer below reaches it.
    ("delivery", "bus"),
    ("observe", "bus"),
    ("system_topics", "bus"),
    ("worker", "bus"),
    // A worker's stop and a bus's shutdown meet in the shutdown plan.
    ("bus", "shutdown"),
    ("system_topics", "shutdown"),
    // `CoreError::ShutdownTimeout` carries the `ShutdownReport`.
    ("error", "shutdown"),
    // The audit publisher and the metrics store read the workers' registry.
    ("observe", "worker"),
    // Workers announce themselves on `_system.worker_discovery`.
    ("worker", "system_topics"),
];

/// Folder-level imports (first path segment to first path segment) from a floor to a higher
/// one, by [`FLOORS`]; a top-level name not in it fails the test, so the list stays whole.
fn back_up_edges(graph: &BTreeMap<Module, BTreeSet<Module>>) -> BTreeSet<(String, String)> {
    let floor = |name: &str| {
        FLOORS
            .iter()
            .position(|f| *f == name)
            .unwrap_or_else(|| panic!("`{name}` has no floor in FLOORS: add it where it belongs"))
    };
    let mut edges = BTreeSet::new();
    for (module, imports) in graph {
        let Some(from) = module.first() else {
            continue; // lib.rs sits above everything
        };
        for import in imports {
            let Some(to) = import.first() else {
                continue; // paths through lib.rs are refused by the cycle test
            };
            if to != from && floor(from) < floor(to) {
                edges.insert((from.clone(), to.clone()));
            }
        }
    }
    edges
}

#[test]
fn no_new_folder_import_runs_back_up() {
    let (graph, _) = import_graph();
    let actual = back_up_edges(&graph);
    let known: BTreeSet<(String, String)> = KNOWN_BACK_UP
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
    let new: Vec<_> = actual.difference(&known).collect();
    let gone: Vec<_> = known.difference(&actual).collect();
    assert!(
        new.is_empty(),
        "folder imports that run back up (FLOORS gives the order): {new:?}"
    );
    assert!(
        gone.is_empty(),
        "these imports no longer run back up: take them out of KNOWN_BACK_UP: {gone:?}"
    );
}

#[test]
fn an_import_from_a_lower_floor_to_a_higher_one_is_seen() {
    let m = |s: &[&str]| s.iter().map(|x| (*x).to_owned()).collect::<Module>();
    let mut graph = BTreeMap::new();
    graph.insert(
        m(&["message", "ack"]),
        BTreeSet::from([m(&["bus", "shared"]), m(&["error"])]),
    );
    graph.insert(
        m(&["bus", "shared"]),
        BTreeSet::from([m(&["message", "ack"])]),
    );
    assert_eq!(
        back_up_edges(&graph),
        BTreeSet::from([("message".to_owned(), "bus".to_owned())])
    );
}
