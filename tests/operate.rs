//! The operator commands against the real stack while a relay runs: `status` reads
//! the leader, position and rows from the primary; `requeue` and
//! `skip` change only FAILED rows, write who/why/what to `outbox_relay_audit` and are
//! no-ops when repeated; `cleanup` deletes exactly the SENT rows past the retention.
#![recursion_limit = "512"]

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use common::collector::Collector;
use common::events::{all_sent, consumed_all, Events};
use common::load::Load;
use common::outbox::TestOutbox;
use common::relay::{RelayOptions, RelayProcess};
use common::{eventually, unique, Stack};
use mysql_async::prelude::Queryable;
use outbox_kit::RowStatus;

/// Runs `outbox-relay ARGS --config config/relay.toml` on `outbox`'s table.
fn cli(stack: &Stack, outbox: &TestOutbox, args: &[&str]) -> Output {
    let config = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/config/relay.toml"));
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env("OUTBOX_RELAY__PRIMARY__URL", &stack.writer_url)
        .env("OUTBOX_RELAY__OUTBOX__TABLE", outbox.name())
        .env("NO_COLOR", "1")
        .output()
        .expect("run outbox-relay");
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A relay whose sweep picks up requeued rows within about a second.
fn quick_sweep(outbox: &TestOutbox) -> RelayOptions {
    RelayOptions::new(outbox.name())
        .env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 300)
        .env("OUTBOX_RELAY__SWEEP__GRACE_MS", 500)
}

async fn id_of(outbox: &TestOutbox, event_id: &str) -> u64 {
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let id: Option<u64> = conn
        .exec_first(format!("SELECT id FROM {} WHERE event_id = ?", outbox.table.qualified()), (event_id,))
        .await
        .expect("id");
    id.expect("the row exists")
}

async fn status_of(outbox: &TestOutbox, id: u64) -> u8 {
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let status: Option<u8> = conn
        .exec_first(format!("SELECT status FROM {} WHERE id = ?", outbox.table.qualified()), (id,))
        .await
        .expect("status");
    status.expect("the row exists")
}

/// The audit rows about `outbox`'s row `id`: (operator, reason, action, old, new).
async fn audit_of(outbox: &TestOutbox, id: u64) -> Vec<(String, String, String, String, String)> {
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    conn.exec(
        "SELECT operator, reason, action, old_state, new_state FROM app.outbox_relay_audit WHERE target LIKE ? ORDER BY id",
        (format!("{} id={id} %", outbox.table.qualified()),),
    )
    .await
    .expect("audit rows")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_sends_a_failed_row_again_is_audited_and_a_second_call_changes_nothing() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let events = Events::new(&stack, "requeue").await;
    let mut relay = RelayProcess::start(&stack, &quick_sweep(&outbox));
    relay.wait_ready().await;
    outbox.insert_tx(&events.rows("k", 0..3)).await;
    all_sent(&outbox, 3, Duration::from_secs(60)).await;
    let (first, second) = (id_of(&outbox, &events.id("k", 0)).await, id_of(&outbox, &events.id("k", 1)).await);
    outbox
        .exec(&format!(
            "UPDATE {} SET status = 3, last_error = 'broker said no' WHERE id IN ({first}, {second})",
            outbox.table.qualified()
        ))
        .await;

    let listed = stdout(&cli(&stack, &outbox, &["failed", "list", "--json"]));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&listed).expect("JSON list");
    assert_eq!(rows.len(), 2, "{listed}");
    assert_eq!(rows[0]["last_error"], "broker said no");

    let dry = stdout(&cli(
        &stack,
        &outbox,
        &["requeue", "--id", &first.to_string(), "--operator", "alice", "--reason", "INC-42", "--dry-run"],
    ));
    assert!(dry.contains("dry run: would requeue 1 rows"), "{dry}");
    assert_eq!(status_of(&outbox, first).await, RowStatus::Failed.code(), "a dry run changes nothing");
    assert!(audit_of(&outbox, first).await.is_empty(), "and audits nothing");

    let done = stdout(&cli(
        &stack,
        &outbox,
        &["requeue", "--id", &first.to_string(), "--id", "999999999", "--operator", "alice", "--reason", "INC-42"],
    ));
    assert!(done.contains("requeue: 1 rows changed") && done.contains("not FAILED, left alone: 999999999"), "{done}");
    let audit = audit_of(&outbox, first).await;
    let before = "FAILED retry_count=0 last_error=broker said no";
    assert_eq!(
        audit,
        [("alice".into(), "INC-42".into(), "requeue".into(), before.into(), "PENDING".into())],
        "who, why, what before and after"
    );
    eventually("the requeued row SENT again", Duration::from_secs(60), || async {
        (status_of(&outbox, first).await == RowStatus::Sent.code()).then_some(())
    })
    .await;
    let again = stdout(&cli(
        &stack,
        &outbox,
        &["requeue", "--id", &first.to_string(), "--operator", "alice", "--reason", "INC-42"],
    ));
    assert!(again.contains("nothing to do"), "{again}");
    assert_eq!(audit_of(&outbox, first).await.len(), 1, "a repeated call writes no audit row");
    assert_eq!(status_of(&outbox, second).await, RowStatus::Failed.code(), "only the given row was requeued");
    assert_eq!(relay.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_releases_a_held_key_and_a_second_call_changes_nothing() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let events = Events::new(&stack, "skip").await;
    // A 2 KiB payload over a 1 KiB limit is FAILED at once; under the hold policy its
    // key's later events wait behind it.
    let options = quick_sweep(&outbox).env("OUTBOX_RELAY__ROCKETMQ__MAX_MESSAGE_BYTES", 1_024);
    let mut relay = RelayProcess::start(&stack, &options);
    relay.wait_ready().await;
    let mut poison = events.row("k", 0);
    poison.payload = format!(r#"{{"pad":"{}"}}"#, "x".repeat(2_048));
    outbox.insert_tx(&[poison]).await;
    let poisoned = id_of(&outbox, &events.id("k", 0)).await;
    eventually("the oversized row FAILED", Duration::from_secs(60), || async {
        (status_of(&outbox, poisoned).await == RowStatus::Failed.code()).then_some(())
    })
    .await;
    outbox.insert_tx(&events.rows("k", 1..4)).await;
    outbox.insert_tx(&events.rows("other", 0..2)).await;
    eventually("the other key's rows SENT", Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sent).await == 2).then_some(())
    })
    .await;
    assert_eq!(outbox.count_status(RowStatus::Pending).await, 3, "the held key's rows wait");

    let done = stdout(&cli(
        &stack,
        &outbox,
        &["skip", "--id", &poisoned.to_string(), "--operator", "bob", "--reason", "bad payload"],
    ));
    assert!(done.contains("skip: 1 rows changed"), "{done}");
    let audit = audit_of(&outbox, poisoned).await;
    assert_eq!(audit.len(), 1, "{audit:?}");
    let (who, why, action, before, after) = &audit[0];
    assert_eq!(
        (who.as_str(), why.as_str(), action.as_str(), after.as_str()),
        ("bob", "bad payload", "skip", "SKIPPED")
    );
    assert!(before.starts_with("FAILED retry_count=1 last_error=") && before.len() > 40, "why it failed: {before}");
    eventually("the held key's rows SENT after the skip", Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sent).await == 5).then_some(())
    })
    .await;
    let again = stdout(&cli(
        &stack,
        &outbox,
        &["skip", "--id", &poisoned.to_string(), "--operator", "bob", "--reason", "bad payload"],
    ));
    assert!(again.contains("nothing to do"), "{again}");
    assert_eq!(status_of(&outbox, poisoned).await, RowStatus::Skipped.code());
    assert_eq!(audit_of(&outbox, poisoned).await.len(), 1);
    assert_eq!(relay.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_deletes_exactly_the_old_sent_rows_in_batches_while_the_relay_runs_under_load() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let events = Events::new(&stack, "cleanup").await;
    let collector = Collector::start(&stack.namesrv, &events.topic, &unique("cleanup_consumer")).await;
    let mut relay = RelayProcess::start(&stack, &RelayOptions::new(outbox.name()));
    relay.wait_ready().await;
    outbox.insert_tx(&events.rows("old", 0..30)).await;
    all_sent(&outbox, 30, Duration::from_secs(60)).await;
    let table = outbox.table.qualified();
    let prefix = events.id("old", 0);
    let prefix = prefix.trim_end_matches("00000");
    // 20 rows delivered 8 days ago; 3 FAILED and 2 PENDING (not due) rows as old; 5 recent SENT.
    for (from, to, set) in [
        (0, 20, "sent_at = NOW(3) - INTERVAL 8 DAY"),
        (20, 23, "status = 3, sent_at = NOW(3) - INTERVAL 8 DAY, created_at = NOW(3) - INTERVAL 8 DAY"),
        (23, 25, "status = 0, next_retry_at = NOW(3) + INTERVAL 1 DAY, created_at = NOW(3) - INTERVAL 8 DAY"),
    ] {
        let ids: Vec<String> = (from..to).map(|seq| format!("'{prefix}{seq:05}'")).collect();
        outbox.exec(&format!("UPDATE {table} SET {set} WHERE event_id IN ({})", ids.join(","))).await;
    }
    let load = Load::started(&outbox, &events, 10, 20).await;

    let output = cli(
        &stack,
        &outbox,
        &[
            "cleanup",
            "--retention",
            "7d",
            "--batch",
            "7",
            "--pace-ms",
            "20",
            "--operator",
            "carol",
            "--reason",
            "retention",
            "--json",
        ],
    );
    let report: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("JSON report");
    assert_eq!((report["deleted"].as_u64(), report["batches"].as_u64()), (Some(20), Some(3)), "{report}");
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let left: Vec<(String, u8)> = conn
        .query(format!("SELECT event_id, status FROM {table} WHERE event_id LIKE '{prefix}%' ORDER BY event_id"))
        .await
        .expect("rows left");
    let expected: Vec<(String, u8)> = (20..30)
        .map(|seq| {
            (
                format!("{prefix}{seq:05}"),
                match seq {
                    20..=22 => 3,
                    23 | 24 => 0,
                    _ => 2,
                },
            )
        })
        .collect();
    assert_eq!(left, expected, "exactly the old SENT rows are gone");
    let audited: Vec<(String, String)> = conn
        .exec(
            "SELECT operator, result FROM app.outbox_relay_audit WHERE action = 'cleanup' AND target LIKE ? ORDER BY id",
            (format!("{table} %"),),
        )
        .await
        .expect("audit");
    let per_batch: Vec<(String, String)> =
        [7, 7, 6].iter().map(|n| ("carol".to_owned(), format!("deleted {n} rows"))).collect();
    assert_eq!(audited, per_batch, "one audit row per batch, with its count");

    let written = load.finish().await;
    consumed_all(&collector, &events, 30 + written, Duration::from_secs(120)).await;
    assert_eq!(relay.stop(), Some(0));
    collector.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_the_leader_its_position_and_the_rows() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let events = Events::new(&stack, "status").await;
    let mut relay = RelayProcess::start(&stack, &RelayOptions::new(outbox.name()));
    relay.wait_ready().await;
    outbox.insert_tx(&events.rows("k", 0..5)).await;
    all_sent(&outbox, 5, Duration::from_secs(60)).await;
    let table = outbox.table.qualified();
    outbox.exec(&format!("UPDATE {table} SET status = 3 WHERE event_id = '{}'", events.id("k", 4))).await;
    let term = relay.metric("relay_leader_term") as u64;

    let report: serde_json::Value =
        serde_json::from_str(&stdout(&cli(&stack, &outbox, &["status", "--json"]))).expect("JSON");
    let holder = report["leader"]["holder"].as_str().unwrap_or_default().to_owned();
    assert!(holder.contains(&format!(":{}:", relay.pid())), "the running relay leads: {report}");
    assert_eq!(report["leader"]["term"].as_u64(), Some(term), "{report}");
    assert!(report["leader"]["lease_remaining_ms"].as_i64().unwrap_or(-1) > 0, "{report}");
    assert_eq!(report["rows"], serde_json::json!([["SENT", 4], ["FAILED", 1]]), "{report}");
    assert_eq!(report["failed_keys"].as_u64(), Some(1), "{report}");
    assert!(report["position"]["file"].as_str().is_some_and(|f| f.contains("bin")), "the mirrored position: {report}");
    assert_eq!(report["position"]["term"].as_u64(), Some(term), "{report}");

    assert_eq!(relay.stop(), Some(0));
    let human = stdout(&cli(&stack, &outbox, &["status"]));
    assert!(human.contains(&format!("none: the lease of term {term} ran out")), "released at the stop:\n{human}");
    assert!(human.contains("SENT 4, FAILED 1"), "{human}");
}
