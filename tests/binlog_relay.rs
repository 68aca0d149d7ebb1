//! The binlog path against the real MariaDB and RocketMQ: invariants I1-I4 and I7.
//! Each test has its own outbox table, relay process and checkpoint, so they run
//! side by side; all publish to the shared test topic and filter by their event ids.
#![recursion_limit = "512"]

mod common;

use std::time::Duration;

use common::collector::Collector;
use common::events::{all_sent, assert_per_key_order, consumed_all, delivery_counts, Events};
use common::outbox::{Row, TestOutbox};
use common::relay::{RelayOptions, RelayProcess};
use common::{eventually, unique, Stack};
use mysql_async::prelude::Queryable;
use outbox_kit::RowStatus;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_back_rows_other_tables_and_updates_publish_nothing() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let events = Events::new(&stack, "quiet").await;
    let prefix = &events.prefix;
    let topic = &events.topic;
    let mut relay = RelayProcess::start(&stack, &RelayOptions::new(outbox.name()));
    relay.wait_ready().await;

    outbox.insert_rolled_back(&events.rows("rolled-back", 0..3)).await;
    let other = format!("app.{}_other", outbox.name());
    outbox.exec(&format!("CREATE TABLE {other} (id INT PRIMARY KEY, event_id VARCHAR(64), biz_key VARCHAR(64), topic VARCHAR(128), payload JSON)")).await;
    outbox.exec(&format!("INSERT INTO {other} VALUES (1, '{prefix}-other-00000', 'k', '{topic}', '{{}}')")).await;
    // One real row, then UPDATE and DELETE it: only its INSERT is an event.
    outbox.insert_tx(&events.rows("real", 0..1)).await;
    all_sent(&outbox, 1, Duration::from_secs(60)).await;
    let table = outbox.table.qualified();
    outbox.exec(&format!("UPDATE {table} SET status = 0, payload = '{{\"changed\":true}}'")).await;
    outbox.exec(&format!("DELETE FROM {table}")).await;
    // A marker after all of the above: once it is SENT, the relay has read past them all.
    outbox.insert_tx(&events.rows("marker", 0..1)).await;
    all_sent(&outbox, 1, Duration::from_secs(60)).await;

    // Ask the broker itself what the test's own topic holds: exactly the real row and
    // the marker (queue max offsets count every stored message).
    let producer = stack.producer("quiet_check").await;
    assert_eq!(
        producer.stored_count(topic).await.expect("queue offsets"),
        2,
        "only the real row and the marker are published"
    );
    producer.shutdown().await;
    assert_eq!(relay.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_keys_interleaved_and_a_10k_row_transaction_arrive_in_per_key_order() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let events = Events::new(&stack, "order").await;
    let collector = Collector::start(&stack.namesrv, &events.topic, &unique("order_consumer")).await;
    let mut relay =
        RelayProcess::start(&stack, &RelayOptions::new(outbox.name()).env("OUTBOX_RELAY__LANES__MAX_IN_FLIGHT", 2_000));
    relay.wait_ready().await;

    // 50 keys x 200 events: each transaction takes 4 events of every key, in multi-row
    // INSERTs (one per key) interleaved across keys, so keys share transactions.
    let keys: Vec<String> = (0..50).map(|k| format!("k{k:02}")).collect();
    for round in 0..50 {
        let seqs = round * 4..round * 4 + 4;
        let batch: Vec<Row> = keys.iter().flat_map(|key| events.rows(key, seqs.clone())).collect();
        outbox.insert_tx(&batch).await;
        if round == 25 {
            outbox.exec("FLUSH BINARY LOGS").await;
        }
    }
    // One 10,000-row transaction (bigger than max_in_flight): 200 more events per key.
    let big: Vec<Row> = (200..400)
        .flat_map(|seq| keys.iter().map(move |key| (key.clone(), seq)))
        .map(|(key, seq)| events.row(&key, seq))
        .collect();
    outbox.insert_tx(&big).await;

    let total = 50 * 400;
    all_sent(&outbox, total, Duration::from_secs(240)).await;
    let deliveries = consumed_all(&collector, &events, total, Duration::from_secs(240)).await;
    assert_per_key_order(&stack, &events.topic, &deliveries).await;
    assert_eq!(relay.stop(), Some(0), "clean shutdown");
    collector.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_committed_while_the_relay_is_stopped_stay_pending_then_are_sent_once() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let events = Events::new(&stack, "seed").await;
    let options = RelayOptions::new(outbox.name());
    let mut relay = RelayProcess::start(&stack, &options);
    relay.wait_ready().await;
    assert_eq!(relay.stop(), Some(0));

    outbox.insert_tx(&events.rows("order-9", 0..20)).await;
    assert_eq!(outbox.count_status(RowStatus::Pending).await, 20, "no relay: rows stay PENDING (status 0)");

    let collector = Collector::start(&stack.namesrv, &events.topic, &unique("seed_consumer")).await;
    let mut relay = RelayProcess::start(&stack, &options);
    relay.wait_ready().await;
    all_sent(&outbox, 20, Duration::from_secs(60)).await;
    let got = consumed_all(&collector, &events, 20, Duration::from_secs(60)).await;
    // A clean stop checkpointed: the restart resumed exactly there, so each event once.
    let counts = delivery_counts(&got);
    assert!(counts.values().all(|&c| c == 1), "each event consumed once: {counts:?}");

    assert!(relay.http_get("/healthz").starts_with("HTTP/1.0 200"), "health endpoint answers 200");
    let metrics = relay.http_get("/metrics");
    for line in ["relay_events_sent_total 20", "relay_events_failed_total 0", "outbox_oldest_pending_seconds"] {
        assert!(metrics.contains(line), "{line} missing from /metrics:\n{metrics}");
    }
    assert_eq!(relay.stop(), Some(0));
    // The clean stop mirrored its checkpoint to the primary.
    let mirror: Option<(String, u64)> = outbox
        .pool
        .get_conn()
        .await
        .expect("conn")
        .exec_first(
            "SELECT binlog_file, binlog_pos FROM app.outbox_relay_checkpoint WHERE source_id = ?",
            (format!("app.{}", outbox.name()),),
        )
        .await
        .expect("mirror row");
    let (file, pos) = mirror.expect("a checkpoint mirror row for this outbox table");
    assert!(!file.is_empty() && pos > 4, "mirrored position {file}:{pos}");
    collector.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_after_sends_before_the_checkpoint_gives_duplicates_never_loss() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let events = Events::new(&stack, "kill").await;
    let collector = Collector::start(&stack.namesrv, &events.topic, &unique("kill_consumer")).await;
    // A checkpoint interval far longer than the test: sends happen, the position does not move.
    let options = RelayOptions::new(outbox.name()).env("OUTBOX_RELAY__CHECKPOINT__INTERVAL_MS", 3_600_000);
    let mut relay = RelayProcess::start(&stack, &options);
    relay.wait_ready().await;
    outbox.insert_tx(&events.rows("kill-a", 0..50)).await;
    outbox.insert_tx(&events.rows("kill-b", 0..50)).await;
    all_sent(&outbox, 100, Duration::from_secs(60)).await;
    consumed_all(&collector, &events, 100, Duration::from_secs(60)).await;
    relay.kill();

    let mut relay = RelayProcess::start(&stack, &options);
    relay.wait_ready().await;
    let got = eventually("every event delivered a second time after the restart", Duration::from_secs(60), || async {
        let got = collector.received(|id| id.starts_with(&format!("{}-", events.prefix)));
        (got.len() >= 200).then_some(got)
    })
    .await;
    let counts = delivery_counts(&got);
    let lost = 100 - counts.len();
    let duplicates: usize = counts.values().map(|c| c - 1).sum();
    eprintln!("after SIGKILL: {} distinct events, {duplicates} duplicates, {lost} lost", counts.len());
    assert_eq!(lost, 0, "nothing lost");
    assert_eq!(duplicates, 100, "the unacknowledged-by-checkpoint range is resent once");
    relay.stop();
    collector.shutdown().await;
}

/// Runs the relay until it exits by itself; returns its exit code and log.
async fn run_until_exit(stack: &Stack, options: &RelayOptions) -> (Option<i32>, String) {
    let mut relay = RelayProcess::start(stack, options);
    let code = relay.wait_exit(Duration::from_secs(60)).await;
    (code, relay.log_text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_user_without_replication_privileges_is_refused_naming_the_grant() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let user = unique("norepl");
    outbox.exec(&format!("CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY 'pw'")).await;
    outbox.exec(&format!("GRANT SELECT ON app.* TO '{user}'@'127.0.0.1'")).await;
    let url =
        format!("mysql://{user}:pw@{}", stack.repl_url.rsplit_once('@').map(|(_, host)| host).unwrap_or_default());
    let (code, log) =
        run_until_exit(&stack, &RelayOptions::new(outbox.name()).env("OUTBOX_RELAY__SOURCE__URL", url)).await;
    assert_eq!(code, Some(4), "{log}");
    assert!(log.contains("REPLICATION SLAVE, REPLICATION CLIENT"), "{log}");
    outbox.exec(&format!("DROP USER '{user}'@'127.0.0.1'")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_table_without_a_needed_column_is_refused_naming_it() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    outbox.exec(&format!("ALTER TABLE {} DROP COLUMN biz_key", outbox.table.qualified())).await;
    let (code, log) = run_until_exit(&stack, &RelayOptions::new(outbox.name())).await;
    assert_eq!(code, Some(4), "{log}");
    assert!(log.contains("no column `biz_key`"), "{log}");
}
