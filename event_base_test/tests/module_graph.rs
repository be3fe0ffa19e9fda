//! The layout of the workspace as a contract: in every crate (each member's library and each
//! of its binaries, `ebctl` among them) no file imports a file that imports it back; and in
//! `event_base_core`, the contracts (`message/`, `handler/`, `backend/`) import nothing of the
//! running bus, the folders keep their floors, and every folder says in its `mod.rs` what it
//! holds.
//!
//! An import is any `crate::a::b::…` path outside a comment; it resolves to the longest prefix
//! that is a module file (`a/b.rs`, or `a/b/mod.rs`) of the same crate root (a binary's
//! `crate::` is its own `main.rs`). Paths through the crate root's re-exports
//! (`crate::EMessage`) resolve to `lib.rs`, which imports every folder, so they count as a
//! cycle too: inside the crate, import from the file that defines the item. (`super::` and
//! relative paths are not read: a child's `super::` and its parent's `mod` are the one
//! hierarchy, not an import circle.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside the crate (`["delivery", "accept"]`); empty for `lib.rs`.
type Module = Vec<String>;

fn core_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../event_base_core/src")
}

/// Every `.rs` file below `root`, by module path: `lib.rs` (a library's root) or `main.rs` (a
/// binary's, in `src/bin/<name>/`) is the crate root, `[]`. A library's tree leaves out
/// `src/bin/` and `src/main.rs`, which are crate roots of their own.
fn modules(root: &Path) -> BTreeMap<Module, PathBuf> {
    let mut found = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    let library = root.join("lib.rs").is_file();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if library && (path == root.join("bin") || path == root.join("main.rs")) {
                continue;
            }
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
            if module.last().is_some_and(|l| l == "mod") || module == ["lib"] || module == ["main"]
            {
                module.pop();
            }
            found.insert(module, path);
        }
    }
    found
}

/// One crate root's files: a member's library, or one of its binaries.
struct CrateTree {
    /// `event_base_redis`, or `event_base_grpc (bin ebctl)`.
    name: String,
    files: BTreeMap<Module, PathBuf>,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The workspace's members, as the root `Cargo.toml` lists them.
fn members() -> Vec<String> {
    let manifest = std::fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
    let list = manifest
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .expect("the root Cargo.toml lists its members (`members = [ ... ]`)");
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty())
        .collect()
}

/// Every crate root of every member: its library (`src/lib.rs`), `src/main.rs`, and each
/// binary of `src/bin/` (`<name>.rs` alone, or `<name>/main.rs` with the files beside it).
fn crate_trees() -> Vec<CrateTree> {
    let mut trees = Vec::new();
    for member in members() {
        let src = workspace_root().join(&member).join("src");
        if src.join("lib.rs").is_file() {
            trees.push(CrateTree {
                name: member.clone(),
                files: modules(&src),
            });
        }
        if src.join("main.rs").is_file() {
            trees.push(CrateTree {
                name: format!("{member} (bin)"),
                files: BTreeMap::from([(Module::new(), src.join("main.rs"))]),
            });
        }
        let Ok(bins) = std::fs::read_dir(src.join("bin")) else {
            continue;
        };
        for entry in bins {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let files = if path.is_dir() {
                modules(&path)
            } else if path.extension().and_then(|e| e.to_str()) == Some("rs") {
                BTreeMap::from([(Module::new(), path)])
            } else {
                continue;
            };
            trees.push(CrateTree {
                name: format!("{member} (bin {name})"),
                files,
            });
        }
    }
    trees
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

/// Which modules each module of `files` imports, each with the first path that does it
/// (`crate::a::b::c`).
fn imports_of(files: &BTreeMap<Module, PathBuf>) -> BTreeMap<Module, BTreeMap<Module, String>> {
    let mut graph = BTreeMap::new();
    for (module, path) in files {
        let source = std::fs::read_to_string(path).unwrap();
        let mut imports = BTreeMap::new();
        for segments in crate_paths(&source) {
            let target = (0..=segments.len())
                .rev()
                .map(|n| segments[..n].to_vec())
                .find(|prefix| files.contains_key(prefix))
                .unwrap_or_default();
            if &target != module {
                imports
                    .entry(target)
                    .or_insert_with(|| format!("crate::{}", segments.join("::")));
            }
        }
        graph.insert(module.clone(), imports);
    }
    graph
}

/// Which modules each module of the core imports.
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
    let graph = imports_of(&files)
        .into_iter()
        .map(|(module, imports)| (module, imports.into_keys().collect()))
        .collect();
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

/// A cycle of `tree`, if it has one, told file by file with the path that makes each
/// import: `a.rs -> b.rs (crate::b::X) -> a.rs (crate::a::Y)`.
fn cycle_in(tree: &CrateTree) -> Option<String> {
    let imports = imports_of(&tree.files);
    let graph: BTreeMap<Module, BTreeSet<Module>> = imports
        .iter()
        .map(|(module, to)| (module.clone(), to.keys().cloned().collect()))
        .collect();
    let cycle = find_cycle(&graph)?;
    let file = |m: &Module| {
        let path = &tree.files[m];
        let path = path.strip_prefix(workspace_root()).unwrap_or(path);
        path.display().to_string()
    };
    let mut told = file(&cycle[0]);
    for pair in cycle.windows(2) {
        told += &format!(" -> {} ({})", file(&pair[1]), imports[&pair[0]][&pair[1]]);
    }
    Some(format!("{}: {told}", tree.name))
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let trees = crate_trees();
    let names: Vec<&str> = trees.iter().map(|t| t.name.as_str()).collect();
    for expected in [
        "event_base_core",
        "event_base_redis",
        "event_base_macro_attr",
        "event_base_grpc (bin ebctl)",
        "event_base_test",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} is not among the crates read: {names:?}"
        );
    }
    let cycles: Vec<String> = trees.iter().filter_map(cycle_in).collect();
    assert!(
        cycles.is_empty(),
        "import cycles (a file imports a file that imports it back; move what both need \
         into a file that imports neither):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn a_cycle_is_told_file_by_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::B;\npub struct A;\n").unwrap();
    std::fs::create_dir(src.join("b")).unwrap();
    std::fs::write(src.join("b/mod.rs"), "pub struct B(crate::a::A);\n").unwrap();
    std::fs::create_dir(src.join("bin")).unwrap();
    std::fs::write(src.join("bin/tool.rs"), "use crate::a::A;\n").unwrap();
    let files = modules(src);
    assert_eq!(
        files.len(),
        3,
        "lib.rs, a.rs and b/mod.rs; not the binary: {files:?}"
    );
    let told = cycle_in(&CrateTree {
        name: "demo".into(),
        files,
    })
    .expect("a -> b -> a");
    let told = told.replace(&src.display().to_string(), "");
    assert!(
        told.starts_with("demo: ")
            && told.contains("(crate::b::B)")
            && told.contains("(crate::a::A)"),
        "{told}"
    );
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
    // A backend paces a handler at the rate it was declared with (`QueueFactory::rate_limiter`
    // takes a `handler::rate::Rate`): a contract's value type, not the running bus.
    ("backend", &["message", "handler"]),
    ("shutdown", &[]),
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
/// it, and none imports one above it (`BusShared`, in `bus/`, is a record of parts that
/// live lower: the delivery hub in `delivery/`, the announcer in `system_topics/`).
const FLOORS: &[&str] = &[
    "constant",
    "node",
    // The words of stopping (strategies, the report): plain data, carried by `CoreError`.
    "shutdown",
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
    "patterns",
];

/// The imports that run back up (a folder importing one on a floor above it), known today:
/// none. The test is a ratchet: a new one fails it.
const KNOWN_BACK_UP: &[(&str, &str)] = &[];

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
