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
    "telemetry",
    "fault",
    "findings",
    "server",
    "db",
    "event",
    "config",
    "backoff",
    "time",
    "said_once",
];

#[test]
fn the_relays_modules_import_only_downstream_and_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    assert!(graph["coordinator"].contains("lanes"), "the graph was read: {graph:#?}");
    assert!(graph["relay::pipeline"].contains("relay::gauges"), "grouped imports are read: {graph:#?}");
    assert!(graph["source::binlog::preflight"].contains("source::binlog::settings"), "every depth: {graph:#?}");
    let mut levels = sibling_graphs(&graph);
    for (module, imports) in levels.remove("").unwrap_or_default() {
        let rank = layer(&module);
        for imported in imports {
            assert!(
                layer(&imported) > rank,
                "{module} imports {imported}, which LAYERS puts above it: move the shared part down, or fix LAYERS and src/lib.rs"
            );
        }
    }
    for (folder, siblings) in levels {
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
    for (folder, siblings) in sibling_graphs(&graph) {
        if let Some(cycle) = find_cycle(&siblings) {
            panic!("import cycle inside the kit's {}: {}", display(&folder), cycle.join(" -> "));
        }
    }
}

/// A folder's name in a message: the crate root is "the crate".
fn display(folder: &str) -> &str {
    if folder.is_empty() {
        "crate"
    } else {
        folder
    }
}

/// Where `module` sits in [`LAYERS`]; a module missing from it fails the test.
fn layer(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|m| *m == module)
        .unwrap_or_else(|| panic!("{module} is not in LAYERS: add it where it belongs"))
}

/// For each folder ("" for the crate root), the imports among its children: an import
/// of module A from module B counts in the deepest folder holding both, between the
/// children of that folder that hold them. So an import cycle anywhere, one through a
/// parent module included, is a cycle among the children of one folder. A module and its
/// own ancestors are parent and child (re-exports, shared types), never siblings.
fn sibling_graphs(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut folders: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (from, imports) in graph {
        let a: Vec<&str> = from.split("::").collect();
        for to in imports {
            let b: Vec<&str> = to.split("::").collect();
            let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
            if common == a.len() || common == b.len() {
                continue;
            }
            let folder = folders.entry(a[..common].join("::")).or_default();
            folder.entry(a[..=common].join("::")).or_default().insert(b[..=common].join("::"));
        }
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

/// The module a file belongs to (`source::binlog::decode` for
/// `src/source/binlog/decode.rs`, `db` for `src/db.rs`); `None` for the crate root.
fn node_of(relative: &Path) -> Option<String> {
    let parts = module_path(relative);
    match parts.first().map(String::as_str) {
        None | Some("lib" | "main") => None,
        _ => Some(parts.join("::")),
    }
}

/// The path segments of the module a file is.
fn module_path(relative: &Path) -> Vec<String> {
    relative.iter().map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned()).filter(|p| p != "mod").collect()
}

/// Module -> the modules its files name as `crate::a::b...` or `super::b...` (each item
/// of a `{...}` group too), resolved to the deepest module of the graph; links between a
/// module and its own ancestors or descendants are left out.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<(String, Vec<String>, String)> = rust_files(src)
        .into_iter()
        .filter_map(|file| {
            let relative = file.strip_prefix(src).expect("under src").to_owned();
            let node = node_of(&relative)?;
            let text = std::fs::read_to_string(&file).expect("read source");
            // A file's unit tests may use any module of the crate: not part of the structure.
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default().to_owned();
            Some((node, module_path(&relative), code))
        })
        .collect();
    let nodes: BTreeSet<String> = files.iter().map(|(node, _, _)| node.clone()).collect();
    let resolve = |path: &[String]| -> Option<String> {
        (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|candidate| nodes.contains(candidate))
    };
    let mut graph: BTreeMap<String, BTreeSet<String>> = nodes.iter().map(|n| (n.clone(), BTreeSet::new())).collect();
    for (node, module, text) in &files {
        for (prefix, base) in [("crate::", Vec::new()), ("super::", module[..module.len().saturating_sub(1)].to_vec())]
        {
            for (i, _) in text.match_indices(prefix) {
                for path in paths_after(&text[i + prefix.len()..]) {
                    let full: Vec<String> = base.iter().cloned().chain(path).collect();
                    let Some(target) = resolve(&full) else { continue };
                    let related = target == *node
                        || target.starts_with(&format!("{node}::"))
                        || node.starts_with(&format!("{target}::"));
                    if !related {
                        graph.entry(node.clone()).or_default().insert(target);
                    }
                }
            }
        }
    }
    graph
}

/// The module paths named at the start of `rest` (what follows `crate::` or `super::`):
/// one for `a::b::Item`, one per item for `a::{b, c::D}`.
fn paths_after(rest: &str) -> Vec<Vec<String>> {
    let mut head = Vec::new();
    let mut tail = rest;
    loop {
        let segment: String =
            tail.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit()).collect();
        if segment.is_empty() {
            break;
        }
        tail = &tail[segment.len()..];
        head.push(segment);
        match tail.strip_prefix("::") {
            Some(after) => tail = after,
            None => return vec![head],
        }
    }
    let Some(group) = tail.strip_prefix('{').and_then(|g| g.split('}').next()) else { return vec![head] };
    group
        .split(',')
        .map(|item| {
            let mut path = head.clone();
            path.extend(
                item.trim()
                    .split("::")
                    .map(str::to_owned)
                    .take_while(|s| s.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
                    .filter(|s| !s.is_empty() && s != "self"),
            );
            path
        })
        .collect()
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
    let folders = sibling_graphs(&graph);
    assert_eq!(find_cycle(&folders[""]), Some(vec!["check".into(), "source".into(), "check".into()]), "{folders:#?}");
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
