//! Per-key order and "one bad event fails alone", against the real stack: a refused
//! batch is split so only the bad event fails; a FAILED event holds its key (or not,
//! by policy) until an operator releases it; a transaction held open past the
//! sweep's grace does not let the sweep reorder its key; SENDING rows without a
//! lease come back; a row that cannot be read fails alone.
#![recursion_limit = "512"]

mod common;

use std::time::Duration;

use common::events::{delivery_counts, Events};
use common::outbox::{Row, TestOutbox};
use common::relay::RelayOptions;
use common::scenario::Scenario;
use common::{eventually, throughout};
use mysql_async::prelude::Queryable;
use outbox_kit::RowStatus;

/// Over the broker's 4 MiB message limit.
const TOO_LARGE: usize = 5 * 1024 * 1024;

fn oversized(events: &Events, key: &str, seq: usize) -> Row {
    let mut row = events.row(key, seq);
    row.payload = format!(r#"{{"pad":"{}"}}"#, "x".repeat(TOO_LARGE));
    row
}

/// `status` of the row of `event_id`.
async fn status_of(outbox: &TestOutbox, event_id: &str) -> Option<u8> {
    outbox.statuses().await.get(event_id).map(|(status, _)| *status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_the_broker_refuses_for_one_event_fails_that_event_alone() {
    let scenario = Scenario::consumed("split").await;
    let Scenario { outbox, events, .. } = &scenario;
    // The relay believes in a larger limit than the broker's, so the whole batch of 64
    // goes to the broker, which refuses it: only splitting finds the bad event.
    let options = scenario
        .options()
        .env("OUTBOX_RELAY__ROCKETMQ__MAX_MESSAGE_BYTES", 64 * 1024 * 1024)
        .env("OUTBOX_RELAY__RETRY__FAILED_KEY_POLICY", "continue")
        .env("OUTBOX_RELAY__LANES__LINGER_MS", 200);
    let relay = scenario.relay_with(&options).await;
    let mut rows = events.rows("k", 0..64);
    rows[31] = oversized(events, "k", 31);
    outbox.insert_tx(&rows).await;
    eventually("63 rows SENT and one FAILED", Duration::from_secs(60), || async {
        let (sent, failed) = (outbox.count_status(RowStatus::Sent).await, outbox.count_status(RowStatus::Failed).await);
        (sent + failed == 64).then_some((sent, failed))
    })
    .await;
    assert_eq!(outbox.count_status(RowStatus::Failed).await, 1, "exactly one row FAILED");
    assert_eq!(status_of(outbox, &events.id("k", 31)).await, Some(RowStatus::Failed.code()), "the oversized one");
    let deliveries = scenario.received(63).await;
    scenario.assert_per_key_order(&deliveries).await;
    scenario.finish(relay).await;
}

/// The relay for the policy tests: the sweep comes often and leaves rows to the
/// binlog path only briefly, so released keys are delivered within seconds.
fn policy_relay(scenario: &Scenario, policy: &str) -> RelayOptions {
    scenario
        .options()
        .env("OUTBOX_RELAY__RETRY__FAILED_KEY_POLICY", policy)
        .env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 300)
        .env("OUTBOX_RELAY__SWEEP__GRACE_MS", 500)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_hold_a_failed_event_holds_its_key_until_skipped_or_requeued_while_other_keys_flow() {
    let scenario = Scenario::consumed("hold").await;
    let Scenario { outbox, events, .. } = &scenario;
    let relay = scenario.relay_with(&policy_relay(&scenario, "hold")).await;
    // Key "bad" fails at seq 1 (too large); key "fix" fails at seq 1 too.
    let mut rows = events.rows("bad", 0..5);
    rows[1] = oversized(events, "bad", 1);
    let mut fix = events.rows("fix", 0..5);
    fix[1] = oversized(events, "fix", 1);
    rows.extend(fix);
    outbox.insert_tx(&rows).await;
    outbox.insert_tx(&events.rows("good", 0..20)).await;
    eventually("the other key flows", Duration::from_secs(60), || async {
        let statuses = outbox.statuses().await;
        let good = (0..20).all(|seq| statuses.get(&events.id("good", seq)).is_some_and(|s| s.0 == 2));
        good.then_some(())
    })
    .await;
    eventually("both bad events FAILED", Duration::from_secs(30), || async {
        (outbox.count_status(RowStatus::Failed).await == 2).then_some(())
    })
    .await;
    // Held: nothing after a FAILED event of its key is delivered, even after several sweeps.
    outbox.insert_tx(&[events.row("bad", 5), events.row("fix", 5)]).await;
    eventually("the held keys are counted", Duration::from_secs(10), || async {
        (relay.metric("relay_held_keys") == 2.0).then_some(())
    })
    .await;
    // Watched over several sweep periods and fences: nothing behind a FAILED event moves.
    throughout("the rows behind the FAILED events stay PENDING", Duration::from_secs(3), || async {
        let statuses = outbox.statuses().await;
        let held = ["bad", "fix"].iter().flat_map(|key| (2..6).map(move |seq| events.id(key, seq)));
        held.filter(|id| statuses.get(id).map(|s| s.0) != Some(0)).collect::<Vec<_>>()
    })
    .await;

    // An operator skips "bad"'s event and fixes then requeues "fix"'s.
    let table = outbox.table.qualified();
    let skipped = RowStatus::Skipped.code();
    outbox.exec(&format!("UPDATE {table} SET status = {skipped} WHERE event_id = '{}'", events.id("bad", 1))).await;
    outbox
        .exec(&format!(
            "UPDATE {table} SET status = 0, payload = '{{}}', retry_count = 0, next_retry_at = NOW(3) WHERE event_id = '{}'",
            events.id("fix", 1)
        ))
        .await;
    // New events right after the release must not overtake the rows left behind.
    outbox.insert_tx(&[events.row("bad", 6), events.row("fix", 6)]).await;
    eventually("every released row SENT", Duration::from_secs(60), || async {
        let statuses = outbox.statuses().await;
        let bad = [0, 2, 3, 4, 5, 6].iter().all(|&seq| statuses.get(&events.id("bad", seq)).is_some_and(|s| s.0 == 2));
        let fix = (0..7).all(|seq| statuses.get(&events.id("fix", seq)).is_some_and(|s| s.0 == 2));
        (bad && fix).then_some(())
    })
    .await;
    let deliveries = scenario.received(6 + 7 + 20).await;
    scenario.assert_per_key_order(&deliveries).await;
    // The sweep brings the held keys in line with the table every period (300 ms here).
    eventually("the held keys released", Duration::from_secs(10), || async {
        (relay.metric("relay_held_keys") == 0.0).then_some(())
    })
    .await;
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_continue_a_failed_event_does_not_hold_its_key() {
    let scenario = Scenario::new("continue").await;
    let Scenario { outbox, events, .. } = &scenario;
    let relay = scenario.relay_with(&policy_relay(&scenario, "continue")).await;
    let mut rows = events.rows("bad", 0..5);
    rows[1] = oversized(events, "bad", 1);
    outbox.insert_tx(&rows).await;
    outbox.insert_tx(&[events.row("bad", 5)]).await;
    eventually("the later events of the key SENT", Duration::from_secs(60), || async {
        let statuses = outbox.statuses().await;
        let later = [0, 2, 3, 4, 5].iter().all(|&seq| statuses.get(&events.id("bad", seq)).is_some_and(|s| s.0 == 2));
        later.then_some(())
    })
    .await;
    assert_eq!(status_of(outbox, &events.id("bad", 1)).await, Some(RowStatus::Failed.code()));
    assert_eq!(relay.metric("relay_held_keys"), 0.0);
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_held_open_past_the_grace_does_not_let_the_sweep_reorder_its_key() {
    let scenario = Scenario::consumed("longtx").await;
    let Scenario { outbox, events, .. } = &scenario;
    // A sweep every 100 ms that leaves only 500 ms to the binlog path: without the
    // fence it would take the long transaction's rows as soon as they commit.
    let options =
        scenario.options().env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 100).env("OUTBOX_RELAY__SWEEP__GRACE_MS", 500);
    let relay = scenario.relay_with(&options).await;

    // The long transaction inserts first (so its rows have the lowest ids and the
    // oldest created_at) but commits last: its rows come last in commit order.
    let (last, others) = (40, 0..40);
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let mut long = conn.start_transaction(Default::default()).await.expect("begin");
    let (sql, params) = outbox.insert_params(&events.rows("K", last..last + 5));
    long.exec_drop(sql, params).await.expect("insert in the long transaction");
    let open_until = tokio::time::Instant::now() + Duration::from_millis(2 * 500 + 1_000);
    for seq in others {
        outbox.insert_tx(&[events.row("K", seq)]).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    tokio::time::sleep_until(open_until).await; // open for more than twice the grace
    long.commit().await.expect("commit the long transaction");

    scenario.all_sent(45).await;
    let deliveries = scenario.received(45).await;
    scenario.assert_per_key_order(&deliveries).await;
    let twice: Vec<_> = delivery_counts(&deliveries).into_iter().filter(|(_, n)| *n > 1).collect();
    assert!(twice.is_empty(), "every row delivered once: {twice:?}");
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sending_row_without_a_lease_comes_back_and_an_unreadable_row_fails_alone() {
    let scenario = Scenario::new("lease").await;
    let Scenario { outbox, events, .. } = &scenario;
    outbox.insert_tx(&events.rows("k", 0..10)).await;
    let table = outbox.table.qualified();
    // Left SENDING without a lease (a relay that crashed in a table without leases),
    // and a retry count no relay can read.
    outbox
        .exec(&format!(
            "UPDATE {table} SET status = 1, owner = 'dead', lease_until = NULL WHERE event_id = '{}'",
            events.id("k", 3)
        ))
        .await;
    outbox.exec(&format!("UPDATE {table} SET retry_count = -1 WHERE event_id = '{}'", events.id("k", 7))).await;
    let options = scenario
        .options()
        .env("OUTBOX_RELAY__MODE", "poll")
        .env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 200)
        .env("OUTBOX_RELAY__SWEEP__LEASE_MS", 2_000)
        .env("OUTBOX_RELAY__RETRY__FAILED_KEY_POLICY", "continue");
    let started = tokio::time::Instant::now();
    let relay = scenario.relay_with(&options).await;
    eventually("the row without a lease SENT", Duration::from_secs(30), || async {
        (status_of(outbox, &events.id("k", 3)).await == Some(2)).then_some(())
    })
    .await;
    assert!(started.elapsed() >= Duration::from_secs(2), "it came back only after a lease: {:?}", started.elapsed());
    eventually("every other readable row SENT", Duration::from_secs(30), || async {
        (outbox.count_status(RowStatus::Sent).await == 9).then_some(())
    })
    .await;
    assert_eq!(status_of(outbox, &events.id("k", 7)).await, Some(RowStatus::Failed.code()), "the unreadable row");
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let reason: Option<String> = conn
        .exec_first(format!("SELECT last_error FROM {table} WHERE event_id = ?"), (events.id("k", 7),))
        .await
        .expect("last_error");
    assert!(reason.is_some_and(|r| r.contains("cannot be read")), "a readable last_error");
    scenario.finish(relay).await;
}
