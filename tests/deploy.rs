//! The deployment files stay valid and match the documents: the compose file parses
//! (`docker-compose config`, no engine needed), the image is built with the
//! README's own build command, the alert rules pass promtool's check and their unit
//! tests, the Grafana dashboard is well formed, and every metric the alerts and the
//! dashboard use is one the metrics table of docs/operations.md documents.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// Where the metrics table is (`| metric | meaning |`).
const METRICS_TABLE: &str = "docs/operations.md";

/// The README's build command, as the Dockerfile must run it.
const BUILD_COMMAND: &str = "cargo build --release --locked -p outbox-relay --bin outbox-relay";

fn repo_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn the_compose_file_is_valid() {
    let output = Command::new("docker-compose")
        .args(["--file", "docker-compose.yml", "config", "--quiet"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("run docker-compose ({e}); scripts/stack up installs Debian's docker-compose"));
    assert!(output.status.success(), "docker-compose config: {}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn the_image_is_built_with_the_readmes_build_command() {
    assert!(repo_file("README.md").contains(BUILD_COMMAND), "the README gives the build command");
    let dockerfile = repo_file("Dockerfile");
    assert!(
        dockerfile.lines().any(|line| line.trim() == format!("RUN {BUILD_COMMAND}")),
        "the Dockerfile's build stage runs the README's build command:\n{dockerfile}"
    );
    for line in ["USER relay", "STOPSIGNAL SIGTERM", "VOLUME /var/lib/outbox-relay"] {
        assert!(dockerfile.contains(line), "the image has `{line}`");
    }
    // The instruction itself, continued lines joined: not a comment that mentions it.
    let instructions = dockerfile.replace("\\\n", " ");
    let healthcheck = instructions.lines().find(|line| line.starts_with("HEALTHCHECK ")).expect("a HEALTHCHECK");
    assert!(
        healthcheck.split_once(" CMD ").is_some_and(|(_, command)| command.contains("/readyz")),
        "the image's health check asks /readyz: {healthcheck}"
    );
}

const ALERTS: &str = "deploy/prometheus/alerts.yml";
const ALERTS_TEST: &str = "deploy/prometheus/alerts_test.yml";
const DASHBOARD: &str = "deploy/grafana/outbox-relay.json";

/// What to do when promtool is missing: the stack unpacks it and its env names it.
const PROMTOOL_FIX: &str = "run `scripts/stack up` (it unpacks promtool from Debian's prometheus package) \
     and `eval \"$(scripts/stack env)\"` (it sets OUTBOX_RELAY_PROMTOOL)";

/// Runs `promtool ARGS` in the repository, failing with its output unless it succeeds.
fn promtool(args: &[&str]) {
    let promtool = std::env::var("OUTBOX_RELAY_PROMTOOL")
        .unwrap_or_else(|_| panic!("OUTBOX_RELAY_PROMTOOL is not set: {PROMTOOL_FIX}"));
    let output = Command::new(&promtool)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("run {promtool} ({e}): {PROMTOOL_FIX}"));
    assert!(
        output.status.success(),
        "promtool {} failed:\n{}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_alert_rules_pass_promtools_check() {
    promtool(&["check", "rules", ALERTS]);
}

#[test]
fn the_alert_rules_pass_their_unit_tests() {
    promtool(&["test", "rules", ALERTS_TEST]);
}

/// The relay's metric names a text mentions: identifiers that start `relay_`, `outbox_`
/// or `process_`.
fn metric_names(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| ["relay_", "outbox_", "process_"].iter().any(|prefix| word.starts_with(prefix)))
        .map(str::to_owned)
        .collect()
}

/// The names in the first column of the metrics table (`| metric | meaning |`),
/// without their labels: a cell may name several metrics (`relay_leader` / `relay_leader_term`).
fn documented_metrics(document: &str) -> BTreeSet<String> {
    document
        .lines()
        .skip_while(|line| line.trim() != "| metric | meaning |")
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .filter_map(|line| line.split('|').nth(1))
        .flat_map(|cell| cell.split('`').skip(1).step_by(2))
        .map(|name| name.split('{').next().unwrap_or(name).to_owned())
        .collect()
}

/// A histogram's series (`_bucket`, `_sum`, `_count`) are documented under the histogram's name.
fn is_documented(name: &str, documented: &BTreeSet<String>) -> bool {
    documented.contains(name)
        || ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|suffix| name.strip_suffix(suffix))
            .any(|base| documented.contains(base))
}

/// The dashboard's panels, those inside collapsed rows included.
fn dashboard_panels(dashboard: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut panels = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        panels.push(panel);
        panels.extend(panel["panels"].as_array().into_iter().flatten());
    }
    panels
}

fn dashboard() -> serde_json::Value {
    serde_json::from_str(&repo_file(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"))
}

fn panel_exprs(panel: &serde_json::Value) -> Vec<&str> {
    panel["targets"].as_array().into_iter().flatten().filter_map(|target| target["expr"].as_str()).collect()
}

#[test]
fn every_dashboard_panel_has_a_title_and_queries_a_relay_metric() {
    let dashboard = dashboard();
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|variable| variable["name"].as_str())
        .collect();
    assert!(
        variables.contains(&"DS_PROMETHEUS") && variables.contains(&"instance"),
        "{DASHBOARD} has the DS_PROMETHEUS and instance variables: {variables:?}"
    );
    let panels = dashboard_panels(&dashboard);
    assert!(panels.len() > 1, "{DASHBOARD} has panels");
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(!title.trim().is_empty(), "a panel of {DASHBOARD} has no title: {panel}");
        if panel["type"] == "row" {
            continue;
        }
        assert!(
            panel_exprs(panel).iter().any(|expr| !metric_names(expr).is_empty()),
            "panel {title:?} of {DASHBOARD} has no query on a relay_, outbox_ or process_ metric"
        );
    }
}

#[test]
fn every_metric_the_alerts_and_dashboard_use_is_in_the_documented_metrics_table() {
    let documented = documented_metrics(&repo_file(METRICS_TABLE));
    assert!(
        documented.contains("outbox_oldest_pending_seconds"),
        "{METRICS_TABLE} has its metrics table: {documented:?}"
    );
    let dashboard = dashboard();
    let dashboard_metrics = dashboard_panels(&dashboard).into_iter().flat_map(panel_exprs).flat_map(metric_names);
    for (file, names) in [(ALERTS, metric_names(&repo_file(ALERTS))), (DASHBOARD, dashboard_metrics.collect())] {
        assert!(!names.is_empty(), "{file} uses relay metrics");
        let undocumented: Vec<&String> = names.iter().filter(|name| !is_documented(name, &documented)).collect();
        assert!(
            undocumented.is_empty(),
            "{file} uses metrics the metrics table of {METRICS_TABLE} does not list: {undocumented:?}"
        );
    }
}
