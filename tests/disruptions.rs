//! Disruptions of the shared stack: the broker cluster stopped while events arrive, one
//! broker of the two killed, and the relay's binlog connection killed by the server. These tests disturb every client
//! of the stack, so they live in their own test binary (cargo runs test binaries one
//! after another) and take turns within it.
#![recursion_limit = "512"]

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::collector::Collector;
use common::command::{cli_with, stdout};
use common::events::{all_sent, consumed_all, stored_twice, Events};
use common::load::Load;
use common::outbox::{Row, TestOutbox};
use common::relay::{RelayOptions, RelayProcess};
use common::scenario::Scenario;
use common::{eventually, throughout, unique, Stack, TEST_TOPIC_QUEUES};
use mysql_async::prelude::Queryable;
use outbox_kit::consumer::Delivery;
use outbox_kit::RowStatus;
use outbox_relay::config::HashFunction;
use outbox_relay::route::queue_for;
use outbox_relay::ProcessStats;

/// One disruption at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The stack's brokers, by the name of their pid file in its state directory.
const BROKER_A: &str = "broker";
const BROKER_B: &str = "broker-b";
const BROKER_A_SLAVE: &str = "broker-a-slave";

fn stack_path(name: &str) -> PathBuf {
    let state =
        std::env::var("OUTBOX_RELAY_TEST_STACK").expect("OUTBOX_RELAY_TEST_STACK (eval \"$(scripts/stack env)\")");
    PathBuf::from(state).join(name)
}

fn process_alive(pid: &str) -> bool {
    Command::new("kill").args(["-0", pid]).stderr(std::process::Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Sends `signal` to a broker of the stack and waits until it has exited.
async fn end_broker(broker: &str, signal: &str) {
    let pid_file = stack_path(&format!("{broker}.pid"));
    let pid = std::fs::read_to_string(&pid_file).expect("broker pid file").trim().to_owned();
    assert!(Command::new("kill").args([signal, &pid]).status().expect("kill").success());
    eventually(&format!("{broker} to exit"), Duration::from_secs(30), || async {
        (!process_alive(&pid)).then_some(())
    })
    .await;
}

/// The whole cluster down: every broker stopped.
async fn stop_broker() {
    end_broker(BROKER_B, "-TERM").await;
    end_broker(BROKER_A, "-TERM").await;
}

/// Starts whatever broker of the stack is not running, and waits until both are
/// registered and take a test send.
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
    let scenario = Scenario::new("outage").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let (prefix, topic) = (&events.prefix, &events.topic);
    let options = scenario
        .options()
        .env("OUTBOX_RELAY__RETRY__MAX_RETRY", 10_000)
        .env("OUTBOX_RELAY__ROCKETMQ__SEND_TIMEOUT_MS", 1_000);
    let relay = scenario.relay_with(&options).await;
    outbox.insert_tx(&rows(prefix, topic, 0, 10)).await;
    eventually("the first rows SENT", Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sent).await == 10).then_some(())
    })
    .await;

    stop_broker().await;
    for start in (10..60).step_by(10) {
        outbox.insert_tx(&rows(prefix, topic, start, start + 10)).await;
    }
    // While the broker is down, sends fail and are retried in place: nothing new may
    // become SENT. Watch the table for a while (the relay retries every <= 2 s).
    throughout("no row SENT or FAILED while the broker is down", Duration::from_secs(8), || async {
        let (sent, failed) = (outbox.count_status(RowStatus::Sent).await, outbox.count_status(RowStatus::Failed).await);
        [("SENT beyond the first 10", sent.saturating_sub(10)), ("FAILED", failed)]
            .into_iter()
            .filter(|(_, rows)| *rows > 0)
            .collect::<Vec<_>>()
    })
    .await;

    start_broker();
    let collector = Collector::start(&stack.namesrv, topic, &unique("outage_consumer")).await;
    eventually("all 60 rows SENT after the broker returned", Duration::from_secs(180), || async {
        (outbox.count_status(RowStatus::Sent).await == 60).then_some(())
    })
    .await;
    collector.wait_distinct(&format!("{prefix}-"), 60, Duration::from_secs(120)).await;
    assert!(
        relay.metric("relay_batch_retries_total{class=\"outage\"}") > 0.0,
        "the relay held the batch and retried it"
    );
    scenario.finish(relay).await;
    collector.shutdown().await;
}

/// Starts the broker again, then waits until all `count` rows are SENT and consumed from
/// `topic`, and the relay stops cleanly.
async fn all_delivered_once_the_broker_returns(
    stack: &Stack,
    outbox: &TestOutbox,
    mut relay: RelayProcess,
    topic: &str,
    prefix: &str,
    count: usize,
) {
    start_broker();
    let collector = Collector::start(&stack.namesrv, topic, &unique("after_outage_consumer")).await;
    eventually(&format!("all {count} rows SENT after the broker returned"), Duration::from_secs(180), || async {
        (outbox.count_status(RowStatus::Sent).await == count).then_some(())
    })
    .await;
    collector.wait_distinct(&format!("{prefix}-"), count, Duration::from_secs(120)).await;
    assert_eq!(relay.stop(), Some(0));
    collector.shutdown().await;
}

/// A leader that starts its term while the broker is down finds no route for its
/// configured topic (the NameServer drops a dead broker's routes): that is an outage
/// to wait out, not a missing topic to exit on (an exit 4 would also keep systemd
/// from restarting it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_starts_while_the_broker_is_down_waits_for_it_and_loses_nothing() {
    let _serial = SERIAL.lock().await;
    let scenario = Scenario::new("broker_down_at_start").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let (prefix, configured) = (&events.prefix, events.topic.as_str());
    let options = scenario
        .options()
        .env(&format!("OUTBOX_RELAY__ROCKETMQ__TOPICS__{configured}__QUEUE_COUNT"), TEST_TOPIC_QUEUES);
    stop_broker().await;
    let mut relay = RelayProcess::start(stack, &options);
    outbox.insert_tx(&rows(prefix, configured, 0, 20)).await;
    let held = format!("{configured} has no usable route");
    let readiness = relay.wait_readiness_with(false, &held, Duration::from_secs(60)).await;
    assert!(readiness.contains(r#""role":"leader""#), "the leader holds the topic's events: {readiness}");
    assert_eq!(outbox.count_status(RowStatus::Sent).await, 0, "SENT while the broker was down");
    assert_eq!(outbox.count_status(RowStatus::Failed).await, 0, "FAILED during an outage");

    all_delivered_once_the_broker_returns(stack, outbox, relay, configured, prefix, 20).await;
}

/// A topic the relay has never used, whose first events arrive while the broker is
/// down, has no route like every other topic then: held, not FAILED as missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_topic_first_seen_while_the_broker_is_down_is_held_not_failed() {
    let _serial = SERIAL.lock().await;
    let scenario = Scenario::new("new_topic_in_outage").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let (prefix, topic) = (&events.prefix, &events.topic);
    let mut relay = scenario.relay().await;
    stop_broker().await;
    outbox.insert_tx(&rows(prefix, topic, 0, 20)).await;
    relay.wait_readiness_with(false, &format!("{topic} has no usable route"), Duration::from_secs(60)).await;
    assert_eq!(outbox.count_status(RowStatus::Failed).await, 0, "a new topic's events FAILED during an outage");

    all_delivered_once_the_broker_returns(stack, outbox, relay, topic, prefix, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_binlog_connection_is_reopened_without_loss() {
    let _serial = SERIAL.lock().await;
    let scenario = Scenario::consumed("reconnect").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let (prefix, topic) = (&events.prefix, &events.topic);
    let relay = scenario.relay().await;
    outbox.insert_tx(&rows(prefix, topic, 0, 20)).await;
    eventually("the first rows SENT", Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sent).await == 20).then_some(())
    })
    .await;

    // The server drops the replica connection (as on a failover or a network cut).
    let mut conn = stack.replica_pool().await.get_conn().await.expect("conn");
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
        outbox.insert_tx(&rows(prefix, topic, start, start + 10)).await;
    }
    eventually("all 40 rows SENT after the reconnect", Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sent).await == 40).then_some(())
    })
    .await;
    scenario.received(40).await;
    assert!(relay.metric("relay_binlog_reconnects_total") >= 1.0, "the reconnect is counted");
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binlog_purged_while_the_relay_is_stopped_is_reported_swept_and_nothing_is_lost() {
    let _serial = SERIAL.lock().await;
    let scenario = Scenario::consumed("purged").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let (prefix, topic) = (&events.prefix, &events.topic);
    let options = scenario.options();
    let mut relay = scenario.relay_with(&options).await;
    outbox.insert_tx(&rows(prefix, topic, 0, 20)).await;
    eventually("the first rows SENT", Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sent).await == 20).then_some(())
    })
    .await;
    assert_eq!(relay.stop(), Some(0));

    // Committed while the relay is stopped, then the binlog holding them is purged.
    for start in (20..220).step_by(50) {
        outbox.insert_tx(&rows(prefix, topic, start, start + 50)).await;
    }
    // On the replica the relay tails, once it has applied them.
    stack.replica_caught_up().await;
    let replica = stack.replica_pool().await;
    let mut conn = replica.get_conn().await.expect("conn");
    conn.query_drop("FLUSH BINARY LOGS").await.expect("flush binary logs");
    let status: Option<mysql_async::Row> = conn.query_first("SHOW MASTER STATUS").await.expect("master status");
    let current_file: String = status.and_then(|row| row.get(0)).expect("binlog on");
    // MariaDB keeps a file until its binlog checkpoint passes it: purge until it is gone.
    eventually("the relay's binlog file purged", Duration::from_secs(30), || async {
        let mut conn = replica.get_conn().await.ok()?;
        conn.query_drop(format!("PURGE BINARY LOGS TO '{current_file}'")).await.ok()?;
        let files: Vec<mysql_async::Row> = conn.query("SHOW BINARY LOGS").await.ok()?;
        let first: Option<String> = files.first().and_then(|row| row.get(0));
        (first.as_deref() == Some(current_file.as_str())).then_some(())
    })
    .await;

    let relay = scenario.relay_with(&options).await;
    eventually("all 220 rows SENT after the lost position", Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sent).await == 220).then_some(())
    })
    .await;
    scenario.received(220).await;
    assert_eq!(relay.metric("relay_position_lost_total"), 1.0, "the loss is counted");
    // Tailing resumed at the current position: new rows take the binlog path again.
    outbox.insert_tx(&rows(prefix, topic, 220, 230)).await;
    eventually("rows after the recovery SENT", Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sent).await == 230).then_some(())
    })
    .await;
    scenario.finish(relay).await;
}

/// Starts every broker again when dropped, even when the test failed.
struct BrokerOutage;

impl BrokerOutage {
    /// The whole cluster stopped.
    async fn begin() -> Self {
        stop_broker().await;
        BrokerOutage
    }

    /// One broker killed (SIGKILL), the others up.
    async fn killed(broker: &str) -> Self {
        end_broker(broker, "-KILL").await;
        BrokerOutage
    }
}

impl Drop for BrokerOutage {
    fn drop(&mut self) {
        start_broker();
    }
}

/// One broker of the two down for 30 s under load on 50 keys: the keys of the other
/// broker's queues keep flowing; the relay killed meanwhile and a successor started
/// without its local checkpoint (as on another host) start from the layout pinned in
/// the mirror row, say which broker they wait for, and hold only that broker's queues;
/// once the broker is back it is used within 5 s and everything arrives, in per-key
/// order, nothing FAILED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_broker_down_holds_only_its_queues_even_across_a_relay_restart() {
    let _serial = SERIAL.lock().await;
    let scenario = Scenario::consumed("broker_b_down").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let options = scenario.options().env("OUTBOX_RELAY__ROCKETMQ__SEND_TIMEOUT_MS", 1_000);
    let mut relay = scenario.relay_with(&options).await;
    let load = Load::started(outbox, events, 50, 100).await;
    let held_lanes = r#"relay_broker_held_lanes{broker="broker-b"}"#;

    let outage = BrokerOutage::killed(BROKER_B).await;
    let down_since = tokio::time::Instant::now();
    relay.wait_readiness_with(false, "broker broker-b", Duration::from_secs(20)).await;
    let sent_then = outbox.count_status(RowStatus::Sent).await;
    eventually("100 more rows SENT while broker-b is down", Duration::from_secs(20), || async {
        (outbox.count_status(RowStatus::Sent).await >= sent_then + 100).then_some(())
    })
    .await;
    assert!(relay.metric(held_lanes) > 0.0, "the held lanes are counted under broker-b");

    // The successor starts without the local checkpoint, as a standby on another host
    // would: the layout comes from the mirror row.
    relay.kill();
    let successor = RelayOptions { checkpoint_dir: std::env::temp_dir().join(unique("relay-ckpt")), ..options };
    let mut relay = RelayProcess::start(stack, &successor);
    let body = relay.wait_readiness_with(false, "broker broker-b", Duration::from_secs(60)).await;
    assert!(body.contains(r#""role":"leader""#), "the successor leads and names the broker: {body}");
    let sent_then = outbox.count_status(RowStatus::Sent).await;
    eventually("the restarted relay sends to broker-a", Duration::from_secs(30), || async {
        (outbox.count_status(RowStatus::Sent).await >= sent_then + 50).then_some(())
    })
    .await;
    assert_eq!(outbox.count_status(RowStatus::Failed).await, 0, "a row FAILED while broker-b was down");

    // The outage lasts 30 s in all; the broker is back once it has registered again.
    tokio::time::sleep_until(down_since + Duration::from_secs(30)).await;
    drop(outage);
    let back = tokio::time::Instant::now();
    eventually("broker-b's lanes sending again", Duration::from_secs(30), || async {
        (relay.metric(held_lanes) == 0.0).then_some(())
    })
    .await;
    let resumed = back.elapsed();
    println!("broker-b used again {:.2} s after it registered", resumed.as_secs_f64());
    assert!(resumed < Duration::from_secs(5), "broker-b was used only {resumed:?} after its return");

    delivered_in_order(&scenario, &mut relay, load, Duration::from_secs(30)).await;
    scenario.finish(relay).await;
}

/// broker-a's slave killed (SIGKILL) for 30 s under load on 50 keys. broker-a, a
/// SYNC_MASTER, stores each send but cannot have it confirmed and answers
/// FLUSH_SLAVE_TIMEOUT: no row of its keys becomes SENT meanwhile, readiness says the
/// slave did not confirm, the slave metric counts the answers under broker-a, and
/// broker-b's keys flow. Once the slave is back every event arrives, in per-key order,
/// nothing FAILED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_slave_holds_its_masters_keys_while_the_other_brokers_keys_flow() {
    let _serial = SERIAL.lock().await;
    let scenario = Scenario::consumed("slave_down").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let mut relay = scenario.relay().await;
    let on_a = keys_on(stack, &events.topic, 50, "broker-a").await;
    assert!(!on_a.is_empty() && on_a.len() < 50, "both brokers have keys: {on_a:?} on broker-a");
    let load = Load::started(outbox, events, 50, 100).await;
    let unconfirmed = r#"relay_broker_slave_unconfirmed_total{broker="broker-a",status="FLUSH_SLAVE_TIMEOUT"}"#;

    let outage = BrokerOutage::killed(BROKER_A_SLAVE).await;
    let down_since = tokio::time::Instant::now();
    let body = relay.wait_readiness_with(false, "its slave did not confirm it", Duration::from_secs(20)).await;
    assert!(body.contains("broker broker-a"), "readiness names the broker: {body}");
    assert!(relay.metric(unconfirmed) > 0.0, "broker-a's answers are counted");
    // Rows whose send broker-a's slave had confirmed are written back by now: from
    // here on, none of broker-a's keys may become SENT while broker-b's go on.
    let (on_a_before, on_b_before) = sent_split(outbox, events, &on_a).await;
    throughout("no row of broker-a's keys SENT while its slave is down", Duration::from_secs(20), || async {
        let (sent_on_a, _) = sent_split(outbox, events, &on_a).await;
        (sent_on_a > on_a_before).then_some(sent_on_a - on_a_before).into_iter().collect::<Vec<_>>()
    })
    .await;
    let (_, on_b_after) = sent_split(outbox, events, &on_a).await;
    assert!(on_b_after >= on_b_before + 50, "broker-b's keys flowed: {on_b_before} -> {on_b_after} SENT");
    assert_eq!(outbox.count_status(RowStatus::Failed).await, 0, "no row FAILED while the slave was down");
    println!("{} sends answered FLUSH_SLAVE_TIMEOUT while broker-a's slave was down", relay.metric(unconfirmed));

    tokio::time::sleep_until(down_since + Duration::from_secs(30)).await;
    drop(outage);
    delivered_in_order(&scenario, &mut relay, load, Duration::from_secs(60)).await;
    scenario.finish(relay).await;
}

/// broker-a killed with SIGKILL right after it stored a burst of events, and started
/// again. An abnormal start deletes the broker's newest key index file and re-indexes
/// from the commit log: every event is still found by its key, so `verify` checks every
/// SENT row and finds all (no false loss), and mqadmin finds one of broker-a's events
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_with_sigkill_still_finds_every_stored_event_by_key() {
    let _serial = SERIAL.lock().await;
    let scenario = Scenario::new("index_kill").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let relay = scenario.relay().await;
    let on_a = keys_on(stack, &events.topic, 10, "broker-a").await;
    let rows: Vec<Row> = (0..40).map(|i| events.row(&format!("key{}", i % 10), i / 10)).collect();
    outbox.insert_tx(&rows).await;
    all_sent(outbox, rows.len(), Duration::from_secs(60)).await;

    end_broker(BROKER_A, "-KILL").await;
    start_broker();
    let env = [("OUTBOX_RELAY__ROCKETMQ__NAMESRV", stack.namesrv.clone())];
    let (code, verified) = eventually("verify to check all 40 SENT rows", Duration::from_secs(60), || async {
        let output = cli_with(stack, outbox, &env, &["verify", "--sample", "40", "--json"]);
        let verified: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("verify --json");
        (verified["checked"].as_u64() == Some(40)).then_some((output.status.code(), verified))
    })
    .await;
    assert_eq!(code, Some(0), "verify finds every row after the kill: {verified}");
    assert_eq!(verified["missing"].as_array().map(Vec::len), Some(0), "{verified}");
    let key = on_a.first().expect("a key on broker-a");
    let found = common::mqadmin::query_msg_by_key(&events.topic, &events.id(key, 0));
    assert_eq!(found.len(), 1, "mqadmin finds broker-a's event once after the kill: {found:?}");
    scenario.finish(relay).await;
}

/// Stops `load`, then waits until every row it wrote is SENT (none FAILED), `relay` is
/// ready within `ready_within`, and the scenario's consumer got every event, in per-key
/// order; how many rows were written, and the deliveries.
async fn delivered_in_order(
    scenario: &Scenario,
    relay: &mut RelayProcess,
    load: Load,
    ready_within: Duration,
) -> (usize, Vec<Delivery>) {
    let Scenario { outbox, events, .. } = scenario;
    let written = load.finish().await;
    all_sent(outbox, written, Duration::from_secs(120)).await;
    assert_eq!(outbox.count_status(RowStatus::Failed).await, 0, "no row FAILED");
    relay.wait_readiness(true, ready_within).await;
    let deliveries = consumed_all(scenario.collector(), events, written, Duration::from_secs(120)).await;
    scenario.assert_per_key_order(&deliveries).await;
    (written, deliveries)
}

/// The keys `key0`, `key1`, ... (`keys` of them) whose queue of `topic` is on `broker`.
async fn keys_on(stack: &Stack, topic: &str, keys: usize, broker: &str) -> BTreeSet<String> {
    let producer = stack.producer("route_check").await;
    let route = producer.live_queues(topic).await.expect("the topic's route");
    producer.shutdown().await;
    assert_eq!(route.len(), TEST_TOPIC_QUEUES as usize, "every queue of {topic} is routable");
    (0..keys)
        .map(|i| format!("key{i}"))
        .filter(|key| route[queue_for(HashFunction::Stable, key, TEST_TOPIC_QUEUES) as usize].broker_name() == broker)
        .collect()
}

/// SENT rows of `keys`, and of every other key.
async fn sent_split(outbox: &TestOutbox, events: &Events, keys: &BTreeSet<String>) -> (usize, usize) {
    let prefix = format!("{}-", events.prefix);
    let sent: Vec<String> = outbox
        .statuses()
        .await
        .into_iter()
        .filter(|(_, (status, _))| *status == RowStatus::Sent.code())
        .map(|(id, _)| id)
        .collect();
    let key_of =
        |id: &str| id.strip_prefix(&prefix).and_then(|rest| rest.rsplit_once('-')).map(|(key, _)| key.to_owned());
    let on_keys = sent.iter().filter(|id| key_of(id).is_some_and(|key| keys.contains(&key))).count();
    (on_keys, sent.len() - on_keys)
}

/// broker-b down for 30 s under load, and the relay killed (SIGKILL) and restarted
/// in the middle of it, with its own checkpoint: the checkpoint could not pass
/// broker-b's oldest unsent event, but the restarted relay sends again only what
/// broker-a's queues had finished in the last checkpoint interval before the kill
/// (their marks are saved with the checkpoint), not everything since the outage
/// began; nothing lost, per-key order kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_a_broker_outage_sends_again_only_the_last_checkpoint_intervals_events() {
    let _serial = SERIAL.lock().await;
    let scenario = Scenario::consumed("outage_restart").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let checkpoint_every = Duration::from_millis(200);
    let options = scenario
        .options()
        .env("OUTBOX_RELAY__ROCKETMQ__SEND_TIMEOUT_MS", 1_000)
        .env("OUTBOX_RELAY__CHECKPOINT__INTERVAL_MS", checkpoint_every.as_millis());
    let mut relay = scenario.relay_with(&options).await;
    let load = Load::started(outbox, events, 50, 100).await;

    let outage = BrokerOutage::killed(BROKER_B).await;
    let down_since = tokio::time::Instant::now();
    relay.wait_readiness_with(false, "broker broker-b", Duration::from_secs(20)).await;
    // broker-a's queues go on for a while: the rows SENT meanwhile are what a restart
    // would publish again if it replayed from the held checkpoint.
    let window = Duration::from_secs(5);
    let sent_before = outbox.count_status(RowStatus::Sent).await;
    tokio::time::sleep_until(tokio::time::Instant::now() + window).await;
    let sent_in_window = outbox.count_status(RowStatus::Sent).await - sent_before;
    tokio::time::sleep_until(down_since + Duration::from_secs(15)).await;
    let sent_during_outage = outbox.count_status(RowStatus::Sent).await;
    assert!(
        sent_in_window >= 100,
        "broker-a's queues kept sending while broker-b was down: {sent_in_window} in {window:?}"
    );
    relay.kill();
    let mut relay = RelayProcess::start(stack, &options);
    relay.wait_readiness_with(false, "broker broker-b", Duration::from_secs(60)).await;

    tokio::time::sleep_until(down_since + Duration::from_secs(30)).await;
    drop(outage);
    let (written, deliveries) = delivered_in_order(&scenario, &mut relay, load, Duration::from_secs(60)).await;
    // The bound: what broker-a's queues finish in one checkpoint interval, and in the
    // time a SENT write-back and the batch on the wire at the kill take (300 ms).
    // broker-b's batches in flight when it was killed, stored but never answered, are
    // sent again as well: that is broker-b's kill, not the relay's restart, and the
    // events stored twice on broker-b are only reported.
    let per_second = sent_in_window as f64 / window.as_secs_f64();
    let bound = (per_second * (checkpoint_every.as_secs_f64() + 0.3)).ceil() as usize;
    let on_broker_a: Vec<_> = deliveries.iter().filter(|d| d.broker_name == "broker-a").cloned().collect();
    let doubled = stored_twice(&on_broker_a);
    println!(
        "{} of {written} events published twice on broker-a after a restart {} rows into broker-b's outage (bound {bound}, {per_second:.0} rows/s SENT on broker-a); {} twice in all",
        doubled.len(),
        sent_during_outage - sent_before,
        stored_twice(&deliveries).len()
    );
    assert!(
        doubled.len() <= bound,
        "{} events published twice (bound {bound}), e.g. {:?}",
        doubled.len(),
        doubled.first()
    );
    scenario.finish(relay).await;
}

/// One broker of two killed for a minute under load: the relay's log, a file here,
/// holds a handful of lines about it (the broker down, the broker back; the RocketMQ
/// client's own repeats thinned), none with a terminal's escape codes; every event
/// arrives in per-key order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_for_a_minute_under_load_costs_a_handful_of_plain_log_lines() {
    let _serial = SERIAL.lock().await;
    let scenario = Scenario::consumed("quiet_log").await;
    let Scenario { outbox, events, .. } = &scenario;
    let options = scenario.options().env("OUTBOX_RELAY__ROCKETMQ__SEND_TIMEOUT_MS", 1_000);
    let mut relay = scenario.relay_with(&options).await;
    let load = Load::started(outbox, events, 50, 100).await;
    let lines_before = relay.log_text().lines().count();

    let outage = BrokerOutage::killed(BROKER_B).await;
    let down_since = tokio::time::Instant::now();
    relay.wait_readiness_with(false, "broker broker-b", Duration::from_secs(20)).await;
    // The outage is the scenario: it lasts a minute whatever the relay does meanwhile.
    tokio::time::sleep_until(down_since + Duration::from_secs(60)).await;
    drop(outage);
    relay.wait_readiness(true, Duration::from_secs(60)).await;
    let written = load.finish().await;
    all_sent(outbox, written, Duration::from_secs(120)).await;
    let deliveries = consumed_all(scenario.collector(), events, written, Duration::from_secs(120)).await;
    scenario.assert_per_key_order(&deliveries).await;

    let log = relay.log_text();
    assert!(!log.contains('\u{1b}'), "a log written to a file has no escape codes:\n{log}");
    // The coordinator's progress line, once a minute, is there with or without an outage.
    let outage_lines: Vec<&str> =
        log.lines().skip(lines_before).filter(|line| !line.contains("outbox_relay::coordinator: progress")).collect();
    println!("{} log lines from the broker's kill to the end:\n{}", outage_lines.len(), outage_lines.join("\n"));
    assert!(
        outage_lines.len() <= 5,
        "a one-minute broker outage took {} log lines:\n{}",
        outage_lines.len(),
        outage_lines.join("\n")
    );
    for said in ["broker broker-b is down", "broker broker-b is back"] {
        assert!(outage_lines.iter().any(|line| line.contains(said)), "the log says {said:?}:\n{log}");
    }
    scenario.finish(relay).await;
}

/// The replica stops applying for twice the takeover delay under load. Its binlog
/// stream stays open and idle, so nothing says the binlog path passed the rows the
/// primary committed meanwhile: the sweep waits instead of publishing them ahead of
/// the binlog path, readiness and the replica lag metric say why, and once the
/// replica applies again every event is published once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_stops_applying_delays_events_and_never_doubles_them() {
    let _serial = SERIAL.lock().await;
    let scenario = Scenario::consumed("replica_stop").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let takeover_after = Duration::from_secs(6);
    let options = scenario
        .options()
        .env("OUTBOX_RELAY__SWEEP__GRACE_MS", 2_000)
        .env("OUTBOX_RELAY__SWEEP__TAKEOVER_AFTER_MS", takeover_after.as_millis())
        .env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 1_000);
    let mut relay = scenario.relay_with(&options).await;
    let load = Load::started(outbox, events, 20, 50).await;

    let stopped = SqlThreadStopped::begin(stack).await;
    let since = tokio::time::Instant::now();
    let body = relay.wait_readiness_with(false, "behind its primary", Duration::from_secs(30)).await;
    assert!(body.contains("replication is stopped"), "/readyz names the cause: {body}");
    let lag = eventually("the replica lag metric past the takeover delay", takeover_after * 3, || async {
        let lag = relay.metric("relay_source_replica_lag_seconds");
        (lag >= takeover_after.as_secs_f64()).then_some(lag)
    })
    .await;
    println!("replica lag metric {lag:.1} s while the SQL thread is stopped");
    tokio::time::sleep_until(since + takeover_after * 2).await;
    drop(stopped);

    let written = load.finish().await;
    all_sent(outbox, written, Duration::from_secs(120)).await;
    relay.wait_readiness(true, Duration::from_secs(60)).await;
    let deliveries = consumed_all(scenario.collector(), events, written, Duration::from_secs(120)).await;
    let doubled = stored_twice(&deliveries);
    assert!(doubled.is_empty(), "{} events published twice, e.g. {:?}", doubled.len(), doubled.first());
    scenario.assert_per_key_order(&deliveries).await;
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_longer_than_the_retry_budget_fails_nothing_and_keeps_every_keys_order() {
    let _serial = SERIAL.lock().await;
    let scenario = Scenario::new("outage").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    // A retry budget of about 1.4 s (200 ms doubling to 1 s, 2 retries): the outage
    // below lasts far longer, and still nothing may become FAILED.
    let options = scenario
        .options()
        .env("OUTBOX_RELAY__RETRY__MAX_RETRY", 2)
        .env("OUTBOX_RELAY__RETRY__BACKOFF_INITIAL_MS", 200)
        .env("OUTBOX_RELAY__RETRY__BACKOFF_MAX_MS", 1_000)
        .env("OUTBOX_RELAY__ROCKETMQ__SEND_TIMEOUT_MS", 1_000);
    let mut relay = scenario.relay_with(&options).await;
    let load = Load::started(outbox, events, 50, 100).await;

    let outage = BrokerOutage::begin().await;
    let body = relay.wait_readiness(false, Duration::from_secs(20)).await;
    assert!(body.contains("broker"), "/readyz names the broker: {body}");
    let sent_before = relay.metric_sum("relay_events_published_total");
    none_failed_throughout(outbox, "no row FAILED during the outage", Duration::from_secs(12)).await;
    assert_eq!(
        relay.metric_sum("relay_events_published_total"),
        sent_before,
        "nothing is SEND_OK while the broker is down"
    );

    drop(outage); // the broker is back and has answered a test send
    let back = tokio::time::Instant::now();
    eventually("the first SEND_OK after the broker's return", Duration::from_secs(30), || async {
        (relay.metric_sum("relay_events_published_total") > sent_before).then_some(())
    })
    .await;
    let resumed = back.elapsed();
    println!("sending resumed {:.2} s after the broker accepted messages again", resumed.as_secs_f64());
    assert!(resumed < Duration::from_secs(5), "sending resumed only {resumed:?} after the broker's return");

    let written = load.finish().await;
    all_sent(outbox, written, Duration::from_secs(120)).await;
    assert_eq!(outbox.count_status(RowStatus::Failed).await, 0, "no row FAILED");
    relay.wait_readiness(true, Duration::from_secs(30)).await;
    let collector = Collector::start(&stack.namesrv, &events.topic, &unique("outage_consumer")).await;
    let deliveries = consumed_all(&collector, events, written, Duration::from_secs(120)).await;
    scenario.assert_per_key_order(&deliveries).await;
    scenario.finish(relay).await;
    collector.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_topic_deleted_under_load_is_held_and_flows_again_once_created() {
    let _serial = SERIAL.lock().await;
    let scenario = Scenario::new("deleted").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let options = scenario
        .options()
        .env(&format!("OUTBOX_RELAY__ROCKETMQ__TOPICS__{}__QUEUE_COUNT", events.topic), 8)
        .env("OUTBOX_RELAY__RETRY__MAX_RETRY", 1)
        .env("OUTBOX_RELAY__RETRY__BACKOFF_MAX_MS", 500);
    let mut relay = scenario.relay_with(&options).await;
    let load = Load::started(outbox, events, 10, 50).await;

    // An operator deletes the topic from the cluster, brokers and NameServer.
    common::mqadmin::delete_topic(&events.topic);
    let body = eventually("/readyz naming the missing topic", Duration::from_secs(30), || async {
        let body = relay.http_get("/readyz");
        (body.starts_with("HTTP/1.0 503") && body.contains(&events.topic)).then_some(body)
    })
    .await;
    assert!(body.contains("held"), "the topic's events are held: {body}");
    none_failed_throughout(outbox, "no row FAILED while its topic is missing", Duration::from_secs(5)).await;

    outbox_relay::ops::admin::create_topic(
        outbox_relay::ops::admin::NameServer::unsigned(&stack.namesrv),
        "DefaultCluster",
        &events.topic,
        8,
        None,
    )
    .await
    .expect("create the topic again");
    let written = load.finish().await;
    all_sent(outbox, written, Duration::from_secs(120)).await;
    assert_eq!(outbox.count_status(RowStatus::Failed).await, 0, "no row FAILED");
    relay.wait_readiness(true, Duration::from_secs(30)).await;
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_sweep_with_a_flapping_broker_keeps_every_keys_order() {
    let _serial = SERIAL.lock().await;
    let scenario = Scenario::new("flapping").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    // Committed before the relay's first start: all of it goes through the full sweep.
    let rows: Vec<Row> = (0..20_000).map(|i| events.row(&format!("key{}", i % 50), i / 50)).collect();
    for chunk in rows.chunks(1_000) {
        outbox.insert_tx(chunk).await;
    }
    let options = scenario.options().env("OUTBOX_RELAY__LANES__MAX_IN_FLIGHT", 2_000);
    let relay = RelayProcess::start(stack, &options);
    // The broker goes away three times while the sweep drains: after a fifth, two
    // fifths and three fifths of the rows are SENT, for a second each time.
    for fifths in 1..=3 {
        eventually(&format!("{fifths} fifths of the rows SENT"), Duration::from_secs(120), || async {
            (outbox.count_status(RowStatus::Sent).await >= fifths * 4_000).then_some(())
        })
        .await;
        let outage = BrokerOutage::begin().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(outage);
    }
    all_sent(outbox, 20_000, Duration::from_secs(300)).await;
    assert_eq!(outbox.count_status(RowStatus::Failed).await, 0, "no row FAILED");
    assert!(relay.metric("relay_sweep_claimed_total") >= 20_000.0, "the sweep delivered them");
    let collector = Collector::start(&stack.namesrv, &events.topic, &unique("flapping_consumer")).await;
    let deliveries = consumed_all(&collector, events, 20_000, Duration::from_secs(300)).await;
    scenario.assert_per_key_order(&deliveries).await;
    scenario.finish(relay).await;
    collector.shutdown().await;
}

/// The replica's SQL thread, stopped until dropped (also when the test fails, so the
/// stack's replica applies again for every later test).
struct SqlThreadStopped {
    replica_root_url: String,
}

impl SqlThreadStopped {
    async fn begin(stack: &Stack) -> Self {
        let pool = stack.replica_pool().await;
        pool.get_conn()
            .await
            .expect("replica")
            .query_drop("STOP SLAVE SQL_THREAD")
            .await
            .expect("STOP SLAVE SQL_THREAD");
        pool.disconnect().await.ok();
        Self { replica_root_url: stack.replica_root_url.clone() }
    }
}

impl Drop for SqlThreadStopped {
    fn drop(&mut self) {
        let url = self.replica_root_url.clone();
        let started = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async {
                let mut conn = mysql_async::Conn::from_url(url).await?;
                conn.query_drop("START SLAVE SQL_THREAD").await?;
                conn.disconnect().await
            })
        });
        // A panic here, while a failed test unwinds, would abort the whole run: say it instead.
        match started.join() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => eprintln!("START SLAVE SQL_THREAD on the replica failed: {error}"),
            Err(_) => eprintln!("restarting the replica's SQL thread panicked"),
        }
    }
}

/// The sum of the relay's per-queue in-flight gauges.
fn lanes_in_flight(relay: &RelayProcess) -> f64 {
    relay.metric_sum("relay_lane_inflight")
}

/// Every failure counter of the relay, summed: FAILED rows by any reason.
fn failed(relay: &RelayProcess) -> f64 {
    relay.metric_sum("relay_failed_events_total")
}

/// Idle, load, broker down, relay restarted, the replica's SQL thread stopped: each
/// lag and flow metric moves as it should, read from /metrics over HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_follow_idle_load_an_outage_a_restart_and_replica_lag() {
    let _serial = SERIAL.lock().await;
    let scenario = Scenario::new("metrics").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    // A small in-flight budget (and batches that fit in it), so the reader stops
    // reading while the broker is down.
    let options = scenario
        .options()
        .env("OUTBOX_RELAY__SOURCE__HEARTBEAT_MS", 1_000)
        .env("OUTBOX_RELAY__LANES__MAX_IN_FLIGHT", 64)
        .env("OUTBOX_RELAY__LANES__BATCH_SIZE", 64)
        .env("OUTBOX_RELAY__ROCKETMQ__SEND_TIMEOUT_MS", 1_000)
        .env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 1_000)
        .env("OUTBOX_RELAY__SWEEP__GRACE_MS", 1_000);
    let mut relay = scenario.relay_with(&options).await;

    // Idle: the lease renewals keep the lags near zero; the source keeps binlogs a day.
    eventually("idle lags near zero", Duration::from_secs(20), || async {
        let lags = [
            relay.metric("relay_binlog_lag_seconds"),
            relay.metric("relay_checkpoint_age_seconds"),
            relay.metric("relay_source_replica_lag_seconds"),
        ];
        let caught_up = (0.0..65_536.0).contains(&relay.metric("relay_binlog_behind_bytes"));
        (caught_up && lags.iter().all(|lag| (0.0..3.0).contains(lag))).then_some(())
    })
    .await;
    let headroom = relay.metric("relay_binlog_expiry_headroom_seconds");
    assert!((86_390.0..=86_400.0).contains(&headroom), "a day's expiry minus a caught-up checkpoint: {headroom}");
    for (name, value) in [
        ("relay_leader", 1.0),
        ("relay_ready", 1.0),
        ("relay_paused", 0.0),
        ("relay_binlog_connected", 1.0),
        ("relay_in_flight_bytes", 0.0),
        ("relay_in_flight_bytes_limit", 268_435_456.0),
        ("outbox_oldest_pending_seconds", 0.0),
        ("outbox_rows{status=\"pending\"}", 0.0),
        ("outbox_rows{status=\"failed\"}", 0.0),
        (&format!("relay_build_info{{version=\"{}\"}}", env!("CARGO_PKG_VERSION")), 1.0),
    ] {
        assert_eq!(relay.metric(name), value, "{name} when idle");
    }
    let term = relay.metric("relay_leader_term");
    assert!(term >= 1.0, "a term: {term}");
    // The process series are the relay's own figures from /proc, on its default one thread.
    assert_eq!(relay.metric("relay_runtime_worker_threads"), 1.0);
    let before = ProcessStats::of_pid(relay.pid()).expect("the relay's /proc");
    let idle_cpu = relay.metric("process_cpu_seconds_total");
    let [resident, peak] = relay.metrics(["process_resident_memory_bytes", "process_resident_memory_max_bytes"]);
    let after = ProcessStats::of_pid(relay.pid()).expect("the relay's /proc");
    assert!((before.cpu_seconds..=after.cpu_seconds).contains(&idle_cpu), "{idle_cpu} s within {before:?} {after:?}");
    // The kernel sums resident pages from per-CPU counters that are exact only to a
    // batch per CPU (32 pages or more each), so two reads a moment apart may disagree by
    // that much even when the peak did not move; a MiB covers it on this machine.
    let counter_slack = 1_048_576.0;
    assert!(
        resident > 1e6 && resident <= after.peak_resident_bytes as f64 + counter_slack,
        "{resident} bytes, {after:?}"
    );
    assert!(relay.metric("process_threads") >= 2.0, "worker, blocking and client threads");
    assert!(peak >= resident, "the peak {peak} is at least the resident memory {resident}, read together");
    let (open_fds, max_fds) = (relay.metric("process_open_fds"), relay.metric("process_max_fds"));
    assert!(open_fds > 3.0 && open_fds < max_fds, "{open_fds} descriptors open of {max_fds}");
    let started = relay.metric("process_start_time_seconds");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
    assert!((now - 600.0..=now).contains(&started), "started at {started}, now {now}");

    // Load: every event published, each with its commit-to-ack time and its send.
    let load = Load::started(outbox, events, 10, 50).await;
    let (retries_before, errors_before) = (
        relay.metric("relay_batch_retries_total{class=\"outage\"}"),
        relay.metric("relay_send_batches_total{status=\"ERROR\"}"),
    );
    assert!(relay.metric("relay_send_batches_total{status=\"SEND_OK\"}") >= 1.0, "sends answered SEND_OK");

    // The broker down: nothing fails, everything waits, and the waiting shows.
    let outage = BrokerOutage::begin().await;
    eventually("the outage in every lag", Duration::from_secs(40), || async {
        let waiting = relay.metric("relay_ready") == 0.0
            && relay.metric("relay_batch_retries_total{class=\"outage\"}") > retries_before
            && relay.metric("relay_send_batches_total{status=\"ERROR\"}") > errors_before
            && relay.metric("outbox_oldest_pending_seconds") > 3.0
            && relay.metric("outbox_rows{status=\"pending\"}") > 0.0
            && relay.metric("relay_checkpoint_age_seconds") > 3.0
            && relay.metric("relay_binlog_expiry_headroom_seconds") < headroom - 3.0
            && relay.metric("relay_binlog_lag_seconds") > 3.0
            && relay.metric("relay_binlog_behind_bytes") > 0.0
            && relay.metric("relay_in_flight_bytes") > 0.0
            && lanes_in_flight(&relay) > 0.0;
        waiting.then_some(())
    })
    .await;
    assert_eq!(failed(&relay), 0.0, "an outage fails nothing");
    drop(outage);
    eventually("ready again after the broker's return", Duration::from_secs(60), || async {
        (relay.metric("relay_ready") == 1.0).then_some(())
    })
    .await;
    let written = load.finish().await;
    all_sent(outbox, written, Duration::from_secs(90)).await;
    eventually("the lags back near zero", Duration::from_secs(30), || async {
        let settled = relay.metric("outbox_oldest_pending_seconds") == 0.0
            && relay.metric("relay_checkpoint_age_seconds") < 3.0
            && relay.metric("relay_binlog_lag_seconds") < 3.0
            && lanes_in_flight(&relay) == 0.0;
        settled.then_some(())
    })
    .await;
    let published = relay.metric_sum("relay_events_published_total");
    assert!(published >= written as f64, "every event published ({published} of {written})");
    let read = relay.metric_sum("relay_events_read_total");
    assert!(read >= published, "every event published was read ({read} read, {published} published)");
    assert_eq!(relay.metric("relay_in_flight_bytes"), 0.0, "every byte read is acknowledged");
    let busy_cpu = relay.metric("process_cpu_seconds_total");
    assert!(busy_cpu > idle_cpu, "the load took CPU: {idle_cpu} s, then {busy_cpu} s");
    assert_eq!(relay.metric("relay_commit_to_ack_seconds_count"), published, "one latency per published event");
    let mean = relay.metric("relay_commit_to_ack_seconds_sum") / published;
    assert!(mean > 0.0 && mean < 60.0, "a mean commit-to-ack in the outage's range: {mean}");
    let sends = relay.metric_sum("relay_send_batches_total");
    assert_eq!(relay.metric("relay_send_seconds_count"), sends, "every send timed");
    assert_eq!(failed(&relay), 0.0);

    // A restart resumes from its checkpoint under a new term: no full sweep.
    assert_eq!(relay.stop(), Some(0));
    outbox.insert_tx(&events.rows("restart", 0..30)).await;
    let relay = scenario.relay_with(&options).await;
    scenario.all_sent(written + 30).await;
    assert!(relay.metric("relay_leader_term") > term, "a new term after the restart");
    eventually("the restarted relay's lags near zero", Duration::from_secs(20), || async {
        let lags = [relay.metric("relay_binlog_lag_seconds"), relay.metric("relay_checkpoint_age_seconds")];
        lags.iter().all(|lag| (0.0..3.0).contains(lag)).then_some(())
    })
    .await;
    assert_eq!(relay.metric("relay_full_sweeps_total"), 0.0, "resumed from the checkpoint");
    assert_eq!(relay.metric("relay_position_lost_total"), 0.0);
    eventually("the new process published the rows written while it was down", Duration::from_secs(30), || async {
        (relay.metric_sum("relay_events_published_total") >= 30.0).then_some(())
    })
    .await;
    let sent_rows = relay.metric("outbox_rows{status=\"sent\"}");
    assert!(sent_rows >= written as f64, "the first count after the start sees the SENT rows: {sent_rows}");

    // The replica stops applying: its lag and the binlog lag grow, readiness says why,
    // and the sweep waits for the replica rather than publish ahead of the binlog path;
    // once it applies again, the binlog path delivers.
    let swept_before = relay.metric("relay_events_published_total{path=\"sweep\"}");
    let stopped = SqlThreadStopped::begin(stack).await;
    outbox.insert_tx(&events.rows("replica", 0..20)).await;
    eventually("the replica's lag growing, named by /readyz", Duration::from_secs(30), || async {
        let lagging = relay.metric("relay_source_replica_lag_seconds") >= 3.0
            && relay.metric("relay_binlog_lag_seconds") >= 3.0
            && relay.readyz().is_some_and(|body| body.contains("behind its primary"));
        lagging.then_some(())
    })
    .await;
    assert_eq!(
        relay.metric("relay_events_published_total{path=\"sweep\"}"),
        swept_before,
        "the sweep waits for a lagging replica"
    );
    drop(stopped);
    scenario.all_sent(written + 50).await;
    eventually("the replica caught up again", Duration::from_secs(30), || async {
        (relay.metric("relay_source_replica_lag_seconds") < 2.0).then_some(())
    })
    .await;
    scenario.finish(relay).await;
}

/// Fails as soon as a row of `outbox` is FAILED during `period`.
async fn none_failed_throughout(outbox: &TestOutbox, what: &str, period: Duration) {
    throughout(what, period, || async {
        let failed = outbox.count_status(RowStatus::Failed).await;
        (failed > 0).then_some(failed).into_iter().collect::<Vec<_>>()
    })
    .await;
}
