//! `outbox-relay check` against the real stack: with the stack's users and a migrated
//! table every check passes (exit 0); each thing the relay cannot work with is a FAIL
//! line naming what was found and the fix, and the command exits 4. The stack's
//! "bare" replica (no binlog, log_slave_updates OFF, STATEMENT format, MINIMAL row
//! image) fails on all four settings at once, and `run` names all four in its one
//! refusal.
#![recursion_limit = "512"]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::outbox::TestOutbox;
use common::relay::{RelayOptions, RelayProcess};
use common::{unique, Stack};
use mysql_async::prelude::Queryable;

/// One line of `outbox-relay check --json`.
#[derive(Debug, serde::Deserialize)]
struct Line {
    group: String,
    name: String,
    level: String,
    found: String,
    fix: Option<String>,
}

/// What `outbox-relay check` printed and how it exited.
struct Checked {
    code: Option<i32>,
    lines: Vec<Line>,
    output: String,
}

/// Runs `outbox-relay check --json` with the relay environment of `options`.
fn check(stack: &Stack, options: &RelayOptions) -> Checked {
    let output = check_command(stack, options).arg("--json").output().expect("run outbox-relay check");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    let lines = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not a JSON list ({e}): {stdout}\n{stderr}"));
    Checked { code: output.status.code(), lines, output: format!("{stdout}\n{stderr}") }
}

fn check_command(stack: &Stack, options: &RelayOptions) -> Command {
    let config = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/config/relay.toml"));
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox-relay"));
    command.arg("check").arg("--config").arg(config).envs(options.environment(stack)).env("NO_COLOR", "1");
    command
}

impl Checked {
    fn line(&self, group: &str, name: &str) -> &Line {
        self.lines
            .iter()
            .find(|l| l.group == group && l.name == name)
            .unwrap_or_else(|| panic!("no check {group} {name}:\n{}", self.output))
    }

    fn failed(&self) -> Vec<String> {
        self.lines.iter().filter(|l| l.level == "fail").map(|l| format!("{} {}", l.group, l.name)).collect()
    }

    /// Asserts `group name` FAILed, found `found` and names `fix` in its fix.
    fn assert_fail(&self, group: &str, name: &str, found: &str, fix: &str) {
        let line = self.line(group, name);
        assert_eq!(line.level, "fail", "{line:?}\n{}", self.output);
        assert!(line.found.contains(found), "found {found:?} in {line:?}");
        assert!(line.fix.as_deref().is_some_and(|f| f.contains(fix)), "fix {fix:?} in {line:?}");
        assert_eq!(self.code, Some(4), "a FAIL exits 4:\n{}", self.output);
    }
}

/// `url` with `user:password@` instead of its credentials.
fn as_user(url: &str, user: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{user}:{password}@{host}")
}

/// A user created on the primary (it replicates) for one test, dropped at the end.
struct TestUser {
    name: String,
    pool: mysql_async::Pool,
}

impl TestUser {
    async fn create(stack: &Stack, grants: &[&str]) -> Self {
        let name = unique("chk");
        let pool = stack.root_pool().await;
        let mut conn = pool.get_conn().await.expect("primary");
        conn.query_drop(format!("CREATE USER '{name}'@'127.0.0.1' IDENTIFIED BY 'pw'")).await.expect("create user");
        for grant in grants {
            let sql = format!("GRANT {grant} TO '{name}'@'127.0.0.1'");
            conn.query_drop(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        drop(conn);
        stack.replica_caught_up().await;
        Self { name, pool }
    }

    async fn drop_user(self) {
        let mut conn = self.pool.get_conn().await.expect("primary");
        conn.query_drop(format!("DROP USER '{}'@'127.0.0.1'", self.name)).await.expect("drop user");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stacks_users_and_a_migrated_table_pass_every_check() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let options = RelayOptions::new(outbox.name());
    let checked = check(&stack, &options);
    assert!(checked.failed().is_empty(), "{}", checked.output);
    assert_eq!(checked.code, Some(0), "{}", checked.output);
    for (group, name) in [
        ("source", "log_bin"),
        ("source", "binlog_format"),
        ("source", "binlog_row_image"),
        ("source", "log_slave_updates"),
        ("grants", "source user: replication"),
        ("grants", "source user: outbox table"),
        ("grants", "primary user: outbox table"),
        ("grants", "primary user: lease table"),
        ("table", "primary columns"),
        ("table", "source columns"),
        ("table", "migrations"),
        ("table", "SKIP LOCKED"),
        ("broker", "reachable"),
        ("broker", "topic t-order-event"),
    ] {
        let line = checked.line(group, name);
        assert_eq!(line.level, "ok", "{line:?}");
        assert!(line.fix.is_none(), "{line:?}");
    }
    let human = check_command(&stack, &options).output().expect("run outbox-relay check");
    let text = String::from_utf8_lossy(&human.stdout);
    assert_eq!(text.lines().count(), checked.lines.len() + 1, "a header and one line per check:\n{text}");
    assert!(text.lines().skip(1).all(|l| ["ok ", "warn ", "FAIL "].iter().any(|w| l.starts_with(w))), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_without_binlog_fails_every_setting_at_once_in_check_and_in_run() {
    let stack = Stack::from_env();
    let bare = std::env::var("OUTBOX_RELAY_TEST_BARE_ROOT_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:13308/app".to_owned());
    let outbox = TestOutbox::create(&stack).await;
    let options = RelayOptions::new(outbox.name()).env("OUTBOX_RELAY__SOURCE__URL", &bare);
    let checked = check(&stack, &options);
    checked.assert_fail("source", "log_bin", "OFF", "--log-bin");
    checked.assert_fail("source", "binlog_format", "STATEMENT", "set binlog_format = ROW");
    checked.assert_fail("source", "binlog_row_image", "MINIMAL", "set binlog_row_image = FULL");
    checked.assert_fail("source", "log_slave_updates", "OFF", "set log_slave_updates = ON");

    let mut relay = RelayProcess::start(&stack, &options);
    let code = relay.wait_exit(Duration::from_secs(60)).await;
    let log = relay.log_text();
    assert_eq!(code, Some(4), "an environment error: {log}");
    let refusal = log.lines().find(|l| l.contains("settings stop the relay")).unwrap_or_else(|| panic!("{log}"));
    for setting in ["log_bin", "binlog_format", "binlog_row_image", "set log_slave_updates = ON"] {
        assert!(refusal.contains(setting), "{setting} in the one refusal: {refusal}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_user_without_replication_slave_fails_with_the_grant_to_add() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let user = TestUser::create(&stack, &["REPLICATION CLIENT ON *.*", "SELECT ON app.*"]).await;
    let url = as_user(&stack.replica_root_url, &user.name, "pw");
    let checked = check(&stack, &RelayOptions::new(outbox.name()).env("OUTBOX_RELAY__SOURCE__URL", url));
    let grant = format!("GRANT REPLICATION SLAVE ON *.* TO '{}'@'127.0.0.1'", user.name);
    checked.assert_fail("grants", "source user: replication", "REPLICATION SLAVE missing", &grant);
    assert_eq!(checked.line("grants", "source user: outbox table").level, "ok", "{}", checked.output);
    user.drop_user().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_without_update_fails_naming_each_table_and_the_grant() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let user = TestUser::create(&stack, &["SELECT, INSERT, DELETE ON app.*"]).await;
    let url = as_user(&stack.root_url, &user.name, "pw");
    let checked = check(&stack, &RelayOptions::new(outbox.name()).env("OUTBOX_RELAY__PRIMARY__URL", url));
    let grant = format!("GRANT UPDATE ON `app`.`{}` TO '{}'@'127.0.0.1'", outbox.name(), user.name);
    checked.assert_fail("grants", "primary user: outbox table", "UPDATE missing", &grant);
    checked.assert_fail("grants", "primary user: lease table", "UPDATE missing", "`app`.`outbox_relay_lease`");
    assert_eq!(checked.line("grants", "primary user: cleanup").level, "ok", "DELETE is granted");
    user.drop_user().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_table_without_its_topic_column_fails_on_the_primary_and_the_source() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    outbox.exec(&format!("ALTER TABLE {} DROP COLUMN topic", outbox.table.qualified())).await;
    stack.replica_caught_up().await;
    let checked = check(&stack, &RelayOptions::new(outbox.name()));
    checked.assert_fail("table", "primary columns", "no column `topic`", "CREATE TABLE");
    checked.assert_fail("table", "source columns", "no column `topic`", "add the column on the primary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_topic_missing_on_the_cluster_fails_with_the_command_that_creates_it() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let topic = unique("t_missing");
    let options =
        RelayOptions::new(outbox.name()).env(&format!("OUTBOX_RELAY__ROCKETMQ__TOPICS__{topic}__QUEUE_COUNT"), 4);
    let checked = check(&stack, &options);
    let create = format!("create-topic --namesrv {} --topic {topic} --queues 4", stack.namesrv);
    checked.assert_fail("broker", &format!("topic {topic}"), "does not exist", &create);
    assert_eq!(checked.line("broker", "reachable").level, "ok", "the other topic reaches the broker");
    assert_eq!(checked.failed(), [format!("broker topic {topic}")], "{}", checked.output);
}
