//! Supervision against the real stack: a part of the relay that stops working is
//! reported at once (`/readyz`, an error line) and either recovers or stops the relay
//! with the exit code of its class; a graceful stop joins everything and leaves
//! nothing behind; a restart after any stop loses nothing; the relay's process runs
//! without transparent huge pages.
#![recursion_limit = "512"]

mod common;

use std::time::Duration;

use common::collector::Collector;
use common::events::{all_sent, consumed_all, delivery_counts, stored_twice};
use common::outbox::TestOutbox;
use common::relay::RelayOptions;
use common::scenario::Scenario;
use common::{eventually, unique, Stack};
use mysql_async::prelude::Queryable;
use outbox_kit::RowStatus;

/// A replication user of this test alone, so revoking its grant disturbs no other test.
struct ReplUser {
    name: String,
    url: String,
}

impl ReplUser {
    async fn create(outbox: &TestOutbox, stack: &Stack) -> Self {
        let name = unique("repl").chars().take(32).collect::<String>();
        for sql in [
            format!("CREATE USER '{name}'@'127.0.0.1' IDENTIFIED BY 'pw-{name}'"),
            format!("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{name}'@'127.0.0.1'"),
            format!("GRANT SELECT ON app.* TO '{name}'@'127.0.0.1'"),
        ] {
            outbox.exec(&sql).await;
        }
        stack.replica_caught_up().await;
        let address = stack.repl_url.rsplit_once('@').map(|(_, host)| host).expect("repl url has a host");
        Self { url: format!("mysql://{name}:pw-{name}@{address}"), name }
    }

    /// Kills the user's binlog dump connections on the replica; returns how many there were.
    async fn kill_dumps(&self, stack: &Stack) -> usize {
        let mut conn = stack.replica_pool().await.get_conn().await.expect("conn");
        let ids: Vec<u64> = conn
            .exec(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%' AND USER = ?",
                (&self.name,),
            )
            .await
            .expect("processlist");
        for id in &ids {
            conn.query_drop(format!("KILL {id}")).await.expect("kill dump thread");
        }
        ids.len()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_replication_grant_is_reported_at_once_and_the_sweep_delivers_meanwhile() {
    let scenario = Scenario::new("revoke").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let user = ReplUser::create(outbox, stack).await;
    let options =
        scenario.options().env("OUTBOX_RELAY__SOURCE__URL", &user.url).env("OUTBOX_RELAY__SWEEP__GRACE_MS", 1_000);
    let mut relay = scenario.relay_with(&options).await;
    outbox.insert_tx(&events.rows("k", 0..50)).await;
    scenario.all_sent(50).await;

    outbox.exec(&format!("REVOKE REPLICATION SLAVE ON *.* FROM '{}'@'127.0.0.1'", user.name)).await;
    stack.replica_caught_up().await;
    assert_eq!(user.kill_dumps(stack).await, 1, "the relay's dump connection was found and killed");
    let body = eventually("/readyz 503 naming the missing grant", Duration::from_secs(10), || async {
        let body = relay.http_get("/readyz");
        (body.starts_with("HTTP/1.0 503") && body.contains("REPLICATION SLAVE")).then_some(body)
    })
    .await;
    assert!(
        body.contains(&user.name) && body.contains("GRANT REPLICATION SLAVE"),
        "/readyz names user and fix: {body}"
    );
    assert!(!body.contains(&format!("pw-{}", user.name)), "no password in /readyz: {body}");
    let log = relay.log_text();
    assert!(
        log.lines().any(|l| l.contains("ERROR") && l.contains("GRANT REPLICATION SLAVE") && l.contains(&user.name)),
        "an error line names the grant and the fix:\n{log}"
    );

    // Rows committed after the failure still arrive: the sweep took over.
    for start in (50..150).step_by(25) {
        outbox.insert_tx(&events.rows("k", start..start + 25)).await;
    }
    scenario.all_sent(150).await;
    assert!(!relay.wait_readiness(false, Duration::from_secs(1)).await.is_empty(), "still not ready: grant missing");

    // The grant is back: the binlog path resumes by itself and the relay is ready.
    outbox.exec(&format!("GRANT REPLICATION SLAVE ON *.* TO '{}'@'127.0.0.1'", user.name)).await;
    relay.wait_readiness(true, Duration::from_secs(30)).await;
    outbox.insert_tx(&events.rows("k", 150..200)).await;
    scenario.all_sent(200).await;
    assert_eq!(relay.stop(), Some(0));

    // A fresh consumer sees every event of the test, none lost, and none twice: the
    // binlog path, resuming, skipped what the sweep sent while it had taken over.
    let relay = scenario.relay_with(&options).await;
    let collector = Collector::start(&stack.namesrv, &events.topic, &unique("revoke_consumer")).await;
    let deliveries = consumed_all(&collector, events, 200, Duration::from_secs(120)).await;
    let doubled = stored_twice(&deliveries);
    assert!(doubled.is_empty(), "{} events published twice, e.g. {:?}", doubled.len(), doubled.first());
    scenario.finish(relay).await;
    collector.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "fault-injection"), ignore = "needs --features fault-injection (scripts/test enables it)")]
async fn a_panicking_lane_stops_the_relay_with_exit_1_and_a_restart_loses_nothing() {
    let scenario = Scenario::new("panic").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let options = scenario.options();
    let mut relay = scenario.relay_with(&options.clone().env("OUTBOX_RELAY_FAULT_LANE_PANIC_AFTER", 100)).await;
    for key in 0..6 {
        outbox.insert_tx(&events.rows(&format!("key-{key}"), 0..50)).await;
    }
    assert_eq!(relay.wait_exit(Duration::from_secs(60)).await, Some(1), "a panic is a bug: exit 1");
    let log = relay.log_text();
    assert!(
        log.lines().any(|l| l.contains("ERROR") && l.contains("task lane panicked") && l.contains("injected fault")),
        "one line names the task and the panic:\n{log}"
    );
    assert!(log.contains("final checkpoint written"), "it drained and checkpointed before exiting:\n{log}");

    let relay = scenario.relay_with(&options).await;
    scenario.all_sent(300).await;
    let collector = Collector::start(&stack.namesrv, &events.topic, &unique("panic_consumer")).await;
    let deliveries = consumed_all(&collector, events, 300, Duration::from_secs(120)).await;
    assert_eq!(delivery_counts(&deliveries).len(), 300, "every event reached the broker");
    scenario.finish(relay).await;
    collector.shutdown().await;
}

/// Memory the allocator gave back and touches again would otherwise come back as
/// whole 2 MiB pages for the kernel to zero. The relay inherits this process's
/// setting, so the test first makes sure huge pages are on here and that mimalloc is
/// not told to turn them off: only the relay itself can have turned them off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_runs_without_transparent_huge_pages() {
    assert_eq!(thp_enabled("self"), Some(true), "this test needs a kernel and a runner with transparent huge pages");
    assert!(std::env::var_os("MIMALLOC_ALLOW_THP").is_none(), "MIMALLOC_ALLOW_THP would turn them off for the relay");
    let scenario = Scenario::new("thp").await;
    let relay = scenario.relay().await;
    assert_eq!(thp_enabled(&relay.pid().to_string()), Some(false), "THP_enabled is 0 for the relay");
    scenario.finish(relay).await;
}

/// The `THP_enabled` line of `/proc/{process}/status`; `None` when the kernel has none.
fn thp_enabled(process: &str) -> Option<bool> {
    let status = std::fs::read_to_string(format!("/proc/{process}/status")).expect("a /proc status");
    let value = status.lines().find_map(|line| line.strip_prefix("THP_enabled:"))?;
    Some(value.trim() == "1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_in_binlog_mode_drains_checkpoints_and_leaves_nothing_behind() {
    sigterm_under_load(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_in_poll_mode_hands_every_claim_back() {
    // Small claims every 50 ms: at SIGTERM there are rows SENDING in the lanes.
    sigterm_under_load(&[
        ("OUTBOX_RELAY__MODE", "poll"),
        ("OUTBOX_RELAY__SWEEP__INTERVAL_MS", "50"),
        ("OUTBOX_RELAY__SWEEP__BATCH", "20"),
    ])
    .await;
}

/// SIGTERM while rows arrive: exit 0 within the drain timeout, every task joined, the
/// producer shut down, no row left SENDING, and after a restart the broker holds
/// exactly one message per row (nothing acknowledged was sent again, nothing lost).
async fn sigterm_under_load(settings: &[(&str, &str)]) {
    let scenario = Scenario::new("sigterm").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let options = settings.iter().fold(scenario.options(), |o, (k, v)| o.env(k, v));
    let mut relay = scenario.relay_with(&options).await;

    // A steady load, in small transactions, while the relay is stopped.
    let writer = tokio::spawn({
        let (pool, table) = (outbox.pool.clone(), outbox.table.clone());
        let rows: Vec<_> = (0..2_000).map(|seq| events.row(&format!("key-{}", seq % 20), seq)).collect();
        async move {
            let outbox = TestOutbox { pool, table };
            for chunk in rows.chunks(20) {
                outbox.insert_tx(chunk).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    eventually("the first rows SENT", Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sent).await >= 200).then_some(())
    })
    .await;
    let stopping = tokio::time::Instant::now();
    assert_eq!(relay.stop(), Some(0), "SIGTERM is a clean stop");
    assert!(stopping.elapsed() < Duration::from_secs(15), "stopped within the drain timeout");
    let log = relay.log_text();
    for line in ["every relay task has stopped", "RocketMQ producer shut down"] {
        assert!(log.contains(line), "the log says {line:?}:\n{log}");
    }
    assert_eq!(outbox.count_status(RowStatus::Sending).await, 0, "no row left SENDING");
    writer.await.expect("writer");

    let relay = scenario.relay_with(&options).await;
    all_sent(outbox, 2_000, Duration::from_secs(120)).await;
    let producer = stack.producer("sigterm_count").await;
    let stored = eventually("the topic's stored count", Duration::from_secs(30), || async {
        producer.stored_count(&events.topic).await.ok().filter(|&n| n >= 2_000)
    })
    .await;
    // In binlog mode only a final checkpoint at the end of what was acknowledged keeps
    // the restart from sending anything again.
    assert_eq!(stored, 2_000, "no event was sent twice across a graceful stop");
    scenario.finish(relay).await;
    producer.shutdown().await;
}

/// A relay whose sweep picks up a row left PENDING within about a second.
fn quick_sweep(options: RelayOptions) -> RelayOptions {
    options.env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 300).env("OUTBOX_RELAY__SWEEP__GRACE_MS", 500)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_back_that_changes_a_row_fewer_is_reported_and_the_row_published_once_more_in_binlog_mode() {
    short_write_back(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_back_that_changes_a_row_fewer_gives_the_claim_back_at_once_in_poll_mode() {
    short_write_back(&[("OUTBOX_RELAY__MODE", "poll")]).await;
}

/// The first SENT write-back leaves its first row out (a test hook), so it changes one
/// row fewer than it was given: the miss is counted and logged with the row's id, and
/// the row is published once more at most: still PENDING in binlog mode, and in poll
/// mode the live leader's own claim, put back to PENDING within a second rather than
/// left SENDING until the term ends.
async fn short_write_back(settings: &[(&str, &str)]) {
    let scenario = Scenario::consumed("short_write").await;
    let Scenario { outbox, events, .. } = &scenario;
    let options = settings
        .iter()
        .fold(quick_sweep(scenario.options()), |o, (k, v)| o.env(k, v))
        .env("OUTBOX_RELAY_FAULT_SENT_WRITE_SHORT_AT", 1);
    let relay = scenario.relay_with(&options).await;
    outbox.insert_tx(&events.rows("k", 0..10)).await;
    scenario.all_sent(10).await;
    assert_eq!(relay.metric(r#"relay_write_misses_total{miss="sent_unchanged"}"#), 1.0, "the miss is counted");
    let first = outbox.id_of(&events.id("k", 0)).await;
    assert!(relay.log_text().contains(&format!("ids=[{first}")), "the miss is logged with the batch's ids");
    let deliveries = scenario.received(10).await;
    let counts = delivery_counts(&deliveries);
    assert!(counts.values().all(|&n| n <= 2), "an event published more than once more: {counts:?}");
    assert_eq!(outbox.count_status(RowStatus::Sending).await, 0, "no row left SENDING");
    scenario.finish(relay).await;
}

/// A SENT write-back that panics (a test hook) is a bug like any panicking task: the
/// relay names the rows and stops with exit code 1; after a restart every row is SENT
/// and no event was published more than once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_back_that_panics_names_its_rows_and_stops_the_relay_and_a_restart_loses_nothing() {
    let scenario = Scenario::consumed("panicked_write").await;
    let Scenario { outbox, events, .. } = &scenario;
    let options = quick_sweep(scenario.options());
    let mut relay = scenario.relay_with(&options.clone().env("OUTBOX_RELAY_FAULT_SENT_WRITE_PANIC_AT", 1)).await;
    outbox.insert_tx(&events.rows("k", 0..10)).await;
    assert_eq!(relay.wait_exit(Duration::from_secs(60)).await, Some(1), "a panic is exit code 1");
    let first = outbox.id_of(&events.id("k", 0)).await;
    let log = relay.log_text();
    assert!(log.contains("a SENT write-back panicked") && log.contains(&format!("ids=[{first}")), "{log}");

    let relay = scenario.relay_with(&options).await;
    scenario.all_sent(10).await;
    let deliveries = scenario.received(10).await;
    let counts = delivery_counts(&deliveries);
    assert!(counts.values().all(|&n| n <= 2), "an event published more than once more: {counts:?}");
    scenario.finish(relay).await;
}
