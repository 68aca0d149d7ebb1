//! A partitioned outbox (minute-sized partitions, so that a test sees boundaries
//! pass): `migrate` creates one, or converts one in place (`--convert`) under load while the relay
//! publishes; the relay delivers across a partition boundary, every event, in key
//! order; the leader drops an expired partition of SENT rows and keeps one that
//! holds a FAILED row, which survives.

mod common;

use std::time::Duration;

use chrono::NaiveDateTime;
use common::command::cli_with;
use common::load::Load;
use common::outbox::TestOutbox;
use common::scenario::Scenario;
use common::{eventually, unique, Stack};
use mysql_async::prelude::Queryable;
use outbox_kit::{OutboxTable, RowStatus};
use outbox_relay::config::PartitionPeriod;
use outbox_relay::store::partitions::{self, Layout, Partitioning};

/// Rows the test puts in the table's past before the relay starts.
struct History {
    /// The partition of SENT rows created five minutes ago.
    sent_only: String,
    /// The partition of SENT rows and one FAILED row created three minutes ago.
    with_failed: String,
    failed_id: u64,
}

impl History {
    /// 50 SENT rows five minutes old, 20 SENT rows and a FAILED one three minutes old
    /// (sent just now, so a row-by-row cleanup would keep them all).
    async fn insert(outbox: &TestOutbox, topic: &str) -> Self {
        let mut conn = outbox.pool.get_conn().await.expect("conn");
        let table = outbox.table.qualified();
        let insert = |minutes: u32, status: RowStatus, count: usize| {
            let values: Vec<String> = (0..count)
                .map(|_| {
                    format!(
                        "('{}', 'history', '{topic}', '{{}}', {}, 'HISTORY', NOW(3), NOW(3) - INTERVAL {minutes} MINUTE)",
                        unique("history"),
                        status.code()
                    )
                })
                .collect();
            format!(
                "INSERT INTO {table} (event_id, biz_key, topic, payload, status, msg_id, sent_at, created_at) VALUES {}",
                values.join(", ")
            )
        };
        for (minutes, status, count) in [(5, RowStatus::Sent, 50), (3, RowStatus::Sent, 20), (3, RowStatus::Failed, 1)]
        {
            conn.query_drop(insert(minutes, status, count)).await.expect("insert history");
        }
        let failed_id: u64 = conn
            .query_first(format!("SELECT id FROM {table} WHERE status = {}", RowStatus::Failed.code()))
            .await
            .expect("the FAILED row")
            .expect("a FAILED row");
        let partition_of = |which: &str| format!("SELECT DATE_FORMAT({which}(created_at), 'p%Y%m%d%H%i') FROM {table}");
        let sent_only: Option<String> = conn.query_first(partition_of("MIN")).await.expect("the oldest minute");
        let with_failed: Option<String> = conn.query_first(partition_of("MAX")).await.expect("the newest minute");
        Self { sent_only: sent_only.expect("a name"), with_failed: with_failed.expect("a name"), failed_id }
    }
}

async fn layout(outbox: &TestOutbox) -> Layout {
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    match partitions::read(&mut conn, &outbox.table).await.expect("read partitions") {
        Partitioning::Periods(layout) => layout,
        other => panic!("{} is not partitioned by the relay: {other:?}", outbox.table.qualified()),
    }
}

async fn db_now(outbox: &TestOutbox) -> NaiveDateTime {
    partitions::db_now(&mut outbox.pool.get_conn().await.expect("conn")).await.expect("NOW()")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_table_converted_under_load_delivers_across_a_boundary_and_drops_only_finished_partitions() {
    let scenario = Scenario::consumed("partitioned").await;
    let history = History::insert(&scenario.outbox, &scenario.events.topic).await;
    let options = scenario
        .options()
        .env("OUTBOX_RELAY__OUTBOX__PARTITION", "minutely")
        .env("OUTBOX_RELAY__CLEANUP__INTERVAL_MS", 1000)
        .env("OUTBOX_RELAY__CLEANUP__RETENTION_SECS", 120);
    let relay = scenario.relay_with(&options).await;
    let load = Load::started(&scenario.outbox, &scenario.events, 20, 40).await;

    let convert = ["migrate", "--admin-url", &scenario.stack.root_url, "--partition", "minutely", "--convert"];
    let converted = cli_with(&scenario.stack, &scenario.outbox, &[], &convert);
    assert!(converted.status.success(), "{}", String::from_utf8_lossy(&converted.stderr));
    assert_eq!(layout(&scenario.outbox).await.period, PartitionPeriod::Minutely);
    let next_boundary =
        PartitionPeriod::Minutely.start_of(db_now(&scenario.outbox).await) + chrono::Duration::minutes(1);
    eventually("the database clock past the next partition boundary", Duration::from_secs(75), || async {
        (db_now(&scenario.outbox).await >= next_boundary + chrono::Duration::seconds(2)).then_some(())
    })
    .await;
    let written = load.finish().await;

    eventually("every event of the load SENT", Duration::from_secs(60), || async {
        (sent_of(&scenario.outbox, &scenario.events.prefix).await == written as u64).then_some(())
    })
    .await;
    let deliveries = scenario.received(written).await;
    scenario.assert_per_key_order(&deliveries).await;
    let minutes = created_minutes(&scenario.outbox.table, &scenario.outbox, &scenario.events.prefix).await;
    assert!(minutes >= 2, "the load's rows span {minutes} partition(s), not a boundary");

    eventually("the SENT-only partition dropped, the one with a FAILED row kept", Duration::from_secs(60), || async {
        let names: Vec<String> = layout(&scenario.outbox).await.partitions.into_iter().map(|p| p.name).collect();
        let held = relay.metric("relay_outbox_partitions_held");
        (!names.contains(&history.sent_only) && names.contains(&history.with_failed) && held >= 1.0).then_some(())
    })
    .await;
    assert_eq!(scenario.outbox.status_of(history.failed_id).await, RowStatus::Failed.code(), "the FAILED row survives");
    assert!(relay.metric("relay_outbox_partitions_dropped_total") >= 1.0);
    assert!(relay.metric("relay_outbox_partitions_ahead") >= 2.0);
    let audited: Option<u64> = scenario
        .outbox
        .pool
        .get_conn()
        .await
        .expect("conn")
        .exec_first(
            "SELECT COUNT(*) FROM app.outbox_relay_audit WHERE action = 'drop partition' AND target LIKE ?",
            (format!("%{} partition {}%", scenario.outbox.table.qualified(), history.sent_only),),
        )
        .await
        .expect("audit");
    assert_eq!(audited, Some(1), "the drop is audited");
    scenario.finish(relay).await;
}

/// How many rows of events with `prefix` are SENT with a msg_id.
async fn sent_of(outbox: &TestOutbox, prefix: &str) -> u64 {
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let sent: Option<u64> = conn
        .exec_first(
            format!(
                "SELECT COUNT(*) FROM {} WHERE event_id LIKE ? AND status = {} AND msg_id IS NOT NULL",
                outbox.table.qualified(),
                RowStatus::Sent.code()
            ),
            (format!("{prefix}-%"),),
        )
        .await
        .expect("count SENT");
    sent.unwrap_or_default()
}

/// In how many distinct minutes the rows of events with `prefix` were created.
async fn created_minutes(table: &OutboxTable, outbox: &TestOutbox, prefix: &str) -> u64 {
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let minutes: Option<u64> = conn
        .exec_first(
            format!(
                "SELECT COUNT(DISTINCT DATE_FORMAT(created_at, '%Y%m%d%H%i')) FROM {} WHERE event_id LIKE ?",
                table.qualified()
            ),
            (format!("{prefix}-%"),),
        )
        .await
        .expect("minutes");
    minutes.unwrap_or_default()
}

#[tokio::test]
async fn migrate_creates_partitions_ahead_and_refuses_what_it_was_not_asked() {
    let stack = Stack::from_env();
    let admin = ["--admin-url", stack.root_url.as_str()];
    let fresh = TestOutbox {
        pool: stack.root_pool().await,
        table: OutboxTable { schema: "app".to_owned(), table: unique("outbox") },
    };
    let migrate_with = |outbox: &TestOutbox, extra: &[&str]| {
        let mut args = vec!["migrate"];
        args.extend_from_slice(&admin);
        args.extend_from_slice(extra);
        cli_with(&stack, outbox, &[], &args)
    };

    let created = migrate_with(&fresh, &["--partition", "hourly"]);
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let made = layout(&fresh).await;
    assert_eq!(made.period, PartitionPeriod::Hourly);
    // Three periods ahead of the hour it ran in: two, should an hour have begun since.
    assert!((2..=3).contains(&made.periods_ahead(db_now(&fresh).await)), "{made:?}");
    assert!(migrate_with(&fresh, &["--partition", "hourly"]).status.success(), "a second migrate succeeds");
    let again = layout(&fresh).await;
    assert!(again.partitions.starts_with(&made.partitions), "a second migrate keeps every partition: {again:?}");

    let other = migrate_with(&fresh, &["--partition", "daily"]);
    let text = String::from_utf8_lossy(&other.stderr);
    assert_eq!(other.status.code(), Some(4), "{text}");
    assert!(text.contains("partitioned by hourly, not daily"), "{text}");

    let plain = TestOutbox::create(&stack).await;
    let refused = migrate_with(&plain, &["--partition", "hourly"]);
    let text = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(4), "{text}");
    assert!(text.contains("--partition hourly --convert"), "the refusal names the conversion: {text}");
    let mut conn = plain.pool.get_conn().await.expect("conn");
    assert_eq!(partitions::read(&mut conn, &plain.table).await.expect("read"), Partitioning::Unpartitioned);
}
