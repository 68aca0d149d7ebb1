//! The polling sweep against the real MariaDB and RocketMQ: competing sweepers and
//! leases (a sweeper that dies holding claims), first start and a deleted checkpoint,
//! slow SENT write-backs, a row reset by hand, rows that can never be sent, and poll
//! mode on its own.
#![recursion_limit = "512"]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::events::{all_sent, delivery_counts, Events};
use common::outbox::{Row, TestOutbox};
use common::relay::{RelayOptions, RelayProcess};
use common::scenario::Scenario;
use common::{eventually, fresh_topic, unique, Stack};
use mysql_async::prelude::Queryable;
use outbox_kit::RowStatus;

/// A relay in poll mode sweeping every `interval_ms`.
fn poll_mode(table: &str, interval_ms: u64) -> RelayOptions {
    RelayOptions::new(table).env("OUTBOX_RELAY__MODE", "poll").env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", interval_ms)
}

/// `keys` keys with `per_key` events each, ids `{prefix}-k{key}-{seq}`.
fn spread(events: &Events, keys: usize, seqs: std::ops::Range<usize>) -> Vec<Row> {
    (0..keys).flat_map(|k| events.rows(&format!("k{k:02}"), seqs.clone())).collect()
}

/// `SELECT id, <expr>` as (id, f64) pairs.
async fn numbers_by_id(outbox: &TestOutbox, expr: &str, filter: &str) -> HashMap<u64, f64> {
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let rows: Vec<(u64, Option<String>)> = conn
        .query(format!("SELECT id, CAST({expr} AS CHAR) FROM {} WHERE {filter}", outbox.table.qualified()))
        .await
        .expect("select numbers");
    rows.into_iter().map(|(id, v)| (id, v.and_then(|v| v.parse().ok()).unwrap_or(f64::NAN))).collect()
}

/// The database's clock, Unix seconds.
async fn db_now(outbox: &TestOutbox) -> f64 {
    let now: Option<String> = outbox
        .pool
        .get_conn()
        .await
        .expect("conn")
        .query_first("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) AS CHAR)")
        .await
        .expect("now");
    now.and_then(|n| n.parse().ok()).expect("a number")
}

async fn stored_on_broker(stack: &Stack, topic: &str) -> i64 {
    let producer = stack.producer("count").await;
    let stored = producer.stored_count(topic).await.expect("stored count");
    producer.shutdown().await;
    stored
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sweepers_never_send_a_row_twice_and_a_killed_sweepers_rows_return_after_its_lease() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let events = Events::new(&stack, "claims").await;

    // Sweeper A claims 200 rows and holds them: its lanes wait a minute to fill a batch.
    outbox.insert_tx(&spread(&events, 10, 0..20)).await;
    let a = RelayProcess::start(
        &stack,
        &poll_mode(outbox.name(), 200)
            .env("OUTBOX_RELAY__LEADER__NAME", unique("sweeper"))
            .env("OUTBOX_RELAY__LANES__LINGER_MS", 60_000)
            .env("OUTBOX_RELAY__LANES__BATCH_SIZE", 1_000)
            .env("OUTBOX_RELAY__SWEEP__LEASE_MS", 8_000),
    );
    eventually("sweeper A to claim all 200 rows", Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sending).await == 200).then_some(())
    })
    .await;
    a.kill();
    let leases = numbers_by_id(&outbox, "UNIX_TIMESTAMP(lease_until)", "status = 1").await;
    assert_eq!(leases.len(), 200, "killed in SENDING: A's 200 rows stay claimed");
    let owners: Vec<String> = outbox
        .pool
        .get_conn()
        .await
        .expect("conn")
        .query(format!("SELECT DISTINCT owner FROM {} WHERE status = 1", outbox.table.qualified()))
        .await
        .expect("owners");
    assert_eq!(owners.len(), 1, "one owner holds them: {owners:?}");
    let a_owner = &owners[0];

    // Three sweepers (one optimistic) compete for the table while rows keep arriving:
    // each its own fleet (its own lease), as shards of one table would be, so only the
    // claims keep them apart.
    let mut sweepers: Vec<RelayProcess> = ["skip_locked", "skip_locked", "optimistic"]
        .into_iter()
        .map(|claim| {
            RelayProcess::start(
                &stack,
                &poll_mode(outbox.name(), 200)
                    .env("OUTBOX_RELAY__SWEEP__CLAIM", claim)
                    .env("OUTBOX_RELAY__LEADER__NAME", unique("sweeper")),
            )
        })
        .collect();
    for sweeper in &mut sweepers {
        sweeper.wait_ready().await;
    }
    let sweeping_since = db_now(&outbox).await;
    // Reclaimed within one period (200 ms) of the lease's end (or of the sweepers' start).
    let reclaimed_at = eventually("A's rows reclaimed", Duration::from_secs(60), || async {
        let held = numbers_by_id(&outbox, "0", &format!("status = 1 AND owner = '{a_owner}'")).await;
        let now = db_now(&outbox).await;
        held.is_empty().then_some(now)
    })
    .await;
    let lease_end = leases.values().copied().fold(f64::MIN, f64::max);
    let due = lease_end.max(sweeping_since) + 0.2;
    assert!(reclaimed_at <= due + 1.0, "reclaimed at {reclaimed_at}, more than a period after {due}");
    for seq in (20..120).step_by(5) {
        outbox.insert_tx(&spread(&events, 30, seq..seq + 5)).await;
        // Pacing the load (not synchronisation): each sweeper's period sees new rows.
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let total = 200 + 30 * 100;
    all_sent(&outbox, total, Duration::from_secs(120)).await;

    assert_eq!(outbox.count_status(RowStatus::Sending).await, 0, "no row left SENDING");
    assert_eq!(stored_on_broker(&stack, &events.topic).await, total as i64, "every row stored exactly once");
    // They competed: the optimistic one may lose every race to the locking ones, but
    // rows were claimed by more than one sweeper.
    let claimed: Vec<f64> = sweepers.iter().map(|s| s.metric("relay_sweep_claimed_total")).collect();
    assert!(claimed.iter().filter(|&&c| c > 0.0).count() >= 2, "claims per sweeper: {claimed:?}");
    assert!(sweepers[2].log_text().contains("claim=Optimistic"), "the third sweeper claims optimistically");
    // At least A's 200 (a sweeper that stalls past its own lease is reclaimed too: correct).
    let reclaimed: f64 = sweepers.iter().map(|s| s.metric("relay_sweep_reclaimed_total")).sum();
    assert!(reclaimed >= 200.0, "A's rows were reclaimed: {reclaimed}");
    let sent_at = numbers_by_id(&outbox, "UNIX_TIMESTAMP(sent_at)", "status = 2").await;
    for (id, lease_until) in &leases {
        let sent = sent_at[id];
        assert!(sent >= *lease_until, "row {id} sent at {sent} while A's lease ran until {lease_until}");
    }
    for mut sweeper in sweepers {
        assert_eq!(sweeper.stop(), Some(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_checkpoint_with_pending_rows_still_delivers_every_row() {
    let scenario = Scenario::consumed("bootstrap").await;
    let Scenario { outbox, events, .. } = &scenario;
    let options = scenario.options();
    let mut relay = scenario.relay_with(&options).await;
    outbox.insert_tx(&spread(events, 5, 0..2)).await;
    scenario.all_sent(10).await;
    assert_eq!(relay.stop(), Some(0));

    for seq in (2..62).step_by(10) {
        outbox.insert_tx(&spread(events, 5, seq..seq + 10)).await;
    }
    // No checkpoint anywhere: the RocksDB directory and the mirror row are both gone
    // (with the mirror left, the relay resumes from it: see tests/leader.rs).
    std::fs::remove_dir_all(&options.checkpoint_dir).expect("delete the RocksDB checkpoint");
    outbox.exec(&format!("DELETE FROM app.outbox_relay_checkpoint WHERE source_id = 'app.{}'", outbox.name())).await;
    let relay = scenario.relay_with(&options).await;
    scenario.all_sent(310).await;
    let deliveries = scenario.received(310).await;
    scenario.assert_per_key_order(&deliveries).await;
    assert_eq!(relay.metric("relay_full_sweeps_total"), 1.0, "no checkpoint anywhere: one full sweep");
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "fault-injection"), ignore = "needs --features fault-injection (scripts/test enables it)")]
async fn rows_on_the_broker_whose_sent_write_back_is_slow_are_not_swept_again() {
    let scenario = Scenario::new("slow_write_back").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    // Each SENT write-back waits 3 s (a slow primary), far past a grace of zero: every
    // row stays PENDING for seconds after the binlog path acknowledged it, while the
    // sweep fences and claims what the binlog path has passed, every 200 ms.
    let options = scenario
        .options()
        .env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 200)
        .env("OUTBOX_RELAY__SWEEP__GRACE_MS", 0)
        .env("OUTBOX_RELAY__SOURCE__HEARTBEAT_MS", 500)
        .env("OUTBOX_RELAY_FAULT_SENT_WRITE_DELAY_MS", 3_000);
    let relay = scenario.relay_with(&options).await;
    for seq in 0..12 {
        outbox.insert_tx(&spread(events, 3, seq..seq + 1)).await;
        // Pacing the load (not synchronisation): commits spread over several seconds,
        // so the binlog path passes the sweep's fences while write-backs wait.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    all_sent(outbox, 36, Duration::from_secs(90)).await;

    let waited = relay.metric("relay_sweep_write_back_wait_seconds_sum");
    assert!(waited > 1.0, "the sweep waited for the slow write-backs: {waited:.3} s in all");
    assert_eq!(relay.metric("relay_sweep_claimed_total"), 0.0, "and then claimed none of the rows");
    assert_eq!(stored_on_broker(stack, &events.topic).await, 36, "every event stored once");
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sent_row_set_back_to_pending_by_hand_is_published_again() {
    let scenario = Scenario::consumed("reset").await;
    let Scenario { outbox, events, .. } = &scenario;
    let options = scenario
        .options()
        .env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 300)
        .env("OUTBOX_RELAY__SWEEP__GRACE_MS", 1_000)
        .env("OUTBOX_RELAY__SOURCE__HEARTBEAT_MS", 500);
    let relay = scenario.relay_with(&options).await;
    outbox.insert_tx(&[events.row("order-1", 0)]).await;
    scenario.all_sent(1).await;
    let event_id = events.id("order-1", 0);
    let first_msg_id = outbox.statuses().await[&event_id].1.clone();
    scenario.received(1).await;

    outbox.exec(&format!("UPDATE {} SET status = 0 WHERE event_id = '{event_id}'", outbox.table.qualified())).await;
    let second_msg_id = eventually("the reset row SENT again", Duration::from_secs(60), || async {
        let (status, msg_id) = outbox.statuses().await[&event_id].clone();
        (status == 2 && msg_id != first_msg_id).then_some(msg_id)
    })
    .await;
    assert!(second_msg_id.is_some_and(|m| !m.is_empty()));
    let deliveries = eventually("the event delivered a second time", Duration::from_secs(60), || async {
        let got = scenario.collector().received(|id| id == event_id);
        (got.len() >= 2).then_some(got)
    })
    .await;
    assert_eq!(delivery_counts(&deliveries)[event_id.as_str()], 2, "published once more, not more");
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_topic_and_an_oversized_payload_fail_at_once_while_other_events_flow() {
    let scenario = Scenario::consumed("poison").await;
    let Scenario { outbox, events, .. } = &scenario;
    let relay = scenario.relay().await;

    let missing_topic = unique("t_missing");
    let mut lost = events.row("lost", 0);
    lost.topic = missing_topic.clone();
    let mut huge = events.row("huge", 0);
    huge.payload = format!(r#"{{"blob":"{}"}}"#, "x".repeat(5 << 20));
    let mut rows = spread(events, 4, 0..5);
    rows.insert(7, lost);
    rows.insert(13, huge);
    outbox.insert_tx(&rows).await;
    outbox.insert_tx(&spread(events, 4, 5..10)).await;

    let failed = eventually("the two poison rows FAILED", Duration::from_secs(60), || async {
        let mut conn = outbox.pool.get_conn().await.ok()?;
        let failed: Vec<(String, u32, String)> = conn
            .query(format!(
                "SELECT biz_key, retry_count, last_error FROM {} WHERE status = {} ORDER BY biz_key",
                outbox.table.qualified(),
                RowStatus::Failed.code()
            ))
            .await
            .ok()?;
        (failed.len() == 2).then_some(failed)
    })
    .await;
    let (huge_key, huge_tries, huge_error) = &failed[0];
    let (lost_key, lost_tries, lost_error) = &failed[1];
    assert_eq!((huge_key.as_str(), lost_key.as_str()), ("huge", "lost"));
    assert_eq!((*huge_tries, *lost_tries), (1, 1), "FAILED at once, without retries");
    assert!(
        huge_error.contains("over the broker limit") && huge_error.contains("max_message_bytes"),
        "readable: {huge_error}"
    );
    assert!(lost_error.contains(&missing_topic) && lost_error.contains("does not exist"), "readable: {lost_error}");
    let deliveries = scenario.received(40).await;
    assert!(deliveries.iter().all(|d| d.biz_key.starts_with('k')), "only the good events were delivered");
    assert_eq!(outbox.count_status(RowStatus::Sent).await, 40, "every other event SENT");
    assert_eq!(
        relay.metric("relay_failed_events_total{reason=\"too_large\"}"),
        1.0,
        "the alert metric counts the huge one"
    );
    assert_eq!(
        relay.metric("relay_failed_events_total{reason=\"no_topic\"}"),
        1.0,
        "and the lost one, each by its reason"
    );
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_mode_alone_delivers_everything_in_key_order_with_the_seeds_parameters() {
    let scenario = Scenario::consumed("poll").await;
    let Scenario { outbox, events, .. } = &scenario;
    for seq in (0..40).step_by(10) {
        outbox.insert_tx(&spread(events, 20, seq..seq + 10)).await;
    }
    // No interval or batch set: poll mode defaults to the seed's 500 ms and 100 rows.
    let relay = scenario.relay_with(&scenario.options().env("OUTBOX_RELAY__MODE", "poll")).await;
    for seq in (40..50).step_by(2) {
        outbox.insert_tx(&spread(events, 20, seq..seq + 2)).await;
    }
    all_sent(outbox, 1_000, Duration::from_secs(120)).await;
    let deliveries = scenario.received(1_000).await;
    scenario.assert_per_key_order(&deliveries).await;
    assert_eq!(outbox.count_status(RowStatus::Sending).await, 0);
    assert_eq!(relay.metric("relay_events_published_total{path=\"binlog\"}"), 0.0, "poll mode reads no binlog");
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_mode_runs_without_a_source_section_and_claims_optimistically() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let topic = fresh_topic(&stack).await;
    let config = std::env::temp_dir().join(format!("{}.toml", unique("poll")));
    let example = include_str!("../config/relay.toml");
    let without_source = format!(
        "{}\n[primary]\n{}",
        example.split("\n[source]\n").next().unwrap_or_default().replace("mode = \"binlog\"", "mode = \"poll\""),
        example.split("\n[primary]\n").nth(1).unwrap_or_default()
    );
    std::fs::write(&config, without_source).expect("write config");
    // Alone, so its claims are certain: the optimistic method (servers without SKIP LOCKED).
    let mut options = RelayOptions::new(outbox.name()).env("OUTBOX_RELAY__SWEEP__CLAIM", "optimistic");
    options.config = Some(config);
    options.source = false;
    let mut relay = RelayProcess::start(&stack, &options);
    relay.wait_ready().await;
    let rows: Vec<Row> = (0..250)
        .map(|i| Row {
            event_id: unique("nosource"),
            biz_key: format!("k{i}"),
            topic: topic.clone(),
            payload: "{}".into(),
        })
        .collect();
    outbox.insert_tx(&rows).await;
    all_sent(&outbox, 250, Duration::from_secs(30)).await;
    assert!(relay.log_text().contains("claim=Optimistic"));
    assert_eq!(relay.metric("relay_sweep_claimed_total"), 250.0, "claimed once each, optimistically");
    assert_eq!(relay.stop(), Some(0));
}
