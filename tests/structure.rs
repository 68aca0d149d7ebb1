//! The shape of the code, checked: applications depend on a small crate, the relay's
//! modules import only downstream (the order `src/lib.rs` states), and neither crate
//! has an import cycle, not even one through a parent module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The crates an application must never pull in through the kit.
const HEAVY: [&str; 4] = ["rocksdb", "librocksdb-sys", "axum", "clap"];

#[test]
fn the_application_kit_pulls_in_no_rocksdb_http_server_or_cli_parser() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(["tree", "--offline", "--locked", "-p", "outbox-kit", "-e", "normal,build", "--prefix", "none"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    let tree = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&output.stderr));
    let crates: BTreeSet<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(crates.contains("mysql_async") && crates.contains("rocketmq-client-rust"), "{tree}");
    for heavy in HEAVY {
        assert!(!crates.contains(heavy), "outbox-kit depends on {heavy}:\n{tree}");
    }
}

/// The relay's top-level modules, upstream first: a module imports only modules below
/// it. The same order is stated in `src/lib.rs`.
const LAYERS: &[&str] = &[
    "cli",
    "exit",
    "relay",
    "ops",
    "coordinator",
    "supervise",
    "http",
    "error",
    "checkpoint",
    "source",
    "lanes",
    "write_back",
    "leader",
    "health",
    "store",
    "metrics",
    "rocketmq",
    "fault",
    "findings",
    "server",
    "db",
    "event",
    "config",
    "backoff",
    "time",
];

#[test]
fn the_relays_modules_import_only_downstream_and_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    assert!(graph["coordinator"].contains("lanes"), "the graph was read: {graph:#?}");
    assert!(graph["source::binlog"].contains("source::sweep"), "second-level modules are nodes: {graph:#?}");
    let folders = folder_graph(&graph);
    for (module, imports) in &folders {
        let rank = layer(module);
        for imported in imports {
            assert!(
                layer(imported) > rank,
                "{module} imports {imported}, which LAYERS puts above it: move the shared part down, or fix LAYERS and src/lib.rs"
            );
        }
    }
    for (folder, siblings) in sibling_graphs(&graph) {
        if let Some(cycle) = find_cycle(&siblings) {
            panic!("import cycle inside {folder}: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_kits_modules_import_each_other_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/outbox-kit/src");
    let graph = module_graph(&src);
    assert!(graph["consumer::idempotent"].contains("consumer::subscription"), "the graph was read: {graph:#?}");
    if let Some(cycle) = find_cycle(&folder_graph(&graph)) {
        panic!("import cycle between the kit's folders: {}", cycle.join(" -> "));
    }
    for (folder, siblings) in sibling_graphs(&graph) {
        if let Some(cycle) = find_cycle(&siblings) {
            panic!("import cycle inside the kit's {folder}: {}", cycle.join(" -> "));
        }
    }
}

/// Where `module` sits in [`LAYERS`]; a module missing from it fails the test.
fn layer(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|m| *m == module)
        .unwrap_or_else(|| panic!("{module} is not in LAYERS: add it where it belongs"))
}

/// The graph with every module collapsed to its top-level folder: a child's imports
/// are its folder's, so a cycle through a parent and its child shows as one between
/// folders.
fn folder_graph(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let top = |node: &str| node.split("::").next().unwrap_or(node).to_owned();
    let mut folders: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (node, imports) in graph {
        let entry = folders.entry(top(node)).or_default();
        entry.extend(imports.iter().map(|i| top(i)).filter(|i| *i != top(node)));
    }
    folders
}

/// For each folder, the imports among its children (a child and the folder's own
/// `mod.rs` are parent and child: their links are re-exports and shared types).
fn sibling_graphs(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut folders: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (node, imports) in graph {
        let Some((folder, _)) = node.split_once("::") else { continue };
        let siblings = imports.iter().filter(|i| i.starts_with(&format!("{folder}::"))).cloned().collect();
        folders.entry(folder.to_owned()).or_default().insert(node.clone(), siblings);
    }
    folders
}

#[test]
fn no_sql_in_the_broker_folder_and_no_source_type_built_in_the_sql_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for file in rust_files(&src.join("rocketmq")) {
        let text = std::fs::read_to_string(&file).expect("read source");
        assert!(!text.contains("mysql_async"), "{} talks to the database", file.display());
    }
    for file in rust_files(&src.join("store")) {
        let text = std::fs::read_to_string(&file).expect("read source");
        assert!(!text.contains("crate::source"), "{} builds or reads a source type", file.display());
    }
}

/// The module a file belongs to, down to two levels (`source::binlog` for
/// `src/source/binlog/decode.rs`, `db` for `src/db.rs`); `None` for the crate root.
fn node_of(relative: &Path) -> Option<String> {
    let parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .filter(|p| p != "mod")
        .collect();
    match parts.first().map(String::as_str) {
        None | Some("lib" | "main") => None,
        _ => Some(parts.iter().take(2).cloned().collect::<Vec<_>>().join("::")),
    }
}

/// Module -> the modules its files name as `crate::a[::b]` or `super::b`, resolved to
/// the deepest module of the graph; links between a module and its own parent or
/// child (re-exports) are left out.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<(String, PathBuf, String)> = rust_files(src)
        .into_iter()
        .filter_map(|file| {
            let relative = file.strip_prefix(src).expect("under src").to_owned();
            let node = node_of(&relative)?;
            let text = std::fs::read_to_string(&file).expect("read source");
            Some((node, relative, text))
        })
        .collect();
    let nodes: BTreeSet<String> = files.iter().map(|(node, _, _)| node.clone()).collect();
    let resolve = |path: &[String]| -> Option<String> {
        (1..=path.len().min(2)).rev().map(|n| path[..n].join("::")).find(|candidate| nodes.contains(candidate))
    };
    let mut graph: BTreeMap<String, BTreeSet<String>> = nodes.iter().map(|n| (n.clone(), BTreeSet::new())).collect();
    for (node, relative, text) in &files {
        let module: Vec<String> = relative
            .iter()
            .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
            .filter(|p| p != "mod")
            .collect();
        for (prefix, base) in [("crate::", Vec::new()), ("super::", module[..module.len().saturating_sub(1)].to_vec())]
        {
            for (i, _) in text.match_indices(prefix) {
                let rest = &text[i + prefix.len()..];
                let mut path = base.clone();
                path.extend(
                    rest.split("::")
                        .map(|segment| {
                            segment.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect::<String>()
                        })
                        .take_while(|segment| !segment.is_empty())
                        .take(2),
                );
                let Some(target) = resolve(&path) else { continue };
                let related = target == *node
                    || target.starts_with(&format!("{node}::"))
                    || node.starts_with(&format!("{target}::"));
                if !related {
                    graph.entry(node.clone()).or_default().insert(target);
                }
            }
        }
    }
    graph
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// A cycle in `graph`, if any, as the modules along it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut cycle = path[start..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn a_circle_through_a_parent_module_is_found() {
    // The circle the tree once had: `check`'s source checks used the binlog settings,
    // whose verdicts were `check`'s report types.
    let dir = std::env::temp_dir().join(format!("structure-fixture-{}", std::process::id()));
    let files = [
        ("check/mod.rs", "mod source;\npub struct Finding;"),
        ("check/source.rs", "use crate::source::binlog::settings::verdicts;"),
        ("source/mod.rs", "pub mod binlog;"),
        ("source/binlog/mod.rs", "pub mod settings;"),
        ("source/binlog/settings.rs", "use crate::check::Finding;\npub fn verdicts() {}"),
    ];
    for (path, text) in files {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().expect("a parent")).expect("create the fixture");
        std::fs::write(&file, text).expect("write the fixture");
    }
    let graph = module_graph(&dir);
    std::fs::remove_dir_all(&dir).expect("remove the fixture");
    assert_eq!(find_cycle(&graph), None, "module by module there is no cycle: {graph:#?}");
    let folders = folder_graph(&graph);
    assert_eq!(find_cycle(&folders), Some(vec!["check".into(), "source".into(), "check".into()]), "{folders:#?}");
}

#[test]
fn a_cycle_is_found_when_there_is_one() {
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec![])]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
            .collect();
    assert_eq!(find_cycle(&graph), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
}
