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
    relay.wait_tailing().await;
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
    relay.wait_tailing().await;
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
