//! The binlog path against the real MariaDB and RocketMQ: invariants I1-I4 and I7.
//! Each test has its own outbox table, relay process and checkpoint, so they run
//! side by side; all publish to the shared test topic and filter by their event ids.
#![recursion_limit = "512"]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::events::{all_sent, consumed_all, delivery_counts, stored_times};
use common::outbox::{Row, Step, TestOutbox};
use common::relay::{RelayOptions, RelayProcess};
use common::scenario::Scenario;
use common::{eventually, unique, Stack};
use mysql_async::prelude::Queryable;
use outbox_kit::RowStatus;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_back_rows_other_tables_and_updates_publish_nothing() {
    let scenario = Scenario::new("quiet").await;
    let Scenario { outbox, events, .. } = &scenario;
    let (prefix, topic) = (&events.prefix, &events.topic);
    let relay = scenario.relay().await;

    outbox.insert_rolled_back(&events.rows("rolled-back", 0..3)).await;
    let other = format!("app.{}_other", outbox.name());
    outbox.exec(&format!("CREATE TABLE {other} (id INT PRIMARY KEY, event_id VARCHAR(64), biz_key VARCHAR(64), topic VARCHAR(128), payload JSON)")).await;
    outbox.exec(&format!("INSERT INTO {other} VALUES (1, '{prefix}-other-00000', 'k', '{topic}', '{{}}')")).await;
    // One real row, then UPDATE and DELETE it: only its INSERT is an event.
    outbox.insert_tx(&events.rows("real", 0..1)).await;
    scenario.all_sent(1).await;
    let table = outbox.table.qualified();
    outbox.exec(&format!("UPDATE {table} SET status = 0, payload = '{{\"changed\":true}}'")).await;
    outbox.exec(&format!("DELETE FROM {table}")).await;
    // A marker after all of the above: once it is SENT, the relay has read past them all.
    outbox.insert_tx(&events.rows("marker", 0..1)).await;
    scenario.all_sent(1).await;

    // Ask the broker itself what the test's own topic holds: exactly the real row and
    // the marker.
    assert_eq!(scenario.stored().await, 2, "only the real row and the marker are published");
    scenario.finish(relay).await;
}

/// `rows` with one biz_key: one queue and one lane, so once a row is SENT everything
/// the relay handed on before it is stored on the broker.
fn under_key(rows: Vec<Row>, key: &str) -> Vec<Row> {
    rows.into_iter().map(|row| Row { biz_key: key.to_owned(), ..row }).collect()
}

/// The distinct event ids delivered.
fn distinct_ids(deliveries: &[outbox_kit::consumer::Delivery]) -> BTreeSet<String> {
    deliveries.iter().map(|d| d.event_id.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xa_rows_are_published_after_xa_commit_only_even_when_the_relay_restarts_in_between() {
    let scenario = Scenario::consumed("xa").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    // A grace longer than the test: the sweep takes nothing, so whatever arrives came
    // through the binlog path (which would otherwise lose rows prepared before a restart).
    let options = scenario.options().env("OUTBOX_RELAY__SWEEP__GRACE_MS", 3_600_000);
    let mut relay = scenario.relay_with(&options).await;
    let rows = |name: &str, seqs| under_key(events.rows(name, seqs), "xa");

    let rolled_back = outbox.prepare_xa(&unique("rb"), &rows("rb", 0..2)).await;
    let committed = outbox.prepare_xa(&unique("c"), &rows("c", 0..3)).await;
    outbox.insert_tx(&rows("between", 0..1)).await;
    scenario.all_sent(1).await;
    let producer = stack.producer("xa_check").await;
    let stored = || async { producer.stored_count(&events.topic).await.expect("queue offsets") };
    assert_eq!(stored().await, 1, "prepared rows are not published, only the row committed after them");

    // Stop between the prepares and their decisions, and decide while it is down.
    assert_eq!(relay.stop(), Some(0));
    rolled_back.rollback().await;
    committed.commit().await;
    outbox.commit_xa_one_phase(&unique("one"), &rows("one", 0..2)).await;
    let relay = scenario.relay_with(&options).await;

    scenario.all_sent(6).await;
    let got = scenario.received(6).await;
    let expected: BTreeSet<String> = [("between", 0..1), ("c", 0..3), ("one", 0..2)]
        .into_iter()
        .flat_map(|(name, seqs)| seqs.map(move |seq| (name, seq)))
        .map(|(name, seq)| events.id(name, seq))
        .collect();
    assert_eq!(distinct_ids(&got), expected, "the committed XA rows arrive, the rolled-back ones never");
    // The checkpoint stayed before the undecided prepares, so the restart read them
    // again from the binlog, `between` with them. The new pipeline holds the key (its
    // two-phase rows, unsent, are older than what the checkpoint acknowledged), so the
    // sweep sends those in order and `between`, read again, is not sent twice.
    let read_again = relay.metric("relay_events_read_total{path=\"binlog\"}");
    assert!(read_again >= 4.0, "between and the 3 two-phase rows read again from the binlog: {read_again}");
    assert_eq!(stored().await, 6, "each once: between, 3 two-phase and 2 one-phase rows");
    producer.shutdown().await;
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_rolled_back_to_a_savepoint_are_not_published() {
    let scenario = Scenario::consumed("savepoint").await;
    let Scenario { outbox, events, .. } = &scenario;
    let relay = scenario.relay().await;
    let aria = format!("app.{}_aria", outbox.name());
    outbox
        .exec(&format!("CREATE TABLE {aria} (id INT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(32)) ENGINE=Aria"))
        .await;
    let rows = |name: &str, seqs| Step::Insert(under_key(events.rows(name, seqs), "sp"));
    let sql = |statement: &str| Step::Sql(statement.to_owned());
    let non_transactional = sql(&format!("INSERT INTO {aria} (note) VALUES ('not rolled back')"));

    // InnoDB only: the rolled-back row never reaches the binlog.
    outbox
        .commit_steps(&[
            rows("innodb-keep", 0..1),
            sql("SAVEPOINT s"),
            rows("innodb-gone", 0..1),
            sql("ROLLBACK TO SAVEPOINT s"),
            rows("innodb-after", 0..1),
        ])
        .await;
    // With a non-transactional write: the server logs the rolled-back rows, then ROLLBACK TO.
    outbox
        .commit_steps(&[
            rows("mixed-keep", 0..1),
            sql("SAVEPOINT s"),
            rows("mixed-gone", 0..2),
            non_transactional.clone(),
            sql("ROLLBACK TO SAVEPOINT s"),
            rows("mixed-after", 0..1),
        ])
        .await;
    // A savepoint set before anything was written: the rolled-back part is logged as a
    // group of its own that ends in ROLLBACK.
    outbox
        .commit_steps(&[
            sql("SAVEPOINT s0"),
            rows("first-gone", 0..1),
            non_transactional,
            sql("ROLLBACK TO SAVEPOINT s0"),
            rows("first-keep", 0..1),
        ])
        .await;

    scenario.all_sent(5).await;
    let got = scenario.received(5).await;
    let expected: BTreeSet<String> = ["innodb-keep", "innodb-after", "mixed-keep", "mixed-after", "first-keep"]
        .into_iter()
        .map(|name| events.id(name, 0))
        .collect();
    assert_eq!(distinct_ids(&got), expected, "only the rows that committed arrive");
    assert_eq!(scenario.stored().await, 5, "no rolled-back row was published");
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_keys_interleaved_and_a_10k_row_transaction_arrive_in_per_key_order() {
    let scenario = Scenario::consumed("order").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let relay = scenario.relay_with(&scenario.options().env("OUTBOX_RELAY__LANES__MAX_IN_FLIGHT", 2_000)).await;

    // 50 keys x 200 events: each transaction takes 4 events of every key, in multi-row
    // INSERTs (one per key) interleaved across keys, so keys share transactions.
    let keys: Vec<String> = (0..50).map(|k| format!("k{k:02}")).collect();
    for round in 0..50 {
        let seqs = round * 4..round * 4 + 4;
        let batch: Vec<Row> = keys.iter().flat_map(|key| events.rows(key, seqs.clone())).collect();
        outbox.insert_tx(&batch).await;
        if round == 25 {
            // Rotates the binlog the relay reads: the replica's.
            stack
                .replica_pool()
                .await
                .get_conn()
                .await
                .expect("replica")
                .query_drop("FLUSH BINARY LOGS")
                .await
                .expect("flush");
        }
    }
    // One 10,000-row transaction (bigger than max_in_flight): 200 more events per key.
    let big: Vec<Row> = (200..400)
        .flat_map(|seq| keys.iter().map(move |key| (key.clone(), seq)))
        .map(|(key, seq)| events.row(&key, seq))
        .collect();
    outbox.insert_tx(&big).await;

    let total = 50 * 400;
    all_sent(outbox, total, Duration::from_secs(240)).await;
    let deliveries = consumed_all(scenario.collector(), events, total, Duration::from_secs(240)).await;
    scenario.assert_per_key_order(&deliveries).await;
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_committed_while_the_relay_is_stopped_stay_pending_then_are_sent_once() {
    let scenario = Scenario::consumed("seed").await;
    let Scenario { outbox, events, .. } = &scenario;
    let options = scenario.options();
    let mut relay = scenario.relay_with(&options).await;
    assert_eq!(relay.stop(), Some(0));

    outbox.insert_tx(&events.rows("order-9", 0..20)).await;
    assert_eq!(outbox.count_status(RowStatus::Pending).await, 20, "no relay: rows stay PENDING (status 0)");

    let mut relay = scenario.relay_with(&options).await;
    scenario.all_sent(20).await;
    let got = scenario.received(20).await;
    // A clean stop checkpointed: the restart resumed exactly there, so each event once.
    let counts = delivery_counts(&got);
    assert!(counts.values().all(|&c| c == 1), "each event consumed once: {counts:?}");

    assert!(relay.http_get("/healthz").starts_with("HTTP/1.0 200"), "health endpoint answers 200");
    let metrics = relay.http_get("/metrics");
    for line in [
        "relay_events_published_total{path=\"binlog\"} 20",
        "relay_failed_events_total{reason=\"retries_exhausted\"} 0",
        "outbox_oldest_pending_seconds",
    ] {
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
    scenario.close().await;
}

/// A leader is ready only once its pipeline has started: its start position saved, its
/// first (full) sweep done, its reader streaming. A row committed the moment `/readyz`
/// says so is the binlog path's alone, even when the term starts slowly; a leader that
/// said ready before its position was taken would leave that row to the full sweep
/// too, and publish it twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_start_is_not_ready_until_the_pipeline_runs_and_a_row_written_at_ready_is_sent_once() {
    let scenario = Scenario::new("slow_start").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let options = scenario.options().env("OUTBOX_RELAY_FAULT_TERM_START_DELAY_MS", 3_000);
    let mut relay = RelayProcess::start(stack, &options);
    relay.wait_role("leader", Duration::from_secs(60)).await;
    outbox.insert_tx(&events.rows("at-ready", 0..1)).await;
    scenario.all_sent(1).await;
    assert_eq!(relay.metric("relay_events_published_total{path=\"binlog\"}"), 1.0, "read from the binlog");
    assert_eq!(relay.metric("relay_events_published_total{path=\"sweep\"}"), 0.0, "not by the start's full sweep");
    assert_eq!(scenario.stored().await, 1, "stored once");
    scenario.finish(relay).await;
}

/// A first start reads the current binlog position, then sweeps every row committed
/// so far. Rows committed in between are in both: the sweep sends them, and the binlog
/// path, meeting them after its position, skips them instead of sending them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_committed_between_the_start_position_and_the_full_sweep_are_sent_once() {
    let scenario = Scenario::new("start_overlap").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let options = scenario.options().env("OUTBOX_RELAY_FAULT_FULL_SWEEP_DELAY_MS", 10_000);
    let mut relay = RelayProcess::start(stack, &options);
    // The full sweep is asked for once the start position is read; it claims 10 s later.
    eventually("the first start's full sweep asked for", Duration::from_secs(60), || async {
        (relay.try_metric("relay_full_sweeps_total") == Some(1.0)).then_some(())
    })
    .await;
    outbox.insert_tx(&events.rows("between", 0..10)).await;
    relay.wait_ready().await;
    scenario.all_sent(10).await;
    assert_eq!(relay.metric("relay_events_published_total{path=\"sweep\"}"), 10.0, "the full sweep sent them");
    outbox.insert_tx(&events.rows("after", 0..1)).await;
    scenario.all_sent(11).await;
    assert_eq!(relay.metric("relay_events_published_total{path=\"binlog\"}"), 1.0, "the binlog path skipped them");
    assert_eq!(scenario.stored().await, 11, "each stored once");
    scenario.finish(relay).await;
}

/// A first start's full sweep cut short (the relay killed after saving its start
/// position, before the sweep ended) is owed: the restart sweeps again before it
/// tails, so a new row per key committed at once arrives after every old row of its
/// key, and none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_starts_full_sweep_cut_short_by_a_kill_runs_again_before_any_new_row() {
    let scenario = Scenario::consumed("owed_sweep").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let keys: Vec<String> = (0..20).map(|k| format!("k{k}")).collect();
    for key in &keys {
        outbox.insert_tx(&events.rows(key, 0..10)).await;
    }
    stack.replica_caught_up().await;
    let options = scenario.options();
    let slow = options.clone().env("OUTBOX_RELAY_FAULT_FULL_SWEEP_DELAY_MS", 60_000);
    let relay = RelayProcess::start(stack, &slow);
    eventually("the first start's full sweep asked for", Duration::from_secs(60), || async {
        (relay.try_metric("relay_full_sweeps_total") == Some(1.0)).then_some(())
    })
    .await;
    relay.kill();

    let relay = scenario.relay_with(&options).await;
    assert_eq!(relay.metric("relay_full_sweeps_total"), 1.0, "the restart ran the sweep it owed");
    for key in &keys {
        outbox.insert_tx(&[events.row(key, 10)]).await;
    }
    scenario.all_sent(keys.len() * 11).await;
    let deliveries = scenario.received(keys.len() * 11).await;
    scenario.assert_per_key_order(&deliveries).await;
    scenario.finish(relay).await;
}

/// Rows committed before a first start by a session whose clock reads 13 hours ahead
/// (their `created_at` is in the relay's future) are still the first start's full
/// sweep's: it takes every row up to the table's newest id, not up to a time, so a
/// new row per key committed at once arrives after them, within the scenario's deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_starts_full_sweep_takes_rows_a_session_hours_ahead_wrote() {
    let scenario = Scenario::consumed("ahead_sweep").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let keys: Vec<String> = (0..5).map(|k| format!("k{k}")).collect();
    for key in &keys {
        outbox.insert_tx_in_zone(&events.rows(key, 0..3), "+13:00").await;
    }
    stack.replica_caught_up().await;
    let relay = scenario.relay().await;
    for key in &keys {
        outbox.insert_tx(&[events.row(key, 3)]).await;
    }
    scenario.all_sent(keys.len() * 4).await;
    let deliveries = scenario.received(keys.len() * 4).await;
    scenario.assert_per_key_order(&deliveries).await;
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_after_sends_before_the_checkpoint_gives_duplicates_never_loss() {
    let scenario = Scenario::consumed("kill").await;
    let Scenario { outbox, events, .. } = &scenario;
    // A checkpoint interval far longer than the test: sends happen, the position does not move.
    let options = scenario.options().env("OUTBOX_RELAY__CHECKPOINT__INTERVAL_MS", 3_600_000);
    let relay = scenario.relay_with(&options).await;
    outbox.insert_tx(&events.rows("kill-a", 0..50)).await;
    outbox.insert_tx(&events.rows("kill-b", 0..50)).await;
    scenario.all_sent(100).await;
    scenario.received(100).await;
    relay.kill();

    let relay = scenario.relay_with(&options).await;
    // Judged by where the broker stored each event (a consumer's redeliveries of one
    // stored message are not publishes).
    let got = eventually("every event stored a second time after the restart", Duration::from_secs(60), || async {
        let got = scenario.collector().received(|id| id.starts_with(&format!("{}-", events.prefix)));
        (stored_times(&got).values().sum::<usize>() >= 200).then_some(got)
    })
    .await;
    let counts = stored_times(&got);
    let lost = 100 - counts.len();
    let duplicates: usize = counts.values().map(|c| c - 1).sum();
    eprintln!("after SIGKILL: {} distinct events, {duplicates} duplicates, {lost} lost", counts.len());
    assert_eq!(lost, 0, "nothing lost");
    let first = got.iter().filter(|d| d.event_id == got[0].event_id);
    let places: Vec<_> =
        first.map(|d| (d.broker_name.as_str(), d.queue_id, d.queue_offset, d.relay_term, d.reconsume_times)).collect();
    assert_eq!(
        duplicates, 100,
        "the unacknowledged-by-checkpoint range is resent once; {} was stored at {places:?}",
        got[0].event_id
    );
    scenario.finish(relay).await;
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
    stack.replica_caught_up().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_added_before_the_payload_while_the_relay_is_stopped_changes_no_row() {
    let stack = Stack::from_env();
    let metadata: Option<String> = stack
        .replica_pool()
        .await
        .get_conn()
        .await
        .expect("conn")
        .query_first("SELECT @@binlog_row_metadata")
        .await
        .expect("query");
    assert_eq!(
        metadata.as_deref(),
        Some("FULL"),
        "the stack's replica names columns in row events (restart it: scripts/stack down; scripts/stack up)"
    );
    let scenario = Scenario::consumed("alter").await;
    let Scenario { outbox, events, .. } = &scenario;
    let options = scenario.options();
    let mut relay = scenario.relay_with(&options).await;
    assert_eq!(relay.stop(), Some(0));

    // While it is stopped: rows, an ALTER that puts a column before `payload`, more rows.
    let before = events.rows("before", 0..5);
    let after = events.rows("after", 0..5);
    outbox.insert_tx(&before).await;
    let table = outbox.table.qualified();
    outbox
        .exec(&format!("ALTER TABLE {table} ADD COLUMN tenant VARCHAR(16) NOT NULL DEFAULT 'acme' AFTER topic"))
        .await;
    outbox.insert_tx(&after).await;

    let relay = scenario.relay_with(&options).await;
    scenario.all_sent(10).await;
    let got = scenario.received(10).await;
    for row in before.iter().chain(&after) {
        let delivery = got.iter().find(|d| d.event_id == row.event_id).expect("every row delivered");
        assert_eq!(
            (delivery.biz_key.as_str(), std::str::from_utf8(&delivery.body).ok()),
            (row.biz_key.as_str(), Some(row.payload.as_str())),
            "{} delivered with its own key and payload",
            row.event_id
        );
    }
    // Read from the binlog, not left to the sweep (its grace is a minute).
    assert_eq!(relay.metric("relay_events_published_total{path=\"binlog\"}"), 10.0);
    assert_eq!(relay.metric("relay_events_published_total{path=\"sweep\"}"), 0.0);
    scenario.finish(relay).await;
}

/// `relay_commit_to_ack_seconds` measures each event from its `created_at` (the
/// primary's local clock, turned into the relay host's by the clock probe) to SEND_OK,
/// which the table keeps as `sent_at`: over the same events, the histogram's mean
/// (its exact sum over its count, no buckets) is the table's own mean within 2 ms
/// (0.1 ms here). An observation taken at another instant than SEND_OK, or a clock
/// offset read off a slow round trip, would move them apart. The time inside the
/// relay (`relay_route_to_ack_seconds`, from the coordinator to SEND_OK) is observed
/// once per event too, and is a part of it: the commit and the binlog read come before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_to_ack_agrees_with_created_at_and_sent_at_in_the_table() {
    const MEASURED: usize = 20;
    const COUNT: &str = "relay_commit_to_ack_seconds_count";
    const SUM: &str = "relay_commit_to_ack_seconds_sum";
    const IN_RELAY_COUNT: &str = "relay_route_to_ack_seconds_count";
    const IN_RELAY_SUM: &str = "relay_route_to_ack_seconds_sum";
    let scenario = Scenario::new("ack_time").await;
    let Scenario { outbox, events, .. } = &scenario;
    let relay = scenario.relay().await;
    // Until its first clock probe the relay observes nothing: one event at a time until it does.
    let mut warm = 0;
    while relay.metric(COUNT) == 0.0 {
        assert!(warm < 30, "no commit-to-ack observed after {warm} events");
        outbox.insert_tx(&events.rows("warm", warm..warm + 1)).await;
        warm += 1;
        scenario.all_sent(warm).await;
    }
    let (count_before, sum_before) = (relay.metric(COUNT), relay.metric(SUM));
    let (in_relay_count_before, in_relay_sum_before) = (relay.metric(IN_RELAY_COUNT), relay.metric(IN_RELAY_SUM));

    for seq in 0..MEASURED {
        outbox.insert_tx(&events.rows("measured", seq..seq + 1)).await;
    }
    scenario.all_sent(warm + MEASURED).await;
    let observed = relay.metric(COUNT) - count_before;
    assert_eq!(observed, MEASURED as f64, "one observation per event");
    let relay_mean_ms = (relay.metric(SUM) - sum_before) / observed * 1_000.0;
    let table_mean_ms: f64 = outbox
        .pool
        .get_conn()
        .await
        .expect("conn")
        .query_first(format!(
            "SELECT CAST(AVG(TIMESTAMPDIFF(MICROSECOND, created_at, sent_at)) / 1000 AS DOUBLE) FROM {} \
             WHERE event_id LIKE '{}-measured-%'",
            outbox.table.qualified(),
            events.prefix
        ))
        .await
        .expect("mean from the table")
        .expect("a mean");
    assert!(
        (relay_mean_ms - table_mean_ms).abs() < 2.0,
        "relay mean {relay_mean_ms:.3} ms, table mean {table_mean_ms:.3} ms"
    );
    let in_relay = relay.metric(IN_RELAY_COUNT) - in_relay_count_before;
    assert_eq!(in_relay, MEASURED as f64, "one time inside the relay per event");
    let in_relay_mean_ms = (relay.metric(IN_RELAY_SUM) - in_relay_sum_before) / in_relay * 1_000.0;
    // A part of commit to ack (that it holds the lane's linger is shown by
    // `a_trickle_is_sent_as_it_comes_and_only_a_lanes_first_event_waits_the_linger`).
    assert!(
        0.0 < in_relay_mean_ms && in_relay_mean_ms < relay_mean_ms,
        "inside the relay {in_relay_mean_ms:.3} ms on average, commit to ack {relay_mean_ms:.3} ms"
    );
    scenario.finish(relay).await;
}

/// A lane waits the linger for company only while its batches find some: the first
/// event of a lane waits it (and the time inside the relay shows it), and events that
/// then come one at a time are sent as they come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickle_is_sent_as_it_comes_and_only_a_lanes_first_event_waits_the_linger() {
    const LINGER_MS: u64 = 3_000;
    const IN_RELAY_SUM: &str = "relay_route_to_ack_seconds_sum";
    let scenario = Scenario::new("trickle").await;
    let Scenario { outbox, events, .. } = &scenario;
    let relay = scenario.relay_with(&scenario.options().env("OUTBOX_RELAY__LANES__LINGER_MS", LINGER_MS)).await;
    outbox.insert_tx(&events.rows("k", 0..1)).await;
    scenario.all_sent(1).await;
    let first = relay.metric(IN_RELAY_SUM);
    assert!(first >= LINGER_MS as f64 / 1_000.0, "the lane's first event waited the linger: {first:.3} s");
    for seq in 1..6 {
        outbox.insert_tx(&events.rows("k", seq..seq + 1)).await;
        scenario.all_sent(seq + 1).await;
    }
    let each = (relay.metric(IN_RELAY_SUM) - first) / 5.0;
    assert!(each < 1.0, "each later event was sent at once, not after {LINGER_MS} ms: {each:.3} s on average");
    scenario.finish(relay).await;
}
