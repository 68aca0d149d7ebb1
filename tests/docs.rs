//! The documents stay whole: every relative link in README.md and docs/ points to a file
//! (and a heading) that exists, every key the configuration has is in the reference of
//! docs/configuration.md, and every command of the CLI is in docs/cli.md.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// README.md and every Markdown file under docs/.
fn documents() -> Vec<PathBuf> {
    let mut documents = vec![root().join("README.md")];
    let docs = std::fs::read_dir(root().join("docs")).expect("docs/");
    documents
        .extend(docs.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "md")));
    documents
}

/// The targets of the Markdown links `[text](target)` in `text`.
fn link_targets(text: &str) -> Vec<&str> {
    text.match_indices("](").filter_map(|(at, _)| text[at + 2..].split_once(')').map(|(target, _)| target)).collect()
}

/// The anchor a heading gets: lower case, punctuation but `-` and `_` dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(document: &str) -> BTreeSet<String> {
    document.lines().filter_map(|line| line.strip_prefix('#')).map(|h| anchor(h.trim_start_matches('#'))).collect()
}

#[test]
fn every_relative_link_resolves_to_a_file_and_heading() {
    let mut broken = Vec::new();
    for document in documents() {
        let text = read(&document);
        for target in link_targets(&text) {
            if target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, heading) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() { document.clone() } else { document.parent().expect("a folder").join(file) };
            let resolves =
                path.exists() && (heading.is_empty() || path.is_dir() || anchors(&read(&path)).contains(heading));
            if !resolves {
                broken.push(format!("{}: ({target})", document.strip_prefix(root()).unwrap_or(&document).display()));
            }
        }
    }
    assert!(broken.is_empty(), "links that point nowhere: {broken:#?}");
}

#[test]
fn the_readme_stays_a_short_front_door() {
    let lines = read(&root().join("README.md")).lines().count();
    assert!(lines <= 350, "README.md has {lines} lines; move reference material to docs/");
}

/// `section.key` of every value in a TOML table, topics' names as `NAME`.
fn keys(prefix: &str, table: &toml::Table, into: &mut BTreeSet<String>) {
    for (name, value) in table {
        let name = if prefix == "rocketmq.topics" { "NAME" } else { name };
        let key = if prefix.is_empty() { name.to_owned() } else { format!("{prefix}.{name}") };
        match value {
            toml::Value::Table(inner) => keys(&key, inner, into),
            _ => {
                into.insert(key);
            }
        }
    }
}

fn relay(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap_or_else(|e| panic!("run outbox-relay {args:?}: {e}"));
    assert!(output.status.success(), "outbox-relay {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn every_configuration_key_is_in_the_reference() {
    let config = root().join("config/relay.toml");
    let effective: toml::Table = relay(&["config", "--config", &config.display().to_string()])
        .parse()
        .expect("`outbox-relay config` prints TOML");
    let mut all = BTreeSet::new();
    keys("", &effective, &mut all);
    assert!(all.contains("lanes.max_in_flight") && all.contains("rocketmq.topics.NAME.queue_count"), "{all:?}");
    let reference = read(&root().join("docs/configuration.md"));
    let missing: Vec<&String> = all.iter().filter(|key| !reference.contains(&format!("`{key}`"))).collect();
    assert!(missing.is_empty(), "keys docs/configuration.md does not describe: {missing:?}");
}

/// The subcommands a `--help` lists (its "Commands:" section), `help` left out.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_command_is_in_the_cli_reference() {
    let reference = read(&root().join("docs/cli.md"));
    let mut commands = Vec::new();
    for command in subcommands(&relay(&["--help"])) {
        let nested = subcommands(&relay(&[&command, "--help"]));
        if nested.is_empty() {
            commands.push(command);
        } else {
            commands.extend(nested.into_iter().map(|inner| format!("{command} {inner}")));
        }
    }
    assert!(commands.iter().any(|c| c == "admin create-topic"), "the CLI's commands were read: {commands:?}");
    let missing: Vec<&String> =
        commands.iter().filter(|command| !reference.contains(&format!("outbox-relay {command}"))).collect();
    assert!(missing.is_empty(), "commands docs/cli.md does not describe: {missing:?}");
}
