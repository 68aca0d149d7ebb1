//! The deployment files stay valid and match the documents: the compose file parses
//! (`docker-compose config`, no engine needed) and holds no secret, the Kubernetes
//! overlays render (`kubectl kustomize`, no cluster needed) into manifests that pass
//! the Kubernetes schemas (`kubernetes-validate`, from PyPI) at the restricted Pod
//! Security level with no Secret in them, the image is built with the README's own
//! build command, the alert rules pass promtool's check and their unit
//! tests, the Grafana dashboard is well formed, and every metric the alerts and the
//! dashboard use is one the metrics table of docs/operations.md documents.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use serde::Deserialize;

/// Where the metrics table is (`| metric | meaning |`).
const METRICS_TABLE: &str = "docs/operations.md";

/// The README's build command, as the Dockerfile must run it.
const BUILD_COMMAND: &str = "cargo build --release --locked -p outbox-relay --bin outbox-relay";

fn repo_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The demo secrets the compose file mounts: (name, value).
fn compose_secrets() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/compose/secrets");
    let mut secrets: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_none())
        .map(|path| {
            let value = std::fs::read_to_string(&path).expect("a secret file");
            (path.file_name().expect("a name").to_string_lossy().into_owned(), value.trim_end().to_owned())
        })
        .collect();
    secrets.sort();
    secrets
}

/// Runs `program ARGS` in the repository; its standard output, failing with its
/// standard error unless it succeeds. `fix` says how to get the program.
fn run(program: &str, args: &[&str], fix: &str) -> String {
    let output = Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("run {program} ({e}): {fix}"));
    assert!(output.status.success(), "{program} {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_compose_file_is_valid_and_holds_no_secret() {
    let fix = "scripts/stack up installs Debian's docker-compose";
    let config = run("docker-compose", &["--file", "docker-compose.yml", "config"], fix);
    let secrets = compose_secrets();
    assert!(secrets.len() >= 4, "the compose stack's secrets are files: {secrets:?}");
    for (name, value) in &secrets {
        assert!(!config.contains(value.as_str()), "the secret {name} appears in `docker-compose config`:\n{config}");
    }
    let compose: serde_yaml::Value = serde_yaml::from_str(&config).expect("docker-compose config prints YAML");
    let services = compose["services"].as_mapping().expect("services");
    let built: Vec<&serde_yaml::Value> =
        services.iter().filter(|(_, s)| !s["build"].is_null()).map(|(n, _)| n).collect();
    assert_eq!(built.len(), 1, "one service builds the relay's image, the others use it: {built:?}");
    let image = |name: &str| compose["services"][name]["image"].as_str().unwrap_or_default().to_owned();
    for relay in ["topics", "migrate", "relay", "relay-standby"] {
        assert_eq!(image(relay), "outbox-relay:local", "{relay} runs the one image");
    }
    let broker = &compose["services"]["broker"];
    let text = |value: &serde_yaml::Value| serde_yaml::to_string(value).expect("YAML");
    assert!(text(&broker["volumes"]).contains("/home/rocketmq/store"), "the broker's store is a volume: {broker:?}");
    assert!(text(&broker["environment"]).contains("-Xmx"), "the broker's heap is capped: {broker:?}");
    assert!(text(&broker["healthcheck"]).contains("clusterList"), "healthy once registered: {broker:?}");
    let owner = &compose["services"]["broker-store-owner"];
    assert!(
        text(&owner["command"]).contains("3000:3000") && text(&owner["volumes"]).contains("/home/rocketmq/store"),
        "the broker's store is given to the broker's user (uid 3000) before it starts: {owner:?}"
    );
    assert!(text(&broker["depends_on"]).contains("broker-store-owner"), "{broker:?}");
    let replica = text(&compose["services"]["mysql-replica"]["healthcheck"]);
    assert!(replica.contains("-h127.0.0.1"), "the replica is healthy over TCP, not on the init server: {replica}");
    for (name, service) in services {
        for port in service["ports"].as_sequence().into_iter().flatten() {
            let published =
                port.as_str().map_or_else(|| port["host_ip"].as_str().unwrap_or_default().to_owned(), str::to_owned);
            assert!(published.starts_with("127.0.0.1"), "{name:?} publishes {port:?} beyond the loopback interface");
        }
    }
    let topics = text(&compose["services"]["topics"]["command"]);
    assert!(topics.contains("create-topic"), "the relay's own admin create-topic makes the topic: {topics}");
    let grafana = text(&compose["services"]["grafana"]);
    assert!(grafana.contains("provisioning") && grafana.contains("outbox-relay.json"), "{grafana}");
}

/// The systemd unit runs on a fresh host as copied (no user to create first) and is
/// sandboxed: `systemd-analyze security` rates it 2.0 or less ("OK").
#[test]
fn the_systemd_unit_needs_no_user_created_and_is_rated_ok_by_systemd_analyze_security() {
    let unit = repo_file("deploy/systemd/outbox-relay.service");
    assert!(unit.contains("DynamicUser=yes") && !unit.contains("\nUser="), "a user nothing creates:\n{unit}");
    // The offline check wants the unit under its own name, outside the repository's tree.
    let dir = std::env::temp_dir().join(format!("outbox-relay-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory for the unit");
    let copy = dir.join("outbox-relay.service");
    std::fs::write(&copy, &unit).expect("the unit's copy");
    let fix = "systemd 252 or later provides systemd-analyze";
    let output = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&copy)
        .output()
        .unwrap_or_else(|e| panic!("run systemd-analyze ({e}): {fix}"));
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    let level: f64 = report
        .lines()
        .find_map(|line| line.split("Overall exposure level for outbox-relay.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|level| level.parse().ok())
        .unwrap_or_else(|| {
            panic!("no overall exposure level in:\n{report}{}", String::from_utf8_lossy(&output.stderr))
        });
    assert!(level <= 2.0, "systemd-analyze security rates the unit {level} (at most 2.0 wanted):\n{report}");
}

/// The overlays of deploy/kubernetes: one per database.
const OVERLAYS: [&str; 2] = ["deploy/kubernetes/overlays/orders", "deploy/kubernetes/overlays/payments"];

const KUBECTL_FIX: &str = "install kubectl 1.27 or later (its kustomize renders the overlays; no cluster needed)";

/// An overlay rendered by `kubectl kustomize`, as its documents.
fn rendered(overlay: &str) -> (String, Vec<serde_yaml::Value>) {
    let text = run("kubectl", &["kustomize", overlay], KUBECTL_FIX);
    let documents = serde_yaml::Deserializer::from_str(&text)
        .map(|document| serde_yaml::Value::deserialize(document).expect("rendered YAML"))
        .collect();
    (text, documents)
}

fn of_kind<'a>(documents: &'a [serde_yaml::Value], kind: &str) -> Vec<&'a serde_yaml::Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

#[test]
fn the_kubernetes_overlays_render_valid_restricted_manifests_without_secrets() {
    let validate = std::env::var("OUTBOX_RELAY_KUBERNETES_VALIDATE").unwrap_or_else(|_| "kubernetes-validate".into());
    let mut names = BTreeSet::new();
    for overlay in OVERLAYS {
        let (text, documents) = rendered(overlay);
        let file = std::env::temp_dir().join(format!("{}.yaml", outbox_test_support::unique("overlay")));
        std::fs::write(&file, &text).expect("write the rendered overlay");
        let path = file.display().to_string();
        let checked =
            run(&validate, &["--strict", "--quiet", &path], "scripts/stack up installs kubernetes-validate (PyPI)");
        assert!(!checked.contains("ERROR"), "{overlay} does not validate:\n{checked}");
        std::fs::remove_file(&file).ok();
        assert!(of_kind(&documents, "Secret").is_empty(), "{overlay} renders no Secret (it references one):\n{text}");
        for kind in ["StatefulSet", "Service", "Job", "PodDisruptionBudget", "ConfigMap"] {
            assert_eq!(of_kind(&documents, kind).len(), 1, "{overlay} renders one {kind}");
        }
        let set = of_kind(&documents, "StatefulSet")[0];
        let service = of_kind(&documents, "Service")[0];
        assert_eq!(set["spec"]["serviceName"], service["metadata"]["name"], "the StatefulSet's Service exists");
        for workload in [set, of_kind(&documents, "Job")[0]] {
            assert_restricted(overlay, workload);
        }
        assert_fleet_survives_a_node(overlay, &documents);
        let image = set["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap_or_default();
        assert!(image.contains('/') && !image.ends_with(":latest"), "{overlay}: a registry and a version: {image}");
        names.insert(set["metadata"]["name"].as_str().unwrap_or_default().to_owned());
    }
    assert_eq!(names.len(), OVERLAYS.len(), "each database's fleet has names of its own: {names:?}");
}

/// The relay pods see only their own passwords, never two of them share a node, their
/// probes have a timeout, and a node drain is not blocked by an unready instance.
fn assert_fleet_survives_a_node(overlay: &str, documents: &[serde_yaml::Value]) {
    let pod = &of_kind(documents, "StatefulSet")[0]["spec"]["template"]["spec"];
    let text = |value: &serde_yaml::Value| serde_yaml::to_string(value).expect("YAML");
    let volumes = text(&pod["volumes"]);
    assert!(
        volumes.contains("source-password") && !volumes.contains("admin-password"),
        "{overlay}: the relay pods mount their own passwords only:\n{volumes}"
    );
    let anti = &pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    assert!(text(anti).contains("kubernetes.io/hostname"), "{overlay}: one instance per node, required: {anti:?}");
    for probe in ["readinessProbe", "livenessProbe"] {
        let timeout = &pod["containers"][0][probe]["timeoutSeconds"];
        assert!(timeout.as_u64().is_some_and(|t| t >= 2), "{overlay}: {probe} has a timeout: {timeout:?}");
    }
    let budget = &of_kind(documents, "PodDisruptionBudget")[0]["spec"];
    assert_eq!(budget["unhealthyPodEvictionPolicy"], "AlwaysAllow", "{overlay}: an unready instance may be evicted");
}

/// The pod of `workload` meets the "restricted" Pod Security Standard.
fn assert_restricted(overlay: &str, workload: &serde_yaml::Value) {
    let pod = &workload["spec"]["template"]["spec"];
    let name = workload["metadata"]["name"].as_str().unwrap_or_default();
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{overlay} {name}: runAsNonRoot");
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault", "{overlay} {name}: seccomp");
    for container in pod["containers"].as_sequence().expect("containers") {
        let context = &container["securityContext"];
        assert_eq!(context["allowPrivilegeEscalation"], false, "{overlay} {name}: no privilege escalation");
        assert_eq!(context["capabilities"]["drop"][0], "ALL", "{overlay} {name}: every capability dropped");
    }
}

#[test]
fn the_monitoring_component_carries_the_alert_rules_and_scrapes_the_relays() {
    let alerts: serde_yaml::Value = serde_yaml::from_str(&repo_file(ALERTS)).expect("alerts.yml");
    let generated = prometheus_rule(&repo_file(ALERTS));
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(PROMETHEUS_RULE);
    if std::env::var_os("OUTBOX_RELAY_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write the PrometheusRule");
    }
    let (_, documents) = rendered(OVERLAYS[0]);
    let rule = of_kind(&documents, "PrometheusRule");
    assert!(
        repo_file(PROMETHEUS_RULE) == generated,
        "{PROMETHEUS_RULE} is behind {ALERTS}: run `OUTBOX_RELAY_BLESS=1 cargo test --test deploy`"
    );
    assert_eq!(rule.len(), 1, "the orders overlay has the monitoring component");
    assert!(rule[0]["spec"]["groups"] == alerts["groups"], "the PrometheusRule holds the alert rules of {ALERTS}");
    let monitor = of_kind(&documents, "PodMonitor");
    let set = of_kind(&documents, "StatefulSet")[0];
    let port = &set["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"];
    assert_eq!(monitor.len(), 1);
    assert_eq!(&monitor[0]["spec"]["podMetricsEndpoints"][0]["port"], port, "the PodMonitor scrapes the relay's port");
    let (_, without) = rendered(OVERLAYS[1]);
    assert!(of_kind(&without, "PrometheusRule").is_empty(), "the component is optional");
}

/// The component's PrometheusRule, generated from alerts.yml.
const PROMETHEUS_RULE: &str = "deploy/kubernetes/components/monitoring/prometheusrule.yaml";

/// `alerts` (alerts.yml) as a PrometheusRule: its `groups`, indented under `spec`.
fn prometheus_rule(alerts: &str) -> String {
    let groups = alerts.lines().skip_while(|line| *line != "groups:");
    let spec: Vec<String> =
        groups.map(|line| if line.is_empty() { String::new() } else { format!("  {line}") }).collect();
    format!(
        "# Generated from deploy/prometheus/alerts.yml by tests/deploy.rs; do not edit: change\n\
         # alerts.yml, then run `OUTBOX_RELAY_BLESS=1 cargo test --test deploy`.\n\
         apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: outbox-relay\nspec:\n{}\n",
        spec.join("\n").trim_end()
    )
}

/// The image names where the configuration is, and sets none of its keys: an
/// `OUTBOX_RELAY__...` variable would silently win over the file users mount.
#[test]
fn the_image_overrides_no_key_of_the_mounted_configuration() {
    let dockerfile = repo_file("Dockerfile");
    let overrides: Vec<&str> = dockerfile.lines().filter(|line| line.contains("OUTBOX_RELAY__")).collect();
    assert!(overrides.is_empty(), "the Dockerfile sets configuration keys: {overrides:?}");
    assert!(dockerfile.contains("ENV OUTBOX_RELAY_CONFIG=/etc/outbox-relay/relay.toml"), "where the file is mounted");
}

#[test]
fn the_image_is_built_with_the_readmes_build_command() {
    assert!(repo_file("README.md").contains(BUILD_COMMAND), "the README gives the build command");
    let dockerfile = repo_file("Dockerfile");
    // The instructions themselves, continued lines joined: not comments that mention them.
    let instructions: Vec<String> = dockerfile
        .replace("\\\n", " ")
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let last_build = instructions.iter().rposition(|line| line.contains(BUILD_COMMAND)).expect("a build");
    assert_eq!(instructions[last_build], format!("RUN {BUILD_COMMAND}"), "the build stage runs the README's command");
    let copy_all = instructions.iter().position(|line| line == "COPY . .").expect("the sources are copied");
    assert!(
        instructions[..copy_all].iter().any(|line| line.contains(BUILD_COMMAND)),
        "the dependencies are built before the sources are copied, in a layer of their own:\n{dockerfile}"
    );
    for line in ["USER 10001", "STOPSIGNAL SIGTERM", "VOLUME /var/lib/outbox-relay"] {
        assert!(instructions.iter().any(|i| i == line), "the image has `{line}`");
    }
    assert!(
        !instructions.iter().any(|line| line.starts_with("COPY") && line.contains("config/")),
        "the image holds no configuration (it is mounted):\n{dockerfile}"
    );
    let healthcheck = instructions.iter().find(|line| line.starts_with("HEALTHCHECK ")).expect("a HEALTHCHECK");
    assert!(
        healthcheck.split_once(" CMD ").is_some_and(|(_, command)| command.contains("/healthz")),
        "the image's health check asks /healthz (liveness; /readyz fails during a broker outage): {healthcheck}"
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

#[test]
fn the_systemd_unit_is_notified_watched_and_takes_its_passwords_as_credentials() {
    let unit = repo_file("deploy/systemd/outbox-relay.service");
    let settings: Vec<&str> = unit.lines().filter(|line| !line.starts_with('#')).collect();
    for setting in ["Type=notify", "NotifyAccess=main", "RestartPreventExitStatus=2 4 5", "KillSignal=SIGTERM"] {
        assert!(settings.contains(&setting), "the unit has {setting}");
    }
    assert!(settings.iter().any(|s| s.starts_with("WatchdogSec=")), "the unit has a watchdog");
    assert!(!settings.iter().any(|s| s.starts_with("EnvironmentFile=")), "no passwords in an environment file");
    let model = repo_file("deploy/systemd/relay.toml");
    let credentials: Vec<&str> = settings
        .iter()
        .filter_map(|s| s.strip_prefix("LoadCredential="))
        .filter_map(|credential| credential.split_once(':').map(|(name, _)| name))
        .collect();
    assert_eq!(credentials.len(), 2, "a credential per password: {credentials:?}");
    for name in credentials {
        let path = format!("\"/run/credentials/outbox-relay.service/{name}\"");
        assert!(model.contains(&path), "relay.toml reads the credential {name} at {path}");
    }
}

#[test]
fn every_alert_rule_has_a_unit_test_where_it_fires_and_one_where_it_does_not() {
    let alerts: serde_yaml::Value = serde_yaml::from_str(&repo_file(ALERTS)).expect("alerts.yml");
    let tests: serde_yaml::Value = serde_yaml::from_str(&repo_file(ALERTS_TEST)).expect("alerts_test.yml");
    let mut fires = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for case in tests["tests"].as_sequence().into_iter().flatten() {
        for check in case["alert_rule_test"].as_sequence().into_iter().flatten() {
            let name = check["alertname"].as_str().unwrap_or_default().to_owned();
            match check["exp_alerts"].as_sequence() {
                Some(expected) if !expected.is_empty() => fires.insert(name),
                _ => quiet.insert(name),
            };
        }
    }
    let rules: Vec<&str> = alerts["groups"]
        .as_sequence()
        .into_iter()
        .flatten()
        .flat_map(|group| group["rules"].as_sequence().into_iter().flatten())
        .filter_map(|rule| rule["alert"].as_str())
        .collect();
    assert!(rules.len() > 10, "the alert rules were read: {rules:?}");
    for rule in rules {
        assert!(fires.contains(rule), "{ALERTS_TEST} has no case where {rule} fires");
        assert!(quiet.contains(rule), "{ALERTS_TEST} has no case where {rule} stays quiet");
    }
}
