//! The operator commands against the real stack while a relay runs: `status` reads
//! the leader, position and rows from the primary; `requeue` and
//! `skip` change only FAILED rows, write who/why/what to `outbox_relay_audit` and are
//! no-ops when repeated; `cleanup` deletes exactly the SENT rows past the retention;
//! `reconcile` lists exactly the events on one side only; `position set` is refused
//! while a relay leads unless forced, and a relay resumes from the position set.
#![recursion_limit = "512"]

mod common;

use std::collections::BTreeSet;
use std::process::Output;
use std::time::Duration;

use common::command::{cli, cli_with, stdout};
use common::events::{consumed_all, Events};
use common::load::Load;
use common::outbox::TestOutbox;
use common::relay::{RelayOptions, RelayProcess};
use common::scenario::Scenario;
use common::{eventually, unique, Stack, TEST_TOPIC};
use mysql_async::prelude::Queryable;
use outbox_kit::RowStatus;
use outbox_relay::config::DbUrl;

/// A relay whose sweep picks up requeued rows within about a second.
fn quick_sweep(outbox: &TestOutbox) -> RelayOptions {
    RelayOptions::new(outbox.name())
        .env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 300)
        .env("OUTBOX_RELAY__SWEEP__GRACE_MS", 500)
}

/// The audit rows about `outbox`'s row `id`: (operator, reason, action, old, new).
async fn audit_of(outbox: &TestOutbox, id: u64) -> Vec<(String, String, String, String, String)> {
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    conn.exec(
        "SELECT operator, reason, action, old_state, new_state FROM app.outbox_relay_audit WHERE target LIKE ? ORDER BY id",
        (format!("{} id={id} %", outbox.table.qualified()),),
    )
    .await
    .expect("audit rows")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_sends_a_failed_row_again_is_audited_and_a_second_call_changes_nothing() {
    let scenario = Scenario::new("requeue").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    // Two rows FAILED before any relay runs: a relay that sent them could still write
    // a late SENT back over a status set by hand (a SEND_OK outranks a FAILED mark).
    outbox.insert_tx(&events.rows("k", 0..3)).await;
    let (first, second) = (outbox.id_of(&events.id("k", 0)).await, outbox.id_of(&events.id("k", 1)).await);
    outbox
        .exec(&format!(
            "UPDATE {} SET status = 3, last_error = 'broker said no' WHERE id IN ({first}, {second})",
            outbox.table.qualified()
        ))
        .await;
    let relay = scenario.relay_with(&quick_sweep(outbox)).await;

    let listed = stdout(&cli(stack, outbox, &["failed", "list", "--json"]));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&listed).expect("JSON list");
    assert_eq!(rows.len(), 2, "{listed}");
    assert_eq!(rows[0]["last_error"], "broker said no");

    let dry = stdout(&cli(
        stack,
        outbox,
        &["requeue", "--id", &first.to_string(), "--operator", "alice", "--reason", "INC-42", "--dry-run"],
    ));
    assert!(dry.contains("dry run: would requeue 1 rows"), "{dry}");
    assert_eq!(outbox.status_of(first).await, RowStatus::Failed.code(), "a dry run changes nothing");
    assert!(audit_of(outbox, first).await.is_empty(), "and audits nothing");

    let done = stdout(&cli(
        stack,
        outbox,
        &["requeue", "--id", &first.to_string(), "--id", "999999999", "--operator", "alice", "--reason", "INC-42"],
    ));
    assert!(done.contains("requeue: 1 rows changed") && done.contains("not FAILED, left alone: 999999999"), "{done}");
    let audit = audit_of(outbox, first).await;
    let before = "FAILED retry_count=0 last_error=broker said no";
    assert_eq!(
        audit,
        [("alice".into(), "INC-42".into(), "requeue".into(), before.into(), "PENDING".into())],
        "who, why, what before and after"
    );
    eventually("the requeued row SENT again", Duration::from_secs(60), || async {
        (outbox.status_of(first).await == RowStatus::Sent.code()).then_some(())
    })
    .await;
    let again = stdout(&cli(
        stack,
        outbox,
        &["requeue", "--id", &first.to_string(), "--operator", "alice", "--reason", "INC-42"],
    ));
    assert!(again.contains("nothing to do"), "{again}");
    assert_eq!(audit_of(outbox, first).await.len(), 1, "a repeated call writes no audit row");
    assert_eq!(outbox.status_of(second).await, RowStatus::Failed.code(), "only the given row was requeued");
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_releases_a_held_key_and_a_second_call_changes_nothing() {
    let scenario = Scenario::new("skip").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    // A 2 KiB payload over a 1 KiB limit is FAILED at once; under the hold policy its
    // key's later events wait behind it.
    let options = quick_sweep(outbox).env("OUTBOX_RELAY__ROCKETMQ__MAX_MESSAGE_BYTES", 1_024);
    let relay = scenario.relay_with(&options).await;
    let mut poison = events.row("k", 0);
    poison.payload = format!(r#"{{"pad":"{}"}}"#, "x".repeat(2_048));
    outbox.insert_tx(&[poison]).await;
    let poisoned = outbox.id_of(&events.id("k", 0)).await;
    eventually("the oversized row FAILED", Duration::from_secs(60), || async {
        (outbox.status_of(poisoned).await == RowStatus::Failed.code()).then_some(())
    })
    .await;
    outbox.insert_tx(&events.rows("k", 1..4)).await;
    outbox.insert_tx(&events.rows("other", 0..2)).await;
    eventually("the other key's rows SENT", Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sent).await == 2).then_some(())
    })
    .await;
    assert_eq!(outbox.count_status(RowStatus::Pending).await, 3, "the held key's rows wait");

    let done = stdout(&cli(
        stack,
        outbox,
        &["skip", "--id", &poisoned.to_string(), "--operator", "bob", "--reason", "bad payload"],
    ));
    assert!(done.contains("skip: 1 rows changed"), "{done}");
    let audit = audit_of(outbox, poisoned).await;
    assert_eq!(audit.len(), 1, "{audit:?}");
    let (who, why, action, before, after) = &audit[0];
    assert_eq!(
        (who.as_str(), why.as_str(), action.as_str(), after.as_str()),
        ("bob", "bad payload", "skip", "SKIPPED")
    );
    assert!(before.starts_with("FAILED retry_count=1 last_error=") && before.len() > 40, "why it failed: {before}");
    eventually("the held key's rows SENT after the skip", Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sent).await == 5).then_some(())
    })
    .await;
    let again = stdout(&cli(
        stack,
        outbox,
        &["skip", "--id", &poisoned.to_string(), "--operator", "bob", "--reason", "bad payload"],
    ));
    assert!(again.contains("nothing to do"), "{again}");
    assert_eq!(outbox.status_of(poisoned).await, RowStatus::Skipped.code());
    assert_eq!(audit_of(outbox, poisoned).await.len(), 1);
    scenario.finish(relay).await;
}

/// What holds a key in [`held_key_across_a_crash`], and how it is released.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Blocker {
    /// An oversized event FAILED (hold policy), then skipped.
    FailedThenSkipped,
    /// An oversized event FAILED (hold policy), then made smaller and requeued.
    FailedThenRequeued,
    /// A retry booked for later (as a lane books it after an unknown error), which
    /// comes due.
    BookedRetry,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_held_behind_a_failed_event_stays_held_across_a_crash_and_flows_within_5_s_of_a_skip() {
    held_key_across_a_crash(Blocker::FailedThenSkipped, "hold").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_held_behind_a_failed_event_stays_held_across_a_crash_and_flows_within_5_s_of_a_requeue() {
    held_key_across_a_crash(Blocker::FailedThenRequeued, "hold").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_behind_a_booked_retry_stays_held_across_a_crash_under_hold() {
    held_key_across_a_crash(Blocker::BookedRetry, "hold").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_behind_a_booked_retry_stays_held_across_a_crash_under_continue() {
    held_key_across_a_crash(Blocker::BookedRetry, "continue").await;
}

/// How long a booked retry waits in [`held_key_across_a_crash`]: past the restart.
const BOOKED_RETRY: Duration = Duration::from_secs(40);

/// A key blocked by its first event, later events of it left behind, the relay killed
/// (SIGKILL) and started again, one more event of the key after the restart: none of
/// the later events is sent while the first one blocks, though another key flows;
/// once it is released they all arrive, in order, within 5 s. The sweep keeps its
/// slow defaults (a 60 s grace), so only the release can make them flow that fast.
async fn held_key_across_a_crash(blocker: Blocker, policy: &str) {
    let scenario = Scenario::consumed("held").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let options = held_key_relay(&scenario, policy);
    let relay = scenario.relay_with(&options).await;
    let head = block_key(outbox, events, blocker).await;
    let sent_before = leave_rows_behind(&relay, outbox, events, head, blocker).await;
    relay.kill();
    let relay = scenario.relay_with(&options).await;
    outbox.insert_tx(&[events.row("k", 4), events.row("other", 2)]).await;
    eventually("the other key's row after the restart SENT", Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sent).await == sent_before + 3).then_some(())
    })
    .await;
    for seq in 1..5 {
        let id = outbox.id_of(&events.id("k", seq)).await;
        assert_eq!(outbox.status_of(id).await, RowStatus::Pending.code(), "k-{seq} waits behind the blocked event");
    }

    let released = release(stack, outbox, head, blocker).await;
    delivered_in_order_within_5_s_of(released, &scenario, blocker).await;
    scenario.finish(relay).await;
}

/// The relay options of the held-key tests: a 1 KiB message limit (a larger event
/// FAILS at once), the failed-key `policy`, a sweep every second and its slow default
/// grace (60 s), so only a release can make the rows left behind flow within seconds.
fn held_key_relay(scenario: &Scenario, policy: &str) -> RelayOptions {
    scenario
        .options()
        .env("OUTBOX_RELAY__ROCKETMQ__MAX_MESSAGE_BYTES", 1_024)
        .env("OUTBOX_RELAY__RETRY__FAILED_KEY_POLICY", policy)
        .env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 1_000)
}

/// With `k`'s head blocking it (for a booked retry: booked now, for [`BOOKED_RETRY`]),
/// commits `k` 1..4 (left behind) and two rows of another key, and waits until those
/// are SENT. The count of SENT rows before them.
async fn leave_rows_behind(
    relay: &RelayProcess,
    outbox: &TestOutbox,
    events: &Events,
    head: u64,
    blocker: Blocker,
) -> usize {
    if blocker == Blocker::BookedRetry {
        book_retry(outbox, head, BOOKED_RETRY).await;
        eventually("the key held behind its booked retry", Duration::from_secs(30), || async {
            (relay.metric("relay_held_keys") >= 1.0).then_some(())
        })
        .await;
    }
    outbox.insert_tx(&events.rows("k", 1..4)).await;
    outbox.insert_tx(&events.rows("other", 0..2)).await;
    let sent_before = outbox.count_status(RowStatus::Sent).await;
    eventually("the other key's rows SENT", Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sent).await == sent_before + 2).then_some(())
    })
    .await;
    sent_before
}

/// `k` 1..4 are SENT within 5 s of `released`, and every key's first deliveries
/// arrived in commit order (the consumer of the scenario's topic is the judge).
async fn delivered_in_order_within_5_s_of(released: tokio::time::Instant, scenario: &Scenario, blocker: Blocker) {
    let Scenario { outbox, events, .. } = scenario;
    let within = Duration::from_secs(5).saturating_sub(released.elapsed());
    eventually("the held key's events SENT within 5 s of the release", within, || async {
        let mut sent = 0;
        for seq in 1..5 {
            sent +=
                usize::from(outbox.status_of(outbox.id_of(&events.id("k", seq)).await).await == RowStatus::Sent.code());
        }
        (sent == 4).then_some(())
    })
    .await;
    let expected = if blocker == Blocker::FailedThenSkipped { 7 } else { 8 };
    let deliveries = scenario.received(expected).await;
    scenario.assert_per_key_order(&deliveries).await;
}

/// A key held behind its FAILED head whose next rows come from a session whose clock
/// reads hours ahead (a client in another time zone, or the server's zone changed
/// under it): their `next_retry_at` default is that clock, but a row never tried is
/// due at once, so once the head is requeued they follow within 5 s, in order (they
/// are not taken for retries booked hours ahead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_a_session_hours_ahead_wrote_follow_their_requeued_head_within_5_s() {
    let scenario = Scenario::consumed("zone_ahead").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let relay = scenario.relay_with(&held_key_relay(&scenario, "hold")).await;
    let blocker = Blocker::FailedThenRequeued;
    let head = block_key(outbox, events, blocker).await;
    outbox.insert_tx_in_zone(&events.rows("k", 1..4), "+13:00").await;
    outbox.insert_tx(&events.rows("other", 0..2)).await;
    eventually("the other key's rows SENT", Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sent).await == 2).then_some(())
    })
    .await;
    let released = release(stack, outbox, head, blocker).await;
    outbox.insert_tx(&[events.row("k", 4), events.row("other", 2)]).await;
    delivered_in_order_within_5_s_of(released, &scenario, blocker).await;
    scenario.finish(relay).await;
}

/// How the relay is out of the way while its held key is released.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Away {
    /// Paused by `outbox-relay pause`, resumed after the release.
    Paused,
    /// Killed (SIGKILL), started again after the release.
    Killed,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_event_skipped_while_paused_releases_its_key_in_order_within_5_s_of_the_resume() {
    released_while_away(Blocker::FailedThenSkipped, Away::Paused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_event_requeued_while_paused_releases_its_key_in_order_within_5_s_of_the_resume() {
    released_while_away(Blocker::FailedThenRequeued, Away::Paused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_event_skipped_while_the_relay_is_down_releases_its_key_in_order_within_5_s_of_the_restart() {
    released_while_away(Blocker::FailedThenSkipped, Away::Killed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_event_requeued_while_the_relay_is_down_releases_its_key_in_order_within_5_s_of_the_restart() {
    released_while_away(Blocker::FailedThenRequeued, Away::Killed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_comes_due_while_the_relay_is_down_releases_its_key_in_order_within_5_s_of_the_restart() {
    released_while_away(Blocker::BookedRetry, Away::Killed).await;
}

/// A key blocked by its head with rows left behind; the relay paused or killed; the
/// key released meanwhile (skipped, requeued, or a retry booked 1 s ahead at the kill
/// comes due); the relay resumed or started again, and a new event of the key
/// committed at once: the new pipeline holds the key until the rows left behind are
/// sent, so the new event does not overtake them, and they go within 5 s.
async fn released_while_away(blocker: Blocker, away: Away) {
    let scenario = Scenario::consumed("away").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let options = held_key_relay(&scenario, "hold");
    let mut relay = scenario.relay_with(&options).await;
    let head = block_key(outbox, events, blocker).await;
    leave_rows_behind(&relay, outbox, events, head, blocker).await;
    // The binlog path will not read the rows left behind again.
    checkpoint_past_now(stack, outbox).await;
    let by = ["--operator", "dave", "--reason", "INC-9"];
    let relay = match away {
        Away::Paused => {
            cli(stack, outbox, &[&["pause"][..], &by].concat());
            relay.wait_readiness_with(false, "paused by dave", Duration::from_secs(30)).await;
            release_now(stack, outbox, head, blocker).await;
            cli(stack, outbox, &[&["resume"][..], &by].concat());
            relay.wait_ready().await;
            relay
        }
        Away::Killed => {
            if blocker == Blocker::BookedRetry {
                book_retry(outbox, head, Duration::from_secs(1)).await;
            }
            relay.kill();
            release_now(stack, outbox, head, blocker).await;
            scenario.relay_with(&options).await
        }
    };
    let released = tokio::time::Instant::now();
    outbox.insert_tx(&[events.row("k", 4), events.row("other", 2)]).await;
    delivered_in_order_within_5_s_of(released, &scenario, blocker).await;
    scenario.finish(relay).await;
}

/// Skips, or fixes and requeues, the FAILED head; for a booked retry, waits until it
/// is due.
async fn release_now(stack: &Stack, outbox: &TestOutbox, head: u64, blocker: Blocker) {
    let by = ["--operator", "dave", "--reason", "INC-9"];
    match blocker {
        Blocker::FailedThenSkipped => {
            cli(stack, outbox, &[&["skip", "--id", &head.to_string()][..], &by].concat());
        }
        Blocker::FailedThenRequeued => {
            outbox.exec(&format!("UPDATE {} SET payload = '{{}}' WHERE id = {head}", outbox.table.qualified())).await;
            cli(stack, outbox, &[&["requeue", "--id", &head.to_string()][..], &by].concat());
        }
        Blocker::BookedRetry => {
            eventually("the booked retry due", Duration::from_secs(10), || async {
                outbox.due(head).await.then_some(())
            })
            .await;
        }
    }
}

/// Makes `k`'s first event the one its key waits behind; its id. A FAILED one fails
/// for good at once (over the 1 KiB limit); for a booked retry it is sent first, and
/// the retry is booked on it afterwards.
async fn block_key(outbox: &TestOutbox, events: &Events, blocker: Blocker) -> u64 {
    let mut head = events.row("k", 0);
    if blocker != Blocker::BookedRetry {
        head.payload = format!(r#"{{"pad":"{}"}}"#, "x".repeat(2_048));
    }
    outbox.insert_tx(&[head]).await;
    let id = outbox.id_of(&events.id("k", 0)).await;
    let settled = if blocker == Blocker::BookedRetry { RowStatus::Sent } else { RowStatus::Failed };
    eventually("the key's first event settled", Duration::from_secs(60), || async {
        (outbox.status_of(id).await == settled.code()).then_some(())
    })
    .await;
    id
}

/// Books a retry of row `id` as a lane does after an unknown error (PENDING, one more
/// retry, due `after` from now), as if its send had failed.
async fn book_retry(outbox: &TestOutbox, id: u64, after: Duration) {
    outbox
        .exec(&format!(
            "UPDATE {} SET status = 0, retry_count = retry_count + 1, msg_id = NULL, sent_at = NULL, \
             last_error = 'injected: an unknown send failure', next_retry_at = NOW(3) + INTERVAL {} SECOND WHERE id = {id}",
            outbox.table.qualified(),
            after.as_secs()
        ))
        .await;
}

/// Releases the key: skips or fixes and requeues the FAILED event, or waits for the
/// booked retry to come due and be delivered. When the release happened.
async fn release(stack: &Stack, outbox: &TestOutbox, head: u64, blocker: Blocker) -> tokio::time::Instant {
    if blocker == Blocker::BookedRetry {
        eventually("the booked retry delivered", BOOKED_RETRY * 3, || async {
            (outbox.status_of(head).await == RowStatus::Sent.code()).then_some(())
        })
        .await;
    } else {
        release_now(stack, outbox, head, blocker).await;
    }
    tokio::time::Instant::now()
}

/// Ages the first 25 rows "old" 0..30 (all SENT): 20 delivered 8 days ago, 3 FAILED
/// and 2 PENDING (not due) as old; the last 5 stay recent SENT. Returns their
/// event_id prefix.
async fn age_old_rows(outbox: &TestOutbox, events: &Events) -> String {
    let table = outbox.table.qualified();
    let prefix = events.id("old", 0).trim_end_matches("00000").to_owned();
    for (from, to, set) in [
        (0, 20, "sent_at = NOW(3) - INTERVAL 8 DAY"),
        (20, 23, "status = 3, sent_at = NOW(3) - INTERVAL 8 DAY, created_at = NOW(3) - INTERVAL 8 DAY"),
        (23, 25, "status = 0, retry_count = 1, next_retry_at = NOW(3) + INTERVAL 1 DAY, created_at = NOW(3) - INTERVAL 8 DAY"),
    ] {
        let ids: Vec<String> = (from..to).map(|seq| format!("'{prefix}{seq:05}'")).collect();
        outbox.exec(&format!("UPDATE {table} SET {set} WHERE event_id IN ({})", ids.join(","))).await;
    }
    prefix
}

/// The "old" rows still in the table: (event_id, status) in order.
async fn old_rows_left(outbox: &TestOutbox, prefix: &str) -> Vec<(String, u8)> {
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    conn.query(format!(
        "SELECT event_id, status FROM {} WHERE event_id LIKE '{prefix}%' ORDER BY event_id",
        outbox.table.qualified()
    ))
    .await
    .expect("rows left")
}

/// What a 7-day cleanup leaves of the rows [`age_old_rows`] made: all but the 20 old SENT.
fn rows_left_after_cleanup(prefix: &str) -> Vec<(String, u8)> {
    let status = |seq: usize| match seq {
        20..=22 => 3,
        23 | 24 => 0,
        _ => 2,
    };
    (20..30).map(|seq| (format!("{prefix}{seq:05}"), status(seq))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_deletes_exactly_the_old_sent_rows_in_batches_while_the_relay_runs_under_load() {
    let scenario = Scenario::consumed("cleanup").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let relay = scenario.relay().await;
    outbox.insert_tx(&events.rows("old", 0..30)).await;
    scenario.all_sent(30).await;
    let table = outbox.table.qualified();
    let prefix = age_old_rows(outbox, events).await;
    let load = Load::started(outbox, events, 10, 20).await;

    let output = cli(
        stack,
        outbox,
        &[
            "cleanup",
            "--retention",
            "7d",
            "--batch",
            "7",
            "--pace-ms",
            "20",
            "--operator",
            "carol",
            "--reason",
            "retention",
            "--json",
        ],
    );
    let report: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("JSON report");
    assert_eq!((report["deleted"].as_u64(), report["batches"].as_u64()), (Some(20), Some(3)), "{report}");
    assert_eq!(
        old_rows_left(outbox, &prefix).await,
        rows_left_after_cleanup(&prefix),
        "exactly the old SENT rows are gone"
    );
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let audited: Vec<(String, String)> = conn
        .exec(
            "SELECT operator, result FROM app.outbox_relay_audit WHERE action = 'cleanup' AND target LIKE ? ORDER BY id",
            (format!("{table} %"),),
        )
        .await
        .expect("audit");
    let per_batch: Vec<(String, String)> =
        [7, 7, 6].iter().map(|n| ("carol".to_owned(), format!("deleted {n} rows"))).collect();
    assert_eq!(audited, per_batch, "one audit row per batch, with its count");

    let written = load.finish().await;
    consumed_all(scenario.collector(), events, 30 + written, Duration::from_secs(120)).await;
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_cleans_up_on_its_schedule_audited_as_itself() {
    let scenario = Scenario::new("scheduled").await;
    let Scenario { outbox, events, .. } = &scenario;
    let options = scenario
        .options()
        .env("OUTBOX_RELAY__CLEANUP__INTERVAL_MS", 1_000)
        .env("OUTBOX_RELAY__CLEANUP__RETENTION_SECS", 7 * 86_400)
        .env("OUTBOX_RELAY__CLEANUP__BATCH", 7)
        .env("OUTBOX_RELAY__CLEANUP__PACE_MS", 20);
    let relay = scenario.relay_with(&options).await;
    outbox.insert_tx(&events.rows("old", 0..30)).await;
    scenario.all_sent(30).await;
    let prefix = age_old_rows(outbox, events).await;
    let expected = rows_left_after_cleanup(&prefix);
    eventually("the scheduled cleanup", Duration::from_secs(30), || async {
        (old_rows_left(outbox, &prefix).await == expected).then_some(())
    })
    .await;
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let audited: Vec<(String, String, u64)> = conn
        .exec(
            "SELECT operator, reason, CAST(SUBSTRING_INDEX(SUBSTRING(result, 9), ' ', 1) AS UNSIGNED) \
             FROM app.outbox_relay_audit WHERE action = 'cleanup' AND target LIKE ? ORDER BY id",
            (format!("{} %", outbox.table.qualified()),),
        )
        .await
        .expect("audit");
    assert_eq!(audited.iter().map(|(_, _, n)| n).sum::<u64>(), 20, "every deleted row audited: {audited:?}");
    for (operator, reason, rows) in &audited {
        assert!(operator.contains(&format!(":{}:", relay.pid())), "audited as the relay instance: {operator}");
        assert_eq!(reason, "scheduled cleanup (cleanup.interval_ms)");
        assert!(*rows <= 7, "batches of at most 7: {audited:?}");
    }
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_the_leader_its_position_and_the_rows() {
    let scenario = Scenario::new("status").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let mut relay = scenario.relay().await;
    outbox.insert_tx(&events.rows("k", 0..5)).await;
    scenario.all_sent(5).await;
    let table = outbox.table.qualified();
    outbox.exec(&format!("UPDATE {table} SET status = 3 WHERE event_id = '{}'", events.id("k", 4))).await;
    let term = relay.metric("relay_leader_term") as u64;

    let here = [("OUTBOX_RELAY__HTTP__LISTEN", relay.http_address())];
    let report: serde_json::Value =
        serde_json::from_str(&stdout(&cli_with(stack, outbox, &here, &["status", "--json"]))).expect("JSON");
    let instance = &report["instance"];
    assert_eq!((instance["role"].as_str(), instance["ready"].as_bool()), (Some("leader"), Some(true)), "{report}");
    let gauges: Vec<(String, Option<f64>)> =
        serde_json::from_value(instance["gauges"].clone()).expect("the local relay's gauges, NaN as null");
    let gauge = |name: &str| gauges.iter().find(|(n, _)| n == name).and_then(|(_, value)| *value);
    assert_eq!(gauge("relay_leader_term"), Some(term as f64), "{report}");
    assert!(gauge("relay_binlog_lag_seconds").is_some_and(|lag| lag < 10.0), "a binlog lag: {report}");
    let holder = report["leader"]["holder"].as_str().unwrap_or_default().to_owned();
    assert!(holder.contains(&format!(":{}:", relay.pid())), "the running relay leads: {report}");
    assert_eq!(report["leader"]["term"].as_u64(), Some(term), "{report}");
    assert!(report["leader"]["lease_remaining_ms"].as_i64().unwrap_or(-1) > 0, "{report}");
    assert_eq!(report["rows"], serde_json::json!([["SENT", 4], ["FAILED", 1]]), "{report}");
    assert_eq!(report["failed_keys"].as_u64(), Some(1), "{report}");
    assert!(report["position"]["file"].as_str().is_some_and(|f| f.contains("bin")), "the mirrored position: {report}");
    assert_eq!(report["position"]["term"].as_u64(), Some(term), "{report}");

    assert_eq!(relay.stop(), Some(0));
    let human = stdout(&cli_with(stack, outbox, &here, &["status"]));
    assert!(human.contains("not asked (no relay answers on"), "the stopped relay cannot be asked:\n{human}");
    assert!(human.contains(&format!("none: the lease of term {term} ran out")), "released at the stop:\n{human}");
    assert!(human.contains("SENT 4, FAILED 1"), "{human}");
    scenario.close().await;
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json_of(output: &Output) -> serde_json::Value {
    serde_json::from_str(&stdout(output))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", stdout(output), stderr(output)))
}

/// The event_ids listed under `key` of a `reconcile --json` report.
fn listed(report: &serde_json::Value, key: &str) -> BTreeSet<String> {
    let ids = report[key].as_array().unwrap_or_else(|| panic!("no {key}: {report}"));
    ids.iter().map(|id| id.as_str().unwrap_or_else(|| panic!("not an event_id: {id}")).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_lists_exactly_the_events_sent_but_never_processed_and_processed_but_unknown() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let events = Events { prefix: unique("reconcile"), topic: TEST_TOPIC.to_owned() };
    let table = outbox.table.qualified();
    // The consumer kit's tables in a database of their own, and a copy of its dedup
    // table beside the outbox (where `reconcile` looks by default).
    let kit_db = unique("kit");
    outbox.exec(&format!("CREATE DATABASE `{kit_db}`")).await;
    let kit_url = format!("{}/{kit_db}", stack.root_url.rsplit_once('/').expect("a database in the URL").0);
    let kit = outbox_relay::db::connect("test", &DbUrl::new(&kit_url), 2).await.expect("kit database");
    outbox_kit::consumer::schema::migrate(&kit).await.expect("the kit's tables");
    kit.disconnect().await.ok();
    let dedup = unique("dedup");
    outbox.exec(&format!("CREATE TABLE app.`{dedup}` LIKE `{kit_db}`.event_dedup")).await;

    // 20 rows SENT now, 2 SENT three days ago, 2 PENDING; all but 3, 7 and 11 of the
    // 20 handled; 2 events handled that the outbox never had, and 1 three days ago.
    outbox.insert_tx(&events.rows("k", 0..24)).await;
    outbox.exec(&format!("UPDATE {table} SET status = 2, sent_at = NOW(3), msg_id = 'm'")).await;
    let old: Vec<String> = (20..22).map(|seq| format!("'{}'", events.id("k", seq))).collect();
    outbox
        .exec(&format!("UPDATE {table} SET sent_at = NOW(3) - INTERVAL 3 DAY WHERE event_id IN ({})", old.join(",")))
        .await;
    let pending: Vec<String> = (22..24).map(|seq| format!("'{}'", events.id("k", seq))).collect();
    outbox
        .exec(&format!("UPDATE {table} SET status = 0, sent_at = NULL WHERE event_id IN ({})", pending.join(",")))
        .await;
    outbox
        .exec(&format!(
            "INSERT INTO app.`{dedup}` (event_id, status, msg_id) \
             SELECT event_id, 'PROCESSED', msg_id FROM {table} WHERE sent_at > NOW(3) - INTERVAL 1 DAY"
        ))
        .await;
    let unprocessed: Vec<String> = [3, 7, 11].map(|seq| events.id("k", seq)).into();
    let quoted: Vec<String> = unprocessed.iter().map(|id| format!("'{id}'")).collect();
    outbox.exec(&format!("DELETE FROM app.`{dedup}` WHERE event_id IN ({})", quoted.join(","))).await;
    let strangers: Vec<String> = (0..2).map(|n| format!("{}-stranger-{n}", events.prefix)).collect();
    outbox
        .exec(&format!(
            "INSERT INTO app.`{dedup}` (event_id, status, created_at) VALUES ('{}', 'PROCESSED', NOW(3)), \
             ('{}', 'REJECTED', NOW(3)), ('{}-stranger-old', 'PROCESSED', NOW(3) - INTERVAL 3 DAY)",
            strangers[0], strangers[1], events.prefix
        ))
        .await;

    let now = chrono::Utc::now();
    let since = (now - chrono::Duration::hours(1)).to_rfc3339();
    let until = (now + chrono::Duration::hours(1)).format("%Y-%m-%d %H:%M:%S").to_string();
    let window = ["reconcile", "--since", since.as_str(), "--until", until.as_str()];
    let by_default = cli_with(&stack, &outbox, &[], &[&window[..], &["--consumer-table", &dedup, "--json"]].concat());
    assert_eq!(by_default.status.code(), Some(7), "differences exit 7: {}", stderr(&by_default));
    let report = json_of(&by_default);
    assert_eq!(listed(&report, "sent_not_processed"), unprocessed.iter().cloned().collect(), "{report}");
    assert_eq!(listed(&report, "processed_unknown"), strangers.iter().cloned().collect(), "{report}");
    assert_eq!(
        (report["sent_checked"].as_u64(), report["processed_checked"].as_u64()),
        (Some(20), Some(19)),
        "{report}"
    );

    outbox.exec(&format!("INSERT INTO `{kit_db}`.event_dedup SELECT * FROM app.`{dedup}`")).await;
    let kit_side = cli_with(&stack, &outbox, &[], &[&window[..], &["--consumer-db", &kit_url, "--json"]].concat());
    assert_eq!(kit_side.status.code(), Some(7), "{}", stderr(&kit_side));
    assert_eq!(json_of(&kit_side), report, "the same tables in the consumer's own database: the same answer");

    let statuses = outbox.statuses().await;
    let audited: Vec<u64> = outbox
        .pool
        .get_conn()
        .await
        .expect("conn")
        .exec("SELECT id FROM app.outbox_relay_audit WHERE target LIKE ?", (format!("{table}%"),))
        .await
        .expect("audit");
    assert!(audited.is_empty(), "reconcile audits nothing: {audited:?}");

    outbox
        .exec(&format!(
            "INSERT INTO app.`{dedup}` (event_id, status) SELECT event_id, 'PROCESSED' FROM {table} WHERE event_id IN ({})",
            quoted.join(",")
        ))
        .await;
    outbox.exec(&format!("DELETE FROM app.`{dedup}` WHERE event_id IN ('{}', '{}')", strangers[0], strangers[1])).await;
    let whole = cli_with(&stack, &outbox, &[], &[&window[..], &["--consumer-table", &dedup]].concat());
    assert_eq!(whole.status.code(), Some(0), "no difference exits 0: {}", stderr(&whole));
    let human = stdout(&whole);
    assert!(
        human.contains("sent but never processed: 0") && human.contains("processed but unknown to the outbox: 0"),
        "{human}"
    );
    assert_eq!(outbox.statuses().await, statuses, "reconcile changes no row");

    outbox.exec(&format!("DROP TABLE app.`{dedup}`")).await;
    outbox.exec(&format!("DROP DATABASE `{kit_db}`")).await;
}

/// The replica's GTID position once it has applied everything the primary has.
async fn replica_gtid(stack: &Stack) -> String {
    stack.replica_caught_up().await;
    let replica = stack.replica_pool().await;
    let gtid: Option<String> =
        replica.get_conn().await.expect("replica").query_first("SELECT @@gtid_binlog_pos").await.expect("gtid");
    replica.disconnect().await.ok();
    gtid.filter(|g| !g.is_empty()).expect("the replica has a GTID position")
}

/// The sequence number of replication domain 0 in a MariaDB GTID list.
fn domain_0_seq(gtid: &str) -> u64 {
    gtid.split(',')
        .find_map(|part| part.trim().strip_prefix("0-")?.split_once('-')?.1.parse().ok())
        .unwrap_or_else(|| panic!("no domain 0 in {gtid:?}"))
}

/// Waits until the relay's checkpoint (its mirror, written after the local one) is
/// past everything the replica has applied now.
async fn checkpoint_past_now(stack: &Stack, outbox: &TestOutbox) {
    let now = domain_0_seq(&replica_gtid(stack).await);
    eventually("the checkpoint past what the replica applied", Duration::from_secs(30), || async {
        mirrored(outbox).await.filter(|(gtid, _)| !gtid.is_empty() && domain_0_seq(gtid) >= now)
    })
    .await;
}

/// The mirror row of `outbox`'s relay: (gtid, term).
async fn mirrored(outbox: &TestOutbox) -> Option<(String, u64)> {
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    conn.exec_first(
        "SELECT COALESCE(gtid, ''), term FROM app.outbox_relay_checkpoint WHERE source_id = ?",
        (format!("app.{}", outbox.name()),),
    )
    .await
    .expect("mirror row")
}

/// The `position set` audit rows of `outbox`'s relay: (operator, reason, old, new, result).
async fn position_audit(outbox: &TestOutbox) -> Vec<(String, String, String, String, String)> {
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    conn.exec(
        "SELECT operator, reason, old_state, new_state, result FROM app.outbox_relay_audit \
         WHERE action = 'position set' AND target = ? ORDER BY id",
        (format!("app.outbox_relay_checkpoint of {}", outbox.table.qualified()),),
    )
    .await
    .expect("audit rows")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn position_set_is_refused_while_a_relay_leads_and_when_forced_ends_its_term() {
    let scenario = Scenario::new("position_force").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let options = scenario.options();
    let its_local = [("OUTBOX_RELAY__CHECKPOINT__PATH", options.checkpoint_dir.display().to_string())];
    let mut relay = scenario.relay_with(&options).await;
    let before_rows = replica_gtid(stack).await;
    outbox.insert_tx(&events.rows("k", 0..3)).await;
    scenario.all_sent(3).await;
    eventually("the relay's local checkpoint past the rows", Duration::from_secs(60), || async {
        let shown = json_of(&cli_with(stack, outbox, &its_local, &["position", "show", "--json"]));
        let local = shown["local"]["position"]["gtid"].as_str().map(domain_0_seq);
        local.filter(|seq| *seq > domain_0_seq(&before_rows))
    })
    .await;
    let term = relay.metric("relay_leader_term") as u64;
    let set = ["position", "set", "--gtid", before_rows.as_str(), "--operator", "dave", "--reason", "INC-7", "--json"];

    let refused = cli_with(stack, outbox, &its_local, &set);
    let why = stderr(&refused);
    assert_eq!(refused.status.code(), Some(4), "{why}");
    assert!(why.contains("refused") && why.contains(&format!(":{}:", relay.pid())) && why.contains("--force"), "{why}");
    // Forced, but the relay on this host holds a local checkpoint further on, which it
    // would keep: refused too, saying to stop it.
    let forced = [&set[..], &["--force"]].concat();
    let held = cli_with(stack, outbox, &its_local, &forced);
    let why = stderr(&held);
    assert_eq!(held.status.code(), Some(4), "{why}");
    assert!(why.contains("further than") && why.contains("stop the relay on this host"), "{why}");
    assert!(position_audit(outbox).await.is_empty(), "a refused set audits nothing");

    // From a host without a local checkpoint, forced: the mirror is set and the term ends.
    let elsewhere =
        [("OUTBOX_RELAY__CHECKPOINT__PATH", std::env::temp_dir().join(unique("none")).display().to_string())];
    let done = cli_with(stack, outbox, &elsewhere, &forced);
    assert!(done.status.success(), "{}", stderr(&done));
    let change = json_of(&done);
    assert_eq!(change["after"]["gtid"].as_str(), Some(before_rows.as_str()), "{change}");
    assert_eq!(change["ended_term"]["term"].as_u64(), Some(term), "{change}");
    assert_eq!(change["ended_term"]["was_leading"], true, "{change}");
    assert_eq!(change["local"], "not_present", "{change}");
    let audit = position_audit(outbox).await;
    assert_eq!(audit.len(), 1, "{audit:?}");
    let (who, why, old, new, result) = &audit[0];
    assert_eq!((who.as_str(), why.as_str()), ("dave", "INC-7"));
    assert!(old.contains(&format!("term={term}")) && new.contains(&format!("gtid={before_rows}")), "{old} -> {new}");
    assert!(result.contains(&format!("ended lease term {term}")) && result.contains("forced"), "{result}");

    // Its term over, the relay steps down, takes the lease again under a later term and
    // goes on from the newer of its own checkpoint and the one set: its own.
    eventually("the relay leading under a later term", Duration::from_secs(60), || async {
        (relay.metric("relay_leader_term") as u64 > term + 1).then_some(())
    })
    .await;
    relay.wait_ready().await;
    outbox.insert_tx(&events.rows("k", 3..6)).await;
    scenario.all_sent(6).await;
    let (resumed, _) = eventually("the mirror written under the new term", Duration::from_secs(60), || async {
        mirrored(outbox).await.filter(|(_, written_in)| *written_in > term + 1)
    })
    .await;
    assert!(domain_0_seq(&resumed) > domain_0_seq(&before_rows), "{resumed} is not past {before_rows}");
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn position_set_while_stopped_makes_the_relay_resume_from_there() {
    let scenario = Scenario::new("position_replay").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let options = scenario.options();
    let local = [("OUTBOX_RELAY__CHECKPOINT__PATH", options.checkpoint_dir.display().to_string())];
    let mut relay = scenario.relay_with(&options).await;
    outbox.insert_tx(&events.rows("k", 0..3)).await;
    scenario.all_sent(3).await;
    let before_second = replica_gtid(stack).await;
    outbox.insert_tx(&events.rows("k", 3..6)).await;
    scenario.all_sent(6).await;
    assert_eq!(relay.stop(), Some(0));

    let shown = json_of(&cli_with(stack, outbox, &local, &["position", "show", "--json"]));
    assert_eq!(shown["local"]["state"], "saved", "{shown}");
    let saved = shown["local"]["position"]["gtid"].as_str().unwrap_or_default().to_owned();
    assert!(domain_0_seq(&saved) > domain_0_seq(&before_second), "checkpointed past the second batch: {shown}");
    assert!(shown["mirror"]["gtid"].is_string(), "{shown}");
    assert!(shown["leader"]["lease_remaining_ms"].as_i64().is_some_and(|ms| ms < 0), "released at the stop: {shown}");

    // The second batch made unsent again: only a relay that reads the binlog from
    // before it sends it (the sweep is told to leave recent rows to the binlog path).
    let second: Vec<String> = (3..6).map(|seq| format!("'{}'", events.id("k", seq))).collect();
    outbox
        .exec(&format!(
            "UPDATE {} SET status = 0, msg_id = NULL, sent_at = NULL WHERE event_id IN ({})",
            outbox.table.qualified(),
            second.join(",")
        ))
        .await;
    let set = ["position", "set", "--gtid", before_second.as_str(), "--operator", "erin", "--reason", "replay"];
    let change = json_of(&cli_with(stack, outbox, &local, &[&set[..], &["--json"]].concat()));
    assert_eq!(change["local"], "rewritten", "{change}");
    assert_eq!(change["ended_term"]["was_leading"], false, "{change}");
    assert_eq!(change["before"]["gtid"].as_str(), shown["mirror"]["gtid"].as_str(), "{change}");
    let after = json_of(&cli_with(stack, outbox, &local, &["position", "show", "--json"]));
    assert_eq!(after["local"]["position"]["gtid"].as_str(), Some(before_second.as_str()), "{after}");
    assert_eq!(after["mirror"]["gtid"].as_str(), Some(before_second.as_str()), "{after}");
    let audit = position_audit(outbox).await;
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!((audit[0].0.as_str(), audit[0].1.as_str()), ("erin", "replay"));
    assert!(audit[0].4.contains("rewritten"), "{audit:?}");

    let relay = scenario.relay_with(&options.env("OUTBOX_RELAY__SWEEP__GRACE_MS", 600_000)).await;
    scenario.all_sent(6).await;
    eventually("the mirror at or past the position set", Duration::from_secs(60), || async {
        mirrored(outbox).await.filter(|(gtid, _)| domain_0_seq(gtid) >= domain_0_seq(&before_second))
    })
    .await;
    scenario.finish(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_dry_run_prints_what_it_would_run_and_changes_nothing() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let fresh = unique("dry");
    let table = |name: &str| {
        let name = name.to_owned();
        let pool = outbox.pool.clone();
        async move {
            let mut conn = pool.get_conn().await.expect("conn");
            let found: Option<(u64, u64)> = conn
                .exec_first(
                    "SELECT COUNT(*), COALESCE(SUM(PARTITION_NAME IS NOT NULL), 0) FROM information_schema.PARTITIONS \
                     WHERE TABLE_SCHEMA = 'app' AND TABLE_NAME = ?",
                    (name,),
                )
                .await
                .expect("information_schema");
            found.unwrap_or_default()
        }
    };
    let new_table =
        cli_with(&stack, &outbox, &[("OUTBOX_RELAY__OUTBOX__TABLE", fresh.clone())], &["migrate", "--dry-run"]);
    assert!(new_table.status.success(), "{}", String::from_utf8_lossy(&new_table.stderr));
    let planned = stdout(&new_table);
    assert!(planned.contains(&format!("CREATE TABLE IF NOT EXISTS `app`.`{fresh}`")), "{planned}");
    assert_eq!(table(&fresh).await, (0, 0), "a dry run creates nothing");

    let up_to_date = stdout(&cli(&stack, &outbox, &["migrate", "--dry-run"]));
    assert!(up_to_date.contains("up to date"), "{up_to_date}");
    let convert = stdout(&cli(&stack, &outbox, &["migrate", "--dry-run", "--partition", "daily", "--convert"]));
    assert!(convert.contains("PARTITION BY RANGE COLUMNS(created_at)"), "{convert}");
    assert_eq!(table(outbox.name()).await, (1, 0), "the table stays unpartitioned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_takes_the_namesrv_and_acl_keys_from_the_config_and_answers_in_json() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    // A secret key of digits stays a string when it comes from the environment.
    let env = [
        ("OUTBOX_RELAY__ROCKETMQ__NAMESRV", stack.namesrv.clone()),
        ("OUTBOX_RELAY__ROCKETMQ__ACCESS_KEY", "outbox-relay-test".to_owned()),
        ("OUTBOX_RELAY__ROCKETMQ__SECRET_KEY", "123456".to_owned()),
    ];
    let ping = cli_with(&stack, &outbox, &env, &["admin", "ping", "--topic", TEST_TOPIC, "--queues", "8", "--json"]);
    assert!(ping.status.success(), "{}", String::from_utf8_lossy(&ping.stderr));
    let probes: Vec<serde_json::Value> = serde_json::from_str(&stdout(&ping)).expect("a JSON array");
    let brokers: BTreeSet<&str> = probes.iter().filter_map(|p| p["broker"].as_str()).collect();
    assert_eq!(brokers.len(), 2, "one probe per broker of the stack: {probes:?}");
    assert!(probes.iter().all(|p| p["msg_id"].as_str().is_some_and(|id| !id.is_empty())), "{probes:?}");
}
