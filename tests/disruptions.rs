//! Disruptions of the shared stack: the broker stopped while events arrive, and the
//! relay's binlog connection killed by the server. These tests disturb every client
//! of the stack, so they live in their own test binary (cargo runs test binaries one
//! after another) and take turns within it.
#![recursion_limit = "512"]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::collector::Collector;
use common::outbox::{Row, TestOutbox};
use common::relay::{RelayOptions, RelayProcess};
use common::{eventually, fresh_topic, unique, Stack};
use mysql_async::prelude::Queryable;

/// One disruption at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn broker_pid_file() -> PathBuf {
    let state =
        std::env::var("OUTBOX_RELAY_TEST_STACK").expect("OUTBOX_RELAY_TEST_STACK (eval \"$(scripts/stack env)\")");
    PathBuf::from(state).join("broker.pid")
}

fn process_alive(pid: &str) -> bool {
    Command::new("kill").args(["-0", pid]).status().is_ok_and(|s| s.success())
}

async fn stop_broker() {
    let pid = std::fs::read_to_string(broker_pid_file()).expect("broker pid file").trim().to_owned();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    eventually("the broker process to exit", Duration::from_secs(30), || async {
        (!process_alive(&pid)).then_some(())
    })
    .await;
}

fn start_broker() {
    let stack = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/stack");
    let status = Command::new(stack).arg("up").status().expect("run scripts/stack up");
    assert!(status.success(), "scripts/stack up failed");
}

fn rows(prefix: &str, topic: &str, from: usize, to: usize) -> Vec<Row> {
    (from..to)
        .map(|i| Row {
            event_id: format!("{prefix}-{i:04}"),
            biz_key: format!("key-{}", i % 7),
            topic: topic.to_owned(),
            payload: format!(r#"{{"i":{i}}}"#),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_down_marks_nothing_sent_and_everything_is_delivered_after_it_returns() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let prefix = unique("outage");
    let topic = fresh_topic(&stack).await;
    let options = RelayOptions::new(outbox.name())
        .env("OUTBOX_RELAY__RETRY__MAX_RETRY", 10_000)
        .env("OUTBOX_RELAY__ROCKETMQ__SEND_TIMEOUT_MS", 1_000);
    let mut relay = RelayProcess::start(&stack, &options);
    relay.wait_ready().await;
    outbox.insert_tx(&rows(&prefix, &topic, 0, 10)).await;
    eventually("the first rows SENT", Duration::from_secs(60), || async {
        (outbox.count_status(2).await == 10).then_some(())
    })
    .await;

    stop_broker().await;
    for start in (10..60).step_by(10) {
        outbox.insert_tx(&rows(&prefix, &topic, start, start + 10)).await;
    }
    // While the broker is down, sends fail and are retried in place: nothing new may
    // become SENT. Watch the table for a while (the relay retries every <= 2 s).
    let watch_until = tokio::time::Instant::now() + Duration::from_secs(8);
    while tokio::time::Instant::now() < watch_until {
        assert_eq!(outbox.count_status(2).await, 10, "a row was marked SENT while the broker was down");
        assert_eq!(outbox.count_status(3).await, 0, "a row was marked FAILED during a retryable outage");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    start_broker();
    let collector = Collector::start(&stack.namesrv, &topic, &unique("outage_consumer")).await;
    eventually("all 60 rows SENT after the broker returned", Duration::from_secs(180), || async {
        (outbox.count_status(2).await == 60).then_some(())
    })
    .await;
    collector.wait_distinct(&format!("{prefix}-"), 60, Duration::from_secs(120)).await;
    assert!(relay.log_text().contains("retrying the same batch"), "the relay logged its retries");
    assert_eq!(relay.stop(), Some(0));
    collector.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_binlog_connection_is_reopened_without_loss() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let prefix = unique("reconnect");
    let topic = fresh_topic(&stack).await;
    let collector = Collector::start(&stack.namesrv, &topic, &unique("reconnect_consumer")).await;
    let mut relay = RelayProcess::start(&stack, &RelayOptions::new(outbox.name()));
    relay.wait_ready().await;
    outbox.insert_tx(&rows(&prefix, &topic, 0, 20)).await;
    eventually("the first rows SENT", Duration::from_secs(60), || async {
        (outbox.count_status(2).await == 20).then_some(())
    })
    .await;

    // The server drops the replica connection (as on a failover or a network cut).
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let dumps: Vec<u64> = conn
        .query(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%' AND USER = 'outbox_repl'",
        )
        .await
        .expect("processlist");
    assert!(!dumps.is_empty(), "the relay's binlog dump thread is visible");
    for id in dumps {
        conn.query_drop(format!("KILL {id}")).await.expect("kill dump thread");
    }
    for start in [20, 30] {
        outbox.insert_tx(&rows(&prefix, &topic, start, start + 10)).await;
    }
    eventually("all 40 rows SENT after the reconnect", Duration::from_secs(60), || async {
        (outbox.count_status(2).await == 40).then_some(())
    })
    .await;
    collector.wait_distinct(&format!("{prefix}-"), 40, Duration::from_secs(60)).await;
    assert!(relay.log_text().contains("reconnecting"), "the relay logged the reconnect:\n{}", relay.log_text());
    assert_eq!(relay.stop(), Some(0));
    collector.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binlog_purged_while_the_relay_is_stopped_is_reported_swept_and_nothing_is_lost() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let prefix = unique("purged");
    let topic = fresh_topic(&stack).await;
    let collector = Collector::start(&stack.namesrv, &topic, &unique("purged_consumer")).await;
    let options = RelayOptions::new(outbox.name());
    let mut relay = RelayProcess::start(&stack, &options);
    relay.wait_ready().await;
    outbox.insert_tx(&rows(&prefix, &topic, 0, 20)).await;
    eventually("the first rows SENT", Duration::from_secs(60), || async {
        (outbox.count_status(2).await == 20).then_some(())
    })
    .await;
    assert_eq!(relay.stop(), Some(0));

    // Committed while the relay is stopped, then the binlog holding them is purged.
    for start in (20..220).step_by(50) {
        outbox.insert_tx(&rows(&prefix, &topic, start, start + 50)).await;
    }
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    conn.query_drop("FLUSH BINARY LOGS").await.expect("flush binary logs");
    let status: Option<mysql_async::Row> = conn.query_first("SHOW MASTER STATUS").await.expect("master status");
    let current_file: String = status.and_then(|row| row.get(0)).expect("binlog on");
    // MariaDB keeps a file until its binlog checkpoint passes it: purge until it is gone.
    eventually("the relay's binlog file purged", Duration::from_secs(30), || async {
        let mut conn = outbox.pool.get_conn().await.ok()?;
        conn.query_drop(format!("PURGE BINARY LOGS TO '{current_file}'")).await.ok()?;
        let files: Vec<mysql_async::Row> = conn.query("SHOW BINARY LOGS").await.ok()?;
        let first: Option<String> = files.first().and_then(|row| row.get(0));
        (first.as_deref() == Some(current_file.as_str())).then_some(())
    })
    .await;

    let mut relay = RelayProcess::start(&stack, &options);
    relay.wait_ready().await;
    eventually("all 220 rows SENT after the lost position", Duration::from_secs(60), || async {
        (outbox.count_status(2).await == 220).then_some(())
    })
    .await;
    collector.wait_distinct(&format!("{prefix}-"), 220, Duration::from_secs(60)).await;
    let log = relay.log_text();
    assert!(log.contains("binlog position lost"), "the loss is reported:\n{log}");
    assert_eq!(relay.metric("relay_binlog_position_lost_total"), 1.0, "and counted");
    // Tailing resumed at the current position: new rows take the binlog path again.
    outbox.insert_tx(&rows(&prefix, &topic, 220, 230)).await;
    eventually("rows after the recovery SENT", Duration::from_secs(60), || async {
        (outbox.count_status(2).await == 230).then_some(())
    })
    .await;
    assert_eq!(relay.stop(), Some(0));
    collector.shutdown().await;
}

/// Starts the broker again when dropped, even when the test failed.
struct BrokerOutage;

impl BrokerOutage {
    async fn begin() -> Self {
        stop_broker().await;
        BrokerOutage
    }
}

impl Drop for BrokerOutage {
    fn drop(&mut self) {
        start_broker();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_down_past_the_backoff_cap_books_growing_retries_then_fails_rows_never_sent() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let prefix = unique("retries");
    let topic = fresh_topic(&stack).await;
    let options = RelayOptions::new(outbox.name())
        .env("OUTBOX_RELAY__MODE", "poll")
        .env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 50)
        .env("OUTBOX_RELAY__RETRY__MAX_RETRY", 4)
        .env("OUTBOX_RELAY__RETRY__BACKOFF_INITIAL_MS", 300)
        .env("OUTBOX_RELAY__RETRY__BACKOFF_MAX_MS", 1_200)
        .env("OUTBOX_RELAY__ROCKETMQ__SEND_TIMEOUT_MS", 500);
    let mut relay = RelayProcess::start(&stack, &options);
    relay.wait_ready().await;
    // One event first, so the topic's lanes are up before the broker goes away.
    outbox.insert_tx(&rows(&prefix, &topic, 0, 1)).await;
    eventually("the first row SENT", Duration::from_secs(60), || async {
        (outbox.count_status(2).await == 1).then_some(())
    })
    .await;
    let outage = BrokerOutage::begin().await;
    outbox.insert_tx(&rows(&prefix, &topic, 1, 6)).await;

    // Watch every row's retry bookkeeping until all are FAILED.
    let seen = std::cell::RefCell::new(std::collections::BTreeMap::<(u64, u32), f64>::new());
    eventually("the 5 rows FAILED after max_retry", Duration::from_secs(120), || async {
        let mut conn = outbox.pool.get_conn().await.ok()?;
        let rows: Vec<(u64, u8, u32, String)> = conn
            .query(format!(
                "SELECT id, status, retry_count, CAST(UNIX_TIMESTAMP(next_retry_at) AS CHAR) FROM {} WHERE status <> 2",
                outbox.table.qualified()
            ))
            .await
            .ok()?;
        assert_eq!(outbox.count_status(2).await, 1, "a row was marked SENT while the broker was down");
        for (id, _, retry_count, next) in &rows {
            seen.borrow_mut().insert((*id, *retry_count), next.parse().unwrap_or(f64::NAN));
        }
        (rows.len() == 5 && rows.iter().all(|r| r.1 == 3)).then_some(())
    })
    .await;
    drop(outage);
    let seen = seen.into_inner();

    // next_retry_at moved on by at least the configured delay each time: 0.6, 1.2, 1.2 s
    // after the 2nd, 3rd and 4th failures (0.3 s after the 1st).
    let expected_gap = |retry_count: u32| [0.0, 0.3, 0.6, 1.2, 1.2][retry_count as usize];
    let mut gaps_checked = 0;
    for (&(id, count), &next) in &seen {
        if let Some(&previous) = seen.get(&(id, count.wrapping_sub(1))).filter(|_| (2..=4).contains(&count)) {
            assert!(
                next - previous >= expected_gap(count) - 0.01,
                "row {id}: retry {count} due {:.3}s after retry {}, expected >= {}",
                next - previous,
                count - 1,
                expected_gap(count)
            );
            gaps_checked += 1;
        }
    }
    assert!(gaps_checked >= 5, "saw the bookkeeping of several retries: {seen:?}");
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let failed: Vec<(u32, String)> = conn
        .query(format!("SELECT retry_count, last_error FROM {} WHERE status = 3", outbox.table.qualified()))
        .await
        .expect("failed rows");
    assert_eq!(failed.len(), 5);
    for (retry_count, last_error) in failed {
        assert_eq!(retry_count, 5, "1 attempt + 4 retries, then FAILED");
        assert!(last_error.starts_with("gave up after 4 retries"), "readable last_error: {last_error}");
    }
    assert_eq!(relay.metric("relay_events_failed_total"), 5.0);
    assert_eq!(relay.stop(), Some(0));
}
