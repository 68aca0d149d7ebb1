//! Operators' orders to a running fleet, against the real stack: `pause` under load
//! stops publishing within 2 s with the position held and `/readyz` saying so, and
//! `resume` delivers everything in order; `resend` of a window publishes exactly its
//! SENT rows once more, audited. (`handover` is in tests/leader.rs, beside the
//! other tests of who leads.)
#![recursion_limit = "512"]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::command::{cli, stdout};
use common::events::{consumed_all, delivery_counts};
use common::load::Load;
use common::outbox::TestOutbox;
use common::relay::RelayOptions;
use common::scenario::Scenario;
use common::{eventually, throughout};
use mysql_async::prelude::Queryable;
use outbox_kit::RowStatus;

/// How long after `pause` nothing more may be published.
const PAUSED_WITHIN: Duration = Duration::from_secs(2);

/// Now, in Unix milliseconds (the broker's store times are on this host's clock).
fn unix_millis() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("a clock after 1970");
    i64::try_from(now.as_millis()).expect("milliseconds fit")
}

/// The fleet's mirrored binlog position: (file, offset).
async fn mirrored_position(outbox: &TestOutbox) -> Option<(String, u64)> {
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    conn.exec_first(
        "SELECT binlog_file, binlog_pos FROM app.outbox_relay_checkpoint WHERE source_id = ?",
        (format!("app.{}", outbox.name()),),
    )
    .await
    .expect("mirror row")
}

/// The audit rows of `action` on `outbox`'s table or its leader: (operator, old, new).
async fn audited(outbox: &TestOutbox, action: &str) -> Vec<(String, String, String)> {
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    conn.exec(
        "SELECT operator, old_state, new_state FROM app.outbox_relay_audit WHERE action = ? AND target LIKE ? ORDER BY id",
        (action, format!("%{}%", outbox.table.qualified())),
    )
    .await
    .expect("audit rows")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_under_load_stops_publishing_within_2s_and_resume_delivers_everything_in_order() {
    let scenario = Scenario::consumed("pause").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let mut relay = scenario.relay().await;
    let load = Load::started(outbox, events, 10, 40).await;

    let ordered = Instant::now();
    let ordered_ms = unix_millis();
    let said = stdout(&cli(stack, outbox, &["pause", "--operator", "ops", "--reason", "broker maintenance"]));
    assert!(said.contains("was running") && said.contains("paused"), "{said}");
    relay.wait_readiness_with(false, "paused by ops", PAUSED_WITHIN).await;
    tokio::time::sleep(PAUSED_WITHIN.saturating_sub(ordered.elapsed())).await;
    // From 2 s after the order: nothing more becomes SENT and the position stays, while
    // the load keeps writing (the broker's side is checked below, by store time).
    let sent = outbox.count_status(RowStatus::Sent).await;
    let position = mirrored_position(outbox).await;
    let pending_before = outbox.count_status(RowStatus::Pending).await;
    throughout("nothing published while paused", Duration::from_secs(4), || async {
        let now = (outbox.count_status(RowStatus::Sent).await, mirrored_position(outbox).await);
        if now == (sent, position.clone()) {
            Vec::new()
        } else {
            vec![now]
        }
    })
    .await;
    assert!(outbox.count_status(RowStatus::Pending).await > pending_before, "the load went on writing meanwhile");
    assert_eq!(relay.metric("relay_paused"), 1.0);
    assert_eq!(relay.metric("relay_leader"), 1.0, "a paused leader keeps the lease");
    let pauses = audited(outbox, "pause").await;
    assert_eq!(pauses, vec![("ops".into(), "running".into(), "paused".into())]);

    let resumed_ms = unix_millis();
    let said = stdout(&cli(stack, outbox, &["resume", "--operator", "ops", "--reason", "maintenance over"]));
    assert!(said.contains("was paused by ops"), "{said}");
    let written = load.finish().await;
    scenario.all_sent(written).await;
    let deliveries = consumed_all(scenario.collector(), events, written, Duration::from_secs(120)).await;
    scenario.assert_per_key_order(&deliveries).await;
    let stored_while_paused: Vec<&str> = deliveries
        .iter()
        .filter(|d| d.store_timestamp > ordered_ms + PAUSED_WITHIN.as_millis() as i64 && d.store_timestamp < resumed_ms)
        .map(|d| d.event_id.as_str())
        .collect();
    assert!(stored_while_paused.is_empty(), "the broker stored these while paused: {stored_while_paused:?}");
    assert_eq!(relay.metric("relay_paused"), 0.0);
    assert_eq!(audited(outbox, "resume").await, vec![("ops".into(), "paused".into(), "running".into())]);
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_paused_before_its_relay_starts_publishes_nothing_until_resumed() {
    let scenario = Scenario::new("paused_start").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    cli(stack, outbox, &["pause", "--operator", "ops", "--reason", "not yet"]);
    outbox.insert_tx(&events.rows("k", 0..5)).await;
    let mut relay = common::relay::RelayProcess::start(stack, &RelayOptions::new(outbox.name()));
    let body = relay.wait_readiness_with(false, "paused by ops", Duration::from_secs(60)).await;
    assert!(body.contains(r#""role":"leader""#), "{body}");
    throughout("nothing SENT while paused", Duration::from_secs(2), || async {
        let sent = outbox.count_status(RowStatus::Sent).await;
        if sent == 0 {
            Vec::new()
        } else {
            vec![sent]
        }
    })
    .await;
    cli(stack, outbox, &["resume", "--operator", "ops", "--reason", "go"]);
    scenario.all_sent(5).await;
    relay.wait_ready().await;
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resend_of_a_window_publishes_exactly_its_sent_rows_once_more_audited() {
    let scenario = Scenario::consumed("resend").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let relay = scenario
        .relay_with(
            &scenario.options().env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 300).env("OUTBOX_RELAY__SWEEP__GRACE_MS", 500),
        )
        .await;
    let now = || async {
        let mut conn = outbox.pool.get_conn().await.expect("conn");
        let now: Option<String> =
            conn.query_first("SELECT DATE_FORMAT(NOW(3), '%Y-%m-%d %H:%i:%s.%f')").await.expect("now");
        now.expect("a time")
    };
    outbox.insert_tx(&events.rows("before", 0..5)).await;
    scenario.all_sent(5).await;
    let since = now().await;
    outbox.insert_tx(&events.rows("in", 0..6)).await;
    scenario.all_sent(11).await;
    let until = now().await;
    outbox.insert_tx(&events.rows("after", 0..5)).await;
    scenario.all_sent(16).await;
    consumed_all(scenario.collector(), events, 16, Duration::from_secs(60)).await;
    let in_window: BTreeSet<String> = (0..6).map(|seq| events.id("in", seq)).collect();
    let msg_ids_before = outbox.statuses().await;

    let window =
        ["--since", since.as_str(), "--until", until.as_str(), "--operator", "ops", "--reason", "consumer lost"];
    let dry = stdout(&cli(stack, outbox, &[&["resend", "--dry-run", "--json"], &window[..]].concat()));
    let dry: serde_json::Value = serde_json::from_str(&dry).expect("JSON");
    assert_eq!(dry["ids"].as_array().map(Vec::len), Some(6), "{dry}");
    assert!(audited(outbox, "resend").await.is_empty(), "a dry run changes nothing");

    let said = stdout(&cli(stack, outbox, &[&["resend"][..], &window[..]].concat()));
    assert!(said.contains("resend: 6 rows changed"), "{said}");
    scenario.all_sent(16).await;
    let deliveries = eventually("the window's events delivered twice", Duration::from_secs(60), || async {
        let got = scenario.collector().received(|id| id.starts_with(&events.prefix));
        let counts = delivery_counts(&got);
        in_window.iter().all(|id| counts.get(id.as_str()).copied().unwrap_or(0) >= 2).then_some(got)
    })
    .await;
    let twice: BTreeSet<String> =
        delivery_counts(&deliveries).into_iter().filter(|(_, n)| *n > 1).map(|(id, _)| id.to_owned()).collect();
    assert_eq!(twice, in_window, "exactly the window's SENT rows were published again");
    let after = outbox.statuses().await;
    for id in &in_window {
        assert_ne!(after[id].1, msg_ids_before[id].1, "{id} was sent again under a new msg_id");
    }
    let audit = audited(outbox, "resend").await;
    assert_eq!(audit.len(), 6, "one audit row per resent row: {audit:?}");
    assert!(audit.iter().all(|(who, old, new)| who == "ops" && old.starts_with("SENT msg_id=") && new == "PENDING"));
    scenario.finish(relay).await;
}
