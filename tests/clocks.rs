//! One publisher whatever the primary's clock says: the primary's time zone switched
//! under load, an hour either way, while a leader and a standby run. No takeover comes
//! while the leader renews (a lease is judged by the standby's own clock, never by the
//! primary's), and when the leader is killed the standby leads within a lease. The
//! time zone is the server's global one, so this file holds this test alone: no other
//! test's relay sees the switch.
#![recursion_limit = "512"]

mod common;

use std::time::{Duration, Instant};

use common::events::{consumed_all, terms_one_after_another};
use common::load::Load;
use common::relay::RelayProcess;
use common::scenario::Scenario;
use common::{eventually, throughout, Stack};
use mysql_async::prelude::Queryable;
use outbox_kit::RowStatus;

/// The lease the tests' relays hold (`leader.lease_ms` in `RelayOptions`).
const LEASE: Duration = Duration::from_secs(8);

/// The primary's global time zone, put back as it was when dropped (also when the
/// test fails half-way: the next test binaries share the server).
struct TimeZone {
    root_url: String,
    original: String,
}

impl TimeZone {
    async fn of(stack: &Stack) -> Self {
        let mut conn = stack.root_pool().await.get_conn().await.expect("root conn");
        let original: Option<String> = conn.query_first("SELECT @@GLOBAL.time_zone").await.expect("time_zone");
        Self { root_url: stack.root_url.clone(), original: original.expect("a time zone") }
    }

    /// Sets the global zone and cuts every connection of the relays' writer user, so
    /// their sessions read `NOW()` in the new zone from now on.
    async fn switch(&self, stack: &Stack, zone: &str) {
        let mut conn = stack.root_pool().await.get_conn().await.expect("root conn");
        conn.query_drop(format!("SET GLOBAL time_zone = '{zone}'")).await.expect("set time_zone");
        let writer = writer_name(&stack.writer_url);
        let ids: Vec<u64> = conn
            .exec("SELECT id FROM information_schema.processlist WHERE user = ?", (writer,))
            .await
            .expect("processlist");
        for id in ids {
            // A connection may have ended meanwhile.
            let _ = conn.query_drop(format!("KILL CONNECTION {id}")).await;
        }
    }
}

impl Drop for TimeZone {
    fn drop(&mut self) {
        let (url, zone) = (self.root_url.clone(), self.original.clone());
        let restored = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async {
                let pool = mysql_async::Pool::new(url.as_str());
                let mut conn = pool.get_conn().await.expect("root conn");
                conn.query_drop(format!("SET GLOBAL time_zone = '{zone}'")).await.expect("restore time_zone");
            });
        });
        restored.join().expect("the time zone restored");
    }
}

/// The user name in a `mysql://user:password@host` URL.
fn writer_name(url: &str) -> &str {
    let user_info = url.trim_start_matches("mysql://").split('@').next().unwrap_or_default();
    user_info.split(':').next().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primarys_time_zone_switched_under_load_never_gives_two_publishers_nor_blocks_a_takeover() {
    let scenario = Scenario::consumed("clocks").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let zone = TimeZone::of(stack).await;
    let leader = scenario.relay().await;
    let mut standby = RelayProcess::start(stack, &scenario.options());
    standby.wait_role("standby", Duration::from_secs(60)).await;
    let load = Load::started(outbox, events, 10, 40).await;

    // An hour ahead: every lease the leader wrote before reads as run out long ago.
    zone.switch(stack, "+01:00").await;
    throughout("the standby stays a standby while the leader renews", LEASE * 2, || async {
        if standby.metric("relay_leader") == 0.0 {
            Vec::new()
        } else {
            vec!["the standby took over from a live leader"]
        }
    })
    .await;
    // The leader dies with its last lease written an hour ahead; then the zone goes an
    // hour behind: that lease reads as running for two more hours.
    leader.kill();
    let killed = Instant::now();
    zone.switch(stack, "-01:00").await;
    eventually("the standby leads within the lease of the kill", LEASE + Duration::from_secs(5), || async {
        (standby.metric("relay_leader") == 1.0).then_some(())
    })
    .await;
    println!("the standby led {:.2} s after the leader was killed", killed.elapsed().as_secs_f64());
    // Back to the zone the load's rows are written in (their `next_retry_at` and
    // `created_at` are compared with the relay sessions' `NOW()`).
    zone.switch(stack, &zone.original).await;
    standby.wait_ready().await;

    let written = load.finish().await;
    scenario.all_sent(written).await;
    assert_eq!(outbox.count_status(RowStatus::Failed).await, 0);
    let deliveries = consumed_all(scenario.collector(), events, written, Duration::from_secs(120)).await;
    scenario.assert_per_key_order(&deliveries).await;
    let terms = terms_one_after_another(&deliveries);
    assert_eq!(terms.len(), 2, "the first leader's term, then the standby's: {terms:?}");
    scenario.finish(standby).await;
}
