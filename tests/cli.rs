//! The binary's edge: bad configuration, unreachable databases and wrong credentials
//! give one line that names the key, the address or the user, and the exit code of
//! their class (2 config, 3 unreachable, 4 wrong credentials or database name);
//! `--log-format json` makes that line a JSON object, and no password is ever shown.

use std::process::{Command, Output};

const EXAMPLE: &str = include_str!("../config/relay.toml");

fn relay(args: &[&str], config_text: &str, env: &[(&str, &str)]) -> Output {
    let dir = std::env::temp_dir().join(format!("outbox-relay-cli-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("relay.toml");
    std::fs::write(&path, config_text).expect("write config");
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox-relay"));
    command.args(args).arg("--config").arg(&path).env_remove("OUTBOX_RELAY_CONFIG");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("run outbox-relay");
    std::fs::remove_dir_all(&dir).ok();
    output
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn missing_key_exits_2_naming_it() {
    let output = relay(&["config"], &EXAMPLE.replace("server_id = 4242", ""), &[]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("server_id"), "{}", stderr(&output));
    assert_eq!(stderr(&output).trim().lines().count(), 1, "one line: {}", stderr(&output));
}

#[test]
fn wrong_type_exits_2_naming_the_key() {
    let output = relay(&["config"], &EXAMPLE.replace("batch_size = 128", "batch_size = \"lots\""), &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("lanes.batch_size"), "{}", stderr(&output));
}

#[test]
fn unknown_key_exits_2_naming_it() {
    let output = relay(&["config"], &EXAMPLE.replace("[lanes]", "[lanes]\nbatchsize = 1"), &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("batchsize"), "{}", stderr(&output));
}

#[test]
fn missing_config_file_exits_2_naming_the_path() {
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(["config", "--config", "/nonexistent/relay.toml"])
        .output()
        .expect("run outbox-relay");
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("/nonexistent/relay.toml"), "{}", stderr(&output));
}

#[test]
fn unreachable_database_exits_3_naming_the_address_and_key() {
    let output = relay(&["migrate"], EXAMPLE, &[("OUTBOX_RELAY__PRIMARY__URL", "mysql://w:secret-pw@127.0.0.1:1/app")]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(text.contains("127.0.0.1:1") && text.contains("primary.url"), "{text}");
    assert!(!text.contains("secret-pw"), "password leaked: {text}");
}

#[test]
fn config_dump_redacts_passwords() {
    let output = relay(&["config"], EXAMPLE, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let dump = String::from_utf8_lossy(&output.stdout);
    assert!(dump.contains("outbox_writer:***@") && !dump.contains("writer-secret"), "{dump}");
}

/// The stack's database address (`host:port`), from the writer URL.
fn stack_db() -> String {
    let url = std::env::var("OUTBOX_RELAY_TEST_WRITER_URL")
        .unwrap_or_else(|_| "mysql://outbox_writer:writer-secret@127.0.0.1:13306/app".to_owned());
    let host = url.rsplit_once('@').map_or(url.as_str(), |(_, host)| host);
    host.split('/').next().unwrap_or(host).to_owned()
}

/// `run` against the stack with `overrides`; stderr after the exit, which must be 4.
fn run_expecting_4(overrides: &[(&str, &str)]) -> String {
    let db = stack_db();
    let writer = format!("mysql://outbox_writer:writer-secret@{db}/app");
    let repl = format!("mysql://outbox_repl:repl-secret@{db}/app");
    let mut env = vec![("OUTBOX_RELAY__PRIMARY__URL", writer.as_str()), ("OUTBOX_RELAY__SOURCE__URL", repl.as_str())];
    env.extend_from_slice(overrides);
    let output = relay(&["run"], EXAMPLE, &env);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(4), "{text}");
    text
}

#[test]
fn a_wrong_writer_password_exits_4_naming_user_key_and_fix() {
    let url = format!("mysql://outbox_writer:wrong-pw-1@{}/app", stack_db());
    let text = run_expecting_4(&[("OUTBOX_RELAY__PRIMARY__URL", &url)]);
    assert!(text.contains("access denied for user 'outbox_writer'") && text.contains("primary.url"), "{text}");
    assert!(text.contains("fix the user name and password"), "{text}");
    assert!(!text.contains("wrong-pw-1"), "password leaked: {text}");
}

#[test]
fn a_wrong_replication_password_exits_4_naming_user_key_and_fix() {
    let url = format!("mysql://outbox_repl:wrong-pw-2@{}/app", stack_db());
    let text = run_expecting_4(&[("OUTBOX_RELAY__SOURCE__URL", &url)]);
    assert!(text.contains("access denied for user 'outbox_repl'") && text.contains("source.url"), "{text}");
    assert!(text.contains("fix the user name and password"), "{text}");
    assert!(!text.contains("wrong-pw-2"), "password leaked: {text}");
}

#[test]
fn a_database_that_does_not_exist_exits_4_naming_it_and_the_key() {
    let url = format!("mysql://outbox_writer:writer-secret@{}/no_such_db", stack_db());
    let text = run_expecting_4(&[("OUTBOX_RELAY__PRIMARY__URL", &url)]);
    assert!(text.contains("no_such_db") && text.contains("primary.url") && text.contains("outbox_writer"), "{text}");
    assert!(!text.contains("writer-secret"), "password leaked: {text}");
}

#[test]
fn log_format_json_makes_every_error_a_json_line_and_no_command_shows_the_password() {
    const PASSWORD: &str = "Pw-7c1e9b-distinctive";
    let url = format!("mysql://w:{PASSWORD}@127.0.0.1:1/app");
    let env = [("OUTBOX_RELAY__PRIMARY__URL", url.as_str())];
    let json_lines = |output: &Output| -> Vec<serde_json::Value> {
        stderr(output)
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}")))
            .collect()
    };
    let runs = [
        (vec!["--log-format", "json", "status"], Some(3)),
        (vec!["failed", "list", "--log-format", "json"], Some(3)),
        (vec!["position", "show", "--log-format", "json"], Some(3)),
        (vec!["reconcile", "--since", "2024-05-01", "--until", "2024-05-02", "--log-format", "json"], Some(3)),
        (vec!["config", "--log-format", "json"], Some(0)),
    ];
    for (args, code) in &runs {
        let output = relay(args, EXAMPLE, &env);
        let out = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), *code, "{args:?}: {}", stderr(&output));
        assert!(!out.contains(PASSWORD) && !stderr(&output).contains(PASSWORD), "{args:?} leaked the password");
        let lines = json_lines(&output);
        if *code == Some(0) {
            assert!(out.contains("w:***@127.0.0.1:1"), "{out}");
            continue;
        }
        let last = lines.last().unwrap_or_else(|| panic!("{args:?}: no error line"));
        assert_eq!(last["level"], "ERROR", "{last}");
        assert_eq!(last["exit_code"], 3, "{last}");
        let message = last["message"].as_str().unwrap_or_default();
        assert!(message.contains("127.0.0.1:1") && message.contains("primary.url"), "{last}");
    }
    // A configuration error comes before logging is set up: a JSON line all the same.
    let broken = relay(&["config", "--log-format", "json"], &EXAMPLE.replace("server_id = 4242", ""), &env);
    assert_eq!(broken.status.code(), Some(2), "{}", stderr(&broken));
    let lines = json_lines(&broken);
    assert!(lines.len() == 1 && lines[0]["message"].as_str().is_some_and(|m| m.contains("server_id")), "{lines:?}");
    assert!(!stderr(&broken).contains(PASSWORD));
}
