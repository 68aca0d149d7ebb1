//! The binlog path against the real MariaDB and RocketMQ: invariants I1-I4 and I7.
//! Each test has its own outbox table, relay process and checkpoint, so they run
//! side by side; all publish to the shared test topic and filter by their event ids.
#![recursion_limit = "512"]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use common::collector::Collector;
use common::outbox::{Row, TestOutbox};
use common::relay::{RelayOptions, RelayProcess};
use common::{eventually, fresh_topic, unique, Stack, TEST_TOPIC_QUEUES};
use mysql_async::prelude::Queryable;
use outbox_relay::config::HashFunction;
use outbox_relay::consumer::Delivery as Received;
use outbox_relay::publish::rocketmq::{Producer, ProducerSettings};
use outbox_relay::route::queue_for;

const SENT: u8 = 2;

/// Event ids are `{prefix}-{key}-{seq}`; a test's prefix is unique and its topic its own.
struct Events {
    prefix: String,
    topic: String,
}

impl Events {
    async fn new(stack: &Stack, name: &str) -> Self {
        Self { prefix: unique(name), topic: fresh_topic(stack).await }
    }

    fn row(&self, key: &str, seq: usize) -> Row {
        Row {
            event_id: self.id(key, seq),
            biz_key: key.to_owned(),
            topic: self.topic.clone(),
            payload: format!(r#"{{"key":"{key}","seq":{seq}}}"#),
        }
    }

    fn rows(&self, key: &str, seqs: std::ops::Range<usize>) -> Vec<Row> {
        seqs.map(|seq| self.row(key, seq)).collect()
    }

    fn id(&self, key: &str, seq: usize) -> String {
        format!("{}-{key}-{seq:05}", self.prefix)
    }
}

/// Waits until `expected` distinct events of `events` were consumed; all their deliveries.
async fn consumed_all(collector: &Collector, events: &Events, expected: usize, deadline: Duration) -> Vec<Received> {
    collector.wait_distinct(&format!("{}-", events.prefix), expected, deadline).await
}

/// How many times each event_id was delivered.
fn delivery_counts(deliveries: &[Received]) -> HashMap<&str, usize> {
    let mut counts = HashMap::new();
    for d in deliveries {
        *counts.entry(d.event_id.as_str()).or_default() += 1;
    }
    counts
}

async fn all_sent(outbox: &TestOutbox, expected: usize, deadline: Duration) {
    eventually(&format!("{expected} rows SENT with msg_id"), deadline, || async {
        let statuses = outbox.statuses().await;
        let sent =
            statuses.values().filter(|(s, msg)| *s == SENT && msg.as_deref().is_some_and(|m| !m.is_empty())).count();
        (statuses.len() == expected && sent == expected).then_some(())
    })
    .await;
}

/// Per key: first deliveries in commit order (by queue offset), all in the key's queue.
///
/// A delivery through the consumer's retry topic (the Rust push consumer 1.0.0 sends a
/// few messages back under load, seen here) carries the retry queue's id and offset;
/// for an event seen only that way, the broker's key index says where it is stored.
async fn assert_per_key_order(stack: &Stack, topic: &str, deliveries: &[Received]) {
    let mut first: HashMap<&str, (i32, i64, &str)> = HashMap::new();
    for d in deliveries.iter().filter(|d| d.reconsume_times == 0) {
        let place = (d.queue_id, d.queue_offset, d.biz_key.as_str());
        first
            .entry(d.event_id.as_str())
            .and_modify(|f| {
                if place.0 == f.0 && place.1 < f.1 {
                    *f = place
                }
            })
            .or_insert(place);
    }
    let producer = Producer::start(ProducerSettings {
        namesrv: stack.namesrv.clone(),
        group: unique("order_check"),
        send_timeout: Duration::from_secs(5),
    })
    .await
    .expect("producer");
    let redelivered_only: Vec<&Received> =
        deliveries.iter().filter(|d| d.reconsume_times > 0 && !first.contains_key(d.event_id.as_str())).collect();
    for d in redelivered_only {
        let stored =
            eventually(&format!("the broker's key index to find {}", d.event_id), Duration::from_secs(30), || async {
                let found = producer.find_by_key(topic, &d.event_id).await.ok()?;
                found.iter().min_by_key(|m| m.queue_offset()).map(|m| (m.queue_id(), m.queue_offset()))
            })
            .await;
        first.insert(d.event_id.as_str(), (stored.0, stored.1, d.biz_key.as_str()));
    }
    producer.shutdown().await;
    let mut by_key: BTreeMap<&str, Vec<(i64, i32, &str)>> = BTreeMap::new();
    for (event_id, (queue_id, offset, key)) in &first {
        by_key.entry(key).or_default().push((*offset, *queue_id, event_id));
    }
    for (key, mut events) in by_key {
        let queue = queue_for(HashFunction::Stable, key, TEST_TOPIC_QUEUES) as i32;
        let queues: std::collections::BTreeSet<i32> = events.iter().map(|e| e.1).collect();
        assert_eq!(queues, [queue].into(), "key {key}: every event in queue {queue}");
        events.sort();
        let seqs: Vec<&str> = events.iter().map(|e| e.2.rsplit('-').next().unwrap_or_default()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "key {key}: first deliveries out of commit order: {seqs:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_back_rows_other_tables_and_updates_publish_nothing() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let events = Events::new(&stack, "quiet").await;
    let prefix = &events.prefix;
    let topic = &events.topic;
    let mut relay = RelayProcess::start(&stack, &RelayOptions::new(outbox.name()));
    relay.wait_tailing().await;

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
    let producer = Producer::start(ProducerSettings {
        namesrv: stack.namesrv.clone(),
        group: unique("quiet_check"),
        send_timeout: Duration::from_secs(5),
    })
    .await
    .expect("producer");
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
    relay.wait_tailing().await;

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
    relay.wait_tailing().await;
    assert_eq!(relay.stop(), Some(0));

    outbox.insert_tx(&events.rows("order-9", 0..20)).await;
    assert_eq!(outbox.count_status(0).await, 20, "no relay: rows stay PENDING (status 0)");

    let collector = Collector::start(&stack.namesrv, &events.topic, &unique("seed_consumer")).await;
    let mut relay = RelayProcess::start(&stack, &options);
    relay.wait_tailing().await;
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
    relay.wait_tailing().await;
    outbox.insert_tx(&events.rows("kill-a", 0..50)).await;
    outbox.insert_tx(&events.rows("kill-b", 0..50)).await;
    all_sent(&outbox, 100, Duration::from_secs(60)).await;
    consumed_all(&collector, &events, 100, Duration::from_secs(60)).await;
    relay.kill();

    let mut relay = RelayProcess::start(&stack, &options);
    relay.wait_tailing().await;
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
