//! The last lines of defence against a silent loss, against the real stack: SENT rows
//! looked up on the broker (by `outbox-relay verify` and by the leader's sampler), and
//! the leader's hourly reconciliation of created, SENT and processed events.

mod common;

use std::time::Duration;

use common::command::{cli_with, stdout};
use common::consumer_db::consumer_db;
use common::eventually;
use common::scenario::Scenario;
use mysql_async::prelude::Queryable;
use mysql_async::Pool;

/// A msg_id of the client's form that no broker ever stored.
const FORGED_MSG_ID: &str = "7F0000010000000000000000FFFFFFFF";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sent_row_whose_msg_id_the_broker_never_stored_is_reported_and_genuine_ones_are_found() {
    let scenario = Scenario::new("verify").await;
    let options =
        scenario.options().env("OUTBOX_RELAY__VERIFY__INTERVAL_MS", 1000).env("OUTBOX_RELAY__VERIFY__SAMPLE", 100);
    let relay = scenario.relay_with(&options).await;
    scenario.outbox.insert_tx(&scenario.events.rows("k", 0..20)).await;
    scenario.all_sent(20).await;
    let forged = scenario.outbox.id_of(&scenario.events.id("k", 7)).await;
    scenario
        .outbox
        .exec(&format!(
            "UPDATE {} SET msg_id = '{FORGED_MSG_ID}' WHERE id = {forged}",
            scenario.outbox.table.qualified()
        ))
        .await;

    eventually("the leader's sampler checked the 20 rows", Duration::from_secs(60), || async {
        (relay.metric_sum("relay_verify_checked_rows_total") >= 20.0).then_some(())
    })
    .await;
    assert_eq!(relay.metric_sum("relay_verify_missing_rows_total"), 1.0, "the forged row, and only it, is missing");

    let env = [("OUTBOX_RELAY__ROCKETMQ__NAMESRV", scenario.stack.namesrv.clone())];
    let output = cli_with(&scenario.stack, &scenario.outbox, &env, &["verify", "--sample", "20", "--json"]);
    assert_eq!(output.status.code(), Some(7), "{}", String::from_utf8_lossy(&output.stderr));
    let verified: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("verify --json");
    assert_eq!(verified["checked"], 20, "{verified}");
    let missing: Vec<u64> =
        verified["missing"].as_array().expect("missing").iter().map(|m| m["id"].as_u64().expect("id")).collect();
    assert_eq!(missing, vec![forged], "{verified}");
    assert_eq!(verified["missing"][0]["msg_id"], FORGED_MSG_ID);
    scenario.finish(relay).await;
}

/// The report table's `(created, sent, unsent, unprocessed)` summed over `topic`'s hours.
async fn reported(pool: &Pool, table: &str, topic: &str) -> Option<(u64, u64, u64, Option<u64>)> {
    let mut conn = pool.get_conn().await.expect("conn");
    conn.exec_first(
        "SELECT CAST(SUM(created) AS UNSIGNED), CAST(SUM(sent) AS UNSIGNED), CAST(SUM(unsent) AS UNSIGNED), \
         CAST(SUM(unprocessed) AS UNSIGNED) FROM app.outbox_relay_reconciliation WHERE outbox_table = ? AND topic = ? \
         HAVING COUNT(*) > 0",
        (table, topic),
    )
    .await
    .expect("report rows")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_event_the_consumer_never_recorded_shows_in_the_report_and_the_metric_within_a_period() {
    let scenario = Scenario::new("reconcile").await;
    let (db, consumer) = consumer_db(&scenario.stack).await;
    let consumer_url = scenario.stack.root_url.replacen("/app", &format!("/{db}"), 1);
    let options = scenario
        .options()
        .env("OUTBOX_RELAY__RECONCILE__INTERVAL_MS", 1000)
        .env("OUTBOX_RELAY__RECONCILE__SETTLE_SECS", 1)
        .env("OUTBOX_RELAY__RECONCILE__CONSUMER_TABLE", "event_dedup")
        .env("OUTBOX_RELAY__RECONCILE__CONSUMER_URL", consumer_url);
    let relay = scenario.relay_with(&options).await;
    scenario.outbox.insert_tx(&scenario.events.rows("k", 0..10)).await;
    scenario.all_sent(10).await;
    // The consumer recorded nine of the ten events, as the kit does.
    let recorded = format!(
        "INSERT INTO `{db}`.event_dedup (event_id, status, msg_id) SELECT event_id, 'PROCESSED', msg_id FROM {} WHERE event_id <> ?",
        scenario.outbox.table.qualified()
    );
    let never_consumed = scenario.events.id("k", 4);
    consumer.get_conn().await.expect("conn").exec_drop(recorded, (&never_consumed,)).await.expect("record nine");

    let table = scenario.outbox.table.qualified();
    let topic = scenario.events.topic.clone();
    // One period is a second here, the settle time another: a few periods at most.
    eventually("the unprocessed event in the report table and the metric", Duration::from_secs(10), || async {
        // The metric is set before the report is written: read it once the row is there.
        let row = reported(&scenario.outbox.pool, &table, &topic).await;
        (row == Some((10, 10, 0, Some(1))) && relay.metric_sum("relay_reconcile_unprocessed_events") == 1.0)
            .then_some(())
    })
    .await;

    consumer
        .get_conn()
        .await
        .expect("conn")
        .exec_drop(
            format!("INSERT INTO `{db}`.event_dedup (event_id, status) VALUES (?, 'PROCESSED')"),
            (&never_consumed,),
        )
        .await
        .expect("record the tenth");
    eventually("the difference gone once the consumer recorded it", Duration::from_secs(10), || async {
        let row = reported(&scenario.outbox.pool, &table, &topic).await;
        (row == Some((10, 10, 0, Some(0))) && relay.metric_sum("relay_reconcile_unprocessed_events") == 0.0)
            .then_some(())
    })
    .await;
    scenario.finish(relay).await;
}
