//! One publisher per outbox table: instances of one fleet share the leader lease on
//! the primary; exactly one publishes, a standby takes over when it dies, pauses or
//! stops, and a deposed leader writes nothing. Also the source side: resume by GTID on
//! another server, and sources the relay must refuse. The relays are real processes
//! against the real stack; who published what is judged from the broker's side (each
//! message carries the term that sent it) and from the lease table.
#![recursion_limit = "512"]

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::Command;
use std::time::{Duration, Instant};

use common::command::{cli, stdout};
use common::events::{consumed_all, terms_one_after_another};
use common::load::Load;
use common::outbox::TestOutbox;
use common::relay::{RelayOptions, RelayProcess};
use common::scenario::Scenario;
use common::{eventually, unique, Stack};
use mysql_async::prelude::Queryable;
use outbox_kit::consumer::Delivery;
use outbox_kit::RowStatus;

/// The lease the tests' relays hold (`leader.lease_ms` in `RelayOptions`).
const LEASE: Duration = Duration::from_secs(8);

/// The lease row of `outbox`'s fleet: (holder, term, milliseconds it still runs).
async fn lease_row(outbox: &TestOutbox) -> (String, u64, i64) {
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let row: Option<(String, u64, i64)> = conn
        .exec_first(
            "SELECT holder, term, TIMESTAMPDIFF(MICROSECOND, NOW(3), lease_until) DIV 1000 FROM app.outbox_relay_lease WHERE name = ?",
            (format!("app.{}", outbox.name()),),
        )
        .await
        .expect("lease row");
    row.expect("the fleet's lease row exists")
}

/// Waits until one of `relays` reports itself leader; its index.
async fn new_leader(relays: &[&RelayProcess], deadline: Duration) -> usize {
    eventually("a standby to become leader", deadline, || async {
        relays.iter().position(|r| {
            let body = r.http_get("/readyz");
            body.starts_with("HTTP/1.0 200") && body.contains(r#""role":"leader""#)
        })
    })
    .await
}

/// Waits until `more` rows beyond `now` are SENT.
async fn sent_grows(outbox: &TestOutbox, more: usize) {
    let now = outbox.count_status(RowStatus::Sent).await;
    eventually(&format!("{more} more rows SENT"), Duration::from_secs(60), || async {
        (outbox.count_status(RowStatus::Sent).await >= now + more).then_some(())
    })
    .await;
}

/// Checks that the terms that published did so one after the other, each message
/// stored while the lease table (`held`, see [`LeaseWatch`]) gave its term the lease;
/// the terms that published, in order.
fn one_publisher_at_a_time(deliveries: &[Delivery], held: &BTreeMap<u64, (i64, i64)>) -> Vec<u64> {
    let terms = terms_one_after_another(deliveries);
    for d in deliveries.iter().filter(|d| d.reconsume_times == 0) {
        let term = d.relay_term.unwrap_or_default();
        let (from, until) =
            held.get(&term).copied().unwrap_or_else(|| panic!("term {term} never held the lease: {held:?}"));
        assert!(
            from - SAMPLING_SLACK_MS <= d.store_timestamp && d.store_timestamp <= until,
            "{} of term {term} stored at {} outside its lease {from}..{until}",
            d.event_id,
            d.store_timestamp
        );
    }
    terms
}

/// How late the watch may first see a new term (its polling period, and then some).
const SAMPLING_SLACK_MS: i64 = 500;

/// Polls the lease row while a test runs: per term, when it was first seen held (Unix
/// ms) and the latest `lease_until` it was granted, both on the database's clock.
struct LeaseWatch {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<BTreeMap<u64, (i64, i64)>>,
}

impl LeaseWatch {
    fn start(outbox: &TestOutbox) -> Self {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (pool, name) = (outbox.pool.clone(), format!("app.{}", outbox.name()));
        let task = tokio::spawn(async move {
            let mut held: BTreeMap<u64, (i64, i64)> = BTreeMap::new();
            while !*stopped.borrow() {
                let mut conn = pool.get_conn().await.expect("conn");
                let row: Option<(u64, i64, i64)> = conn
                    .exec_first(
                        "SELECT term, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), CAST(UNIX_TIMESTAMP(lease_until) * 1000 AS SIGNED) \
                         FROM app.outbox_relay_lease WHERE name = ?",
                        (&name,),
                    )
                    .await
                    .expect("lease row");
                if let Some((term, now, until)) = row.filter(|(_, now, until)| until > now) {
                    let span = held.entry(term).or_insert((now, until));
                    span.1 = span.1.max(until);
                }
                drop(conn);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            held
        });
        Self { stop, task }
    }

    async fn finish(self) -> BTreeMap<u64, (i64, i64)> {
        self.stop.send(true).expect("stop the lease watch");
        self.task.await.expect("lease watch")
    }
}

fn signal(relay: &RelayProcess, name: &str) {
    let status = Command::new("kill").args([format!("-{name}"), relay.pid().to_string()]).status().expect("kill");
    assert!(status.success(), "kill -{name} {}", relay.pid());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_publish_one_term_at_a_time_under_load_and_lose_nothing() {
    let scenario = Scenario::consumed("fleet").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let first = scenario.relay().await;
    let mut b = RelayProcess::start(stack, &scenario.options());
    let mut c = RelayProcess::start(stack, &scenario.options());
    b.wait_role("standby", Duration::from_secs(60)).await;
    c.wait_role("standby", Duration::from_secs(60)).await;
    assert_eq!((b.metric("relay_leader"), c.metric("relay_leader")), (0.0, 0.0), "standbys do not publish");
    let leases = LeaseWatch::start(outbox);
    let load = Load::started(outbox, events, 20, 60).await;

    // The leader dies: one standby takes over; then it hands over cleanly to the last.
    first.kill();
    let second = new_leader(&[&b, &c], LEASE + Duration::from_secs(10)).await;
    let (mut second, mut third) = if second == 0 { (b, c) } else { (c, b) };
    sent_grows(outbox, 60).await;
    assert_eq!(second.stop(), Some(0), "a clean handover");
    third.wait_ready().await;
    sent_grows(outbox, 60).await;
    let written = load.finish().await;

    scenario.all_sent(written).await;
    let deliveries = consumed_all(scenario.collector(), events, written, Duration::from_secs(120)).await;
    let terms = one_publisher_at_a_time(&deliveries, &leases.finish().await);
    assert_eq!(terms.len(), 3, "three leaderships published: {terms:?}");
    let (_, lease_term, _) = lease_row(outbox).await;
    assert_eq!(terms.last(), Some(&lease_term), "the lease table names the last publisher's term");
    assert_eq!(third.metric("relay_leader_term"), lease_term as f64);
    scenario.finish(third).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handover_under_load_gives_the_lease_to_the_standby_within_5s_one_publisher_at_a_time() {
    let scenario = Scenario::consumed("handover").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let mut leader = scenario.relay().await;
    let mut standby = RelayProcess::start(stack, &scenario.options());
    standby.wait_role("standby", Duration::from_secs(60)).await;
    let leases = LeaseWatch::start(outbox);
    let load = Load::started(outbox, events, 10, 40).await;
    let (old_holder, old_term, _) = lease_row(outbox).await;

    let ordered = Instant::now();
    let said = stdout(&cli(stack, outbox, &["handover", "--operator", "ops", "--reason", "node drain"]));
    new_leader(&[&standby], Duration::from_secs(5)).await;
    let led_after = ordered.elapsed();
    println!("the standby led {:.2} s after the handover was ordered", led_after.as_secs_f64());
    assert!(led_after <= Duration::from_secs(5), "the standby led {led_after:?} after the order");
    assert!(said.contains("handed over") && said.contains(&old_holder), "{said}");
    leader.wait_role("standby", Duration::from_secs(10)).await;
    assert_eq!(leader.metric("relay_binlog_connected"), 0.0, "a standby reads no binlog");
    assert_eq!(standby.metric("relay_paused"), 0.0);
    sent_grows(outbox, 40).await;
    let written = load.finish().await;

    scenario.all_sent(written).await;
    let deliveries = consumed_all(scenario.collector(), events, written, Duration::from_secs(120)).await;
    scenario.assert_per_key_order(&deliveries).await;
    let terms = one_publisher_at_a_time(&deliveries, &leases.finish().await);
    assert_eq!(terms, vec![old_term, old_term + 1], "the standby took the next term");
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let audit: Vec<(String, String)> = conn
        .exec(
            "SELECT operator, old_state FROM app.outbox_relay_audit WHERE action = 'handover' AND target LIKE ?",
            (format!("%{}", outbox.table.qualified()),),
        )
        .await
        .expect("audit");
    assert_eq!(audit, vec![("ops".to_owned(), format!("{old_holder} term {old_term}"))]);
    drop(conn);
    // `status` shows the whole fleet from the roll call: the new leader and the old one.
    let fleet_now = || async {
        let status = stdout(&cli(stack, outbox, &["status", "--json"]));
        let status: serde_json::Value = serde_json::from_str(&status).expect("status --json");
        let roles: BTreeMap<String, (String, u64, bool)> = status["fleet"]
            .as_array()?
            .iter()
            .map(|i| {
                let field = |name: &str| i[name].as_str().unwrap_or_default().to_owned();
                (field("instance"), (field("role"), i["term"].as_u64().unwrap_or(0), i["ready"] == true))
            })
            .collect();
        let led = roles.values().any(|r| *r == ("leader".to_owned(), old_term + 1, true));
        let stood_down = roles.get(&old_holder).is_some_and(|(role, _, ready)| role == "standby" && *ready);
        (roles.len() == 2 && led && stood_down).then_some(roles)
    };
    eventually("the roll call names the new leader and the old one as standby", Duration::from_secs(20), fleet_now)
        .await;
    assert_eq!(leader.stop(), Some(0));
    scenario.finish(standby).await;
}

/// Now, in Unix milliseconds (the broker's store times are on this host's clock).
fn unix_millis() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("a clock after 1970");
    i64::try_from(now.as_millis()).expect("milliseconds fit")
}

/// The replica's GTID position now (where the relays read).
async fn replica_gtid(stack: &Stack) -> String {
    let mut conn = stack.replica_pool().await.get_conn().await.expect("replica conn");
    let gtid: Option<String> = conn.query_first("SELECT @@gtid_binlog_pos").await.expect("gtid");
    gtid.expect("the replica has a GTID position")
}

/// `position set --force` ends the leader's term without shortening its lease: the
/// old leader stops at its next renewal, and the standby takes over only after
/// watching the changed lease for a whole lease. Under load: the terms' store times
/// never overlap, and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_position_set_under_load_gives_one_publisher_at_a_time_and_loses_nothing() {
    let scenario = Scenario::consumed("forced").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let before_load = replica_gtid(stack).await;
    let mut first = scenario.relay().await;
    let mut second = RelayProcess::start(stack, &scenario.options());
    second.wait_role("standby", Duration::from_secs(60)).await;
    let load = Load::started(outbox, events, 10, 40).await;
    let term = first.metric("relay_leader_term") as u64;
    // From a host with no local checkpoint: the mirror goes back to before the load
    // (everything since is published again) and the term ends.
    let elsewhere =
        [("OUTBOX_RELAY__CHECKPOINT__PATH", std::env::temp_dir().join(unique("none")).display().to_string())];
    let set = ["position", "set", "--gtid", &before_load, "--force", "--operator", "erin", "--reason", "INC-11"];
    let set_at = unix_millis();
    let done = common::command::cli_with(stack, outbox, &elsewhere, &set);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    eventually("a later term leads", Duration::from_secs(60), || async {
        let leaders = [&first, &second].iter().filter(|r| r.metric("relay_leader") == 1.0).count();
        let terms = [&first, &second].iter().map(|r| r.metric("relay_leader_term") as u64).max().unwrap_or(0);
        (leaders == 1 && terms > term + 1).then_some(())
    })
    .await;
    sent_grows(outbox, 40).await;
    let written = load.finish().await;
    scenario.all_sent(written).await;
    let deliveries = consumed_all(scenario.collector(), events, written, Duration::from_secs(120)).await;
    scenario.assert_per_key_order(&deliveries).await;
    let terms = terms_one_after_another(&deliveries);
    assert!(terms.len() >= 2 && terms[0] == term, "the first term, then a later one published: {terms:?}");
    // The lease was not shortened: the next leader watched the changed row a whole lease.
    let next_began =
        deliveries.iter().filter(|d| d.relay_term.is_some_and(|t| t > term)).map(|d| d.store_timestamp).min();
    let waited = next_began.expect("a later term published") - set_at;
    assert!(waited >= LEASE.as_millis() as i64, "the next term published {waited} ms after the forced set");
    assert_eq!(first.stop(), Some(0));
    scenario.finish(second).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leaders_standby_takes_over_within_the_lease_from_the_mirror_without_a_sweep() {
    let scenario = Scenario::consumed("takeover").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let leader = scenario.relay().await;
    // The standby has a checkpoint directory of its own, empty: it can only use the mirror.
    let mut standby = RelayProcess::start(stack, &scenario.options());
    standby.wait_role("standby", Duration::from_secs(60)).await;
    outbox.insert_tx(&events.rows("k", 0..50)).await;
    scenario.all_sent(50).await;

    leader.kill();
    let killed = Instant::now();
    outbox.insert_tx(&events.rows("k", 50..60)).await;
    let deadline = (LEASE + Duration::from_secs(5)).saturating_sub(killed.elapsed());
    eventually("the rows written after the kill SENT by the standby", deadline, || async {
        (outbox.count_status(RowStatus::Sent).await == 60).then_some(())
    })
    .await;
    println!("the standby published {:.2} s after the leader was killed", killed.elapsed().as_secs_f64());
    assert_eq!(standby.metric("relay_full_sweeps_total"), 0.0, "resumed from the mirror, no full sweep");
    assert_eq!(standby.metric("relay_position_lost_total"), 0.0);
    assert_eq!(standby.metric("relay_leader"), 1.0);
    scenario.received(60).await;
    // The killed leader never said it stopped: once it has missed three reports, the
    // fleet's status calls its row stale, beside the one live leader.
    let fleet_now = || async {
        let status = stdout(&cli(stack, outbox, &["status", "--json"]));
        let status: serde_json::Value = serde_json::from_str(&status).expect("status --json");
        let fleet: Vec<(bool, bool, bool)> = status["fleet"]
            .as_array()?
            .iter()
            .map(|i| (i["role"] == "leader", i["silent"] == true, i["ready"] == true))
            .collect();
        let live_leaders = fleet.iter().filter(|&&(leader, silent, ready)| leader && !silent && ready).count();
        let silent = fleet.iter().filter(|&&(_, silent, _)| silent).count();
        (fleet.len() == 2 && live_leaders == 1 && silent == 1).then_some(fleet)
    };
    eventually("the killed leader's row is silent, the new leader's is not", Duration::from_secs(40), fleet_now).await;
    scenario.finish(standby).await;
}

/// A writer user of the relay's own, so a trigger can tell whose write it was.
async fn writer_user(stack: &Stack, outbox: &TestOutbox) -> (String, String) {
    let name: String = unique("w").chars().take(30).collect();
    for sql in [
        format!("CREATE USER '{name}'@'127.0.0.1' IDENTIFIED BY 'pw'"),
        format!("GRANT SELECT, INSERT, UPDATE, DELETE ON app.* TO '{name}'@'127.0.0.1'"),
    ] {
        outbox.exec(&sql).await;
    }
    let address = stack.writer_url.rsplit_once('@').map(|(_, host)| host).expect("writer url has a host");
    (name.clone(), format!("mysql://{name}:pw@{address}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_lease_writes_nothing_after_it_resumes_and_steps_down() {
    let scenario = Scenario::new("paused").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let table = outbox.table.qualified();
    // Every write to the outbox rows and to this table's mirror row, with who and when.
    let writes = format!("app.`{}`", unique("writes"));
    outbox.exec(&format!("CREATE TABLE {writes} (who VARCHAR(160), what VARCHAR(16), at DATETIME(6))")).await;
    let (on_rows, on_mirror) = (unique("trg_rows"), unique("trg_mirror"));
    outbox
        .exec(&format!(
            "CREATE TRIGGER app.`{on_rows}` AFTER UPDATE ON {table} FOR EACH ROW INSERT INTO {writes} VALUES (USER(), 'row', NOW(6))"
        ))
        .await;
    outbox
        .exec(&format!(
            "CREATE TRIGGER app.`{on_mirror}` AFTER UPDATE ON app.outbox_relay_checkpoint FOR EACH ROW \
             IF NEW.source_id = 'app.{}' THEN INSERT INTO {writes} VALUES (USER(), 'mirror', NOW(6)); END IF",
            outbox.name()
        ))
        .await;
    let (paused_user, paused_url) = writer_user(stack, outbox).await;
    let (other_user, other_url) = writer_user(stack, outbox).await;
    // The leader's SENT write-backs wait 3 s (a slow primary), so it is paused with
    // write-backs pending, which it tries as soon as it resumes.
    let mut paused = scenario
        .relay_with(
            &scenario
                .options()
                .env("OUTBOX_RELAY__PRIMARY__URL", paused_url)
                .env("OUTBOX_RELAY_FAULT_SENT_WRITE_DELAY_MS", 3_000),
        )
        .await;
    // Rows the paused leader sent but could not mark SENT are swept again by the new one.
    let mut other = RelayProcess::start(
        stack,
        &scenario
            .options()
            .env("OUTBOX_RELAY__PRIMARY__URL", other_url)
            .env("OUTBOX_RELAY__SWEEP__GRACE_MS", 1_000)
            .env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 1_000),
    );
    other.wait_role("standby", Duration::from_secs(60)).await;
    let load = Load::started(outbox, events, 10, 40).await;

    signal(&paused, "STOP");
    new_leader(&[&other], LEASE + Duration::from_secs(10)).await;
    sent_grows(outbox, 40).await;
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let resumed_at: String = conn.query_first("SELECT NOW(6)").await.expect("now").expect("a time");
    signal(&paused, "CONT");
    paused.wait_role("standby", Duration::from_secs(20)).await;
    assert_eq!(paused.metric("relay_leader"), 0.0, "the resumed instance stepped down");
    sent_grows(outbox, 20).await;
    let written = load.finish().await;
    scenario.all_sent(written).await;

    let count = |who: String, since: Option<String>| {
        let sql = format!("SELECT COUNT(*) FROM {writes} WHERE who LIKE ? AND at >= COALESCE(?, '1970-01-02')");
        let pool = outbox.pool.clone();
        async move {
            let n: Option<u64> =
                pool.get_conn().await.expect("conn").exec_first(sql, (format!("{who}@%"), since)).await.expect("count");
            n.unwrap_or_default()
        }
    };
    assert!(count(paused_user.clone(), None).await > 0, "the paused leader's writes before the pause are seen");
    assert!(count(other_user.clone(), Some(resumed_at.clone())).await > 0, "the new leader's writes are seen");
    let late = count(paused_user.clone(), Some(resumed_at.clone())).await;
    let late_rows: Vec<(String, String)> = conn
        .exec(
            format!("SELECT what, CAST(at AS CHAR) FROM {writes} WHERE who LIKE ? AND at >= ? LIMIT 5"),
            (format!("{paused_user}@%"), &resumed_at),
        )
        .await
        .expect("late writes");
    assert_eq!(
        late,
        0,
        "the deposed leader wrote {late} times after it resumed, e.g. {late_rows:?}\n{}",
        paused.log_text()
    );

    outbox.exec(&format!("DROP TRIGGER app.`{on_mirror}`")).await;
    outbox.exec(&format!("DROP TRIGGER app.`{on_rows}`")).await;
    assert_eq!(other.stop(), Some(0));
    scenario.finish(paused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_releases_the_lease_and_a_standby_publishes_within_two_seconds() {
    let scenario = Scenario::consumed("handover").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let mut leader = scenario.relay().await;
    let mut standby = RelayProcess::start(stack, &scenario.options());
    standby.wait_role("standby", Duration::from_secs(60)).await;
    let load = Load::started(outbox, events, 20, 60).await;
    let term = leader.metric("relay_leader_term") as u64;

    let stopping = Instant::now();
    assert_eq!(leader.stop(), Some(0));
    let exited = Instant::now();
    assert!(exited - stopping < Duration::from_secs(10), "stopped within the drain timeout: {:?}", exited - stopping);
    assert_eq!(outbox.count_status(RowStatus::Sending).await, 0, "no claimed row left behind");
    let (_, lease_term, remaining_ms) = lease_row(outbox).await;
    assert!(
        (lease_term == term && remaining_ms < 0) || lease_term == term + 1,
        "the lease was released (term {term}; now term {lease_term}, {remaining_ms} ms left)"
    );
    eventually("the standby's first SEND_OK", Duration::from_secs(2), || async {
        (standby.metric_sum("relay_events_published_total") > 0.0).then_some(())
    })
    .await;
    println!("the standby published {:.2} s after the leader exited", exited.elapsed().as_secs_f64());
    sent_grows(outbox, 40).await;
    let written = load.finish().await;
    scenario.all_sent(written).await;
    consumed_all(scenario.collector(), events, written, Duration::from_secs(120)).await;
    scenario.finish(standby).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_switched_from_the_replica_to_the_primary_resumes_by_gtid_without_a_sweep() {
    let scenario = Scenario::consumed("switch").await;
    let Scenario { stack, outbox, events, .. } = &scenario;
    let on_replica = scenario.options();
    let mut relay = scenario.relay_with(&on_replica).await;
    for start in [0, 10, 20] {
        outbox.insert_tx(&events.rows("k", start..start + 10)).await;
    }
    scenario.all_sent(30).await;
    assert_eq!(relay.stop(), Some(0));

    // Written while no relay runs; then the relay comes back tailing the primary.
    for start in [30, 40, 50] {
        outbox.insert_tx(&events.rows("k", start..start + 10)).await;
    }
    let on_primary = on_replica.clone().env("OUTBOX_RELAY__SOURCE__URL", &stack.primary_repl_url);
    let relay = scenario.relay_with(&on_primary).await;
    scenario.all_sent(60).await;
    outbox.insert_tx(&events.rows("k", 60..70)).await;
    scenario.all_sent(70).await;
    assert_eq!(relay.metric("relay_full_sweeps_total"), 0.0, "resumed by GTID, no full sweep");
    assert_eq!(relay.metric("relay_position_lost_total"), 0.0);
    let deliveries = scenario.received(70).await;
    let mut sends: HashMap<&str, HashSet<&str>> = HashMap::new();
    for d in &deliveries {
        sends.entry(d.event_id.as_str()).or_default().insert(d.msg_id.as_str());
    }
    let twice: Vec<&&str> = sends.iter().filter(|(_, ids)| ids.len() > 1).map(|(id, _)| id).collect();
    assert!(twice.is_empty(), "after a clean stop nothing is sent twice: {twice:?}");
    scenario.finish(relay).await;
}

/// A MariaDB replica of the stack's primary in a scratch directory, for a setting
/// the stack's own replica must not have.
struct ScratchReplica {
    server: std::process::Child,
    dir: std::path::PathBuf,
    port: u16,
}

impl ScratchReplica {
    async fn start(stack: &Stack, options: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(unique("scratch-replica"));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let install = Command::new("mariadb-install-db")
            .args(["--no-defaults", "--user=root", "--auth-root-authentication-method=normal", "--skip-test-db"])
            .arg(format!("--datadir={}", dir.join("data").display()))
            .output()
            .expect("mariadb-install-db");
        assert!(install.status.success(), "mariadb-install-db: {}", String::from_utf8_lossy(&install.stderr));
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
        let server = Command::new("mariadbd")
            .args(["--no-defaults", "--user=root", "--bind-address=127.0.0.1", "--binlog-format=ROW"])
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--socket={}", dir.join("sock").display()))
            .arg(format!("--port={port}"))
            .arg(format!("--log-bin={}", dir.join("bin").display()))
            .arg(format!("--server-id={}", 50_000 + port as u32))
            .args(options)
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("mariadbd");
        let replica = Self { server, dir, port };
        let pool = mysql_async::Pool::new(replica.root_url().as_str());
        let mut conn = eventually("the scratch replica to accept connections", Duration::from_secs(60), || async {
            pool.get_conn().await.ok()
        })
        .await;
        // Replicates from the primary's current GTID on: what came before is not needed.
        let primary_at: String = stack
            .root_pool()
            .await
            .get_conn()
            .await
            .expect("primary")
            .query_first("SELECT @@gtid_binlog_pos")
            .await
            .expect("gtid")
            .unwrap_or_default();
        let port_of_primary = stack.root_url.rsplit_once(':').and_then(|(_, p)| p.split('/').next()).unwrap_or("13306");
        for sql in [
            format!("SET GLOBAL gtid_slave_pos = '{primary_at}'"),
            format!(
                "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={port_of_primary}, MASTER_USER='stack_replica', \
                 MASTER_PASSWORD='replica-secret', MASTER_USE_GTID=slave_pos"
            ),
            "START SLAVE".to_owned(),
        ] {
            conn.query_drop(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        drop(conn);
        pool.disconnect().await.ok();
        replica
    }

    fn root_url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/", self.port)
    }
}

impl Drop for ScratchReplica {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_does_not_log_what_it_replicates_is_refused_with_the_fix() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let replica = ScratchReplica::start(&stack, &["--log-slave-updates=OFF", "--read-only=ON"]).await;
    let options = RelayOptions::new(outbox.name()).env("OUTBOX_RELAY__SOURCE__URL", replica.root_url());
    let mut relay = RelayProcess::start(&stack, &options);
    let code = relay.wait_exit(Duration::from_secs(60)).await;
    let log = relay.log_text();
    assert_eq!(code, Some(4), "an environment error: {log}");
    assert!(log.contains("log_slave_updates") && log.contains("set log_slave_updates = ON"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_with_one_server_id_get_a_clear_error_not_repeated_sweeps() {
    let stack = Stack::from_env();
    let (first_table, second_table) = (TestOutbox::create(&stack).await, TestOutbox::create(&stack).await);
    let server_id = 900_000 + (uuid::Uuid::now_v7().as_u128() % 90_000) as u32;
    let clash =
        |outbox: &TestOutbox| RelayOptions::new(outbox.name()).env("OUTBOX_RELAY__SOURCE__SERVER_ID", server_id);
    let mut first = RelayProcess::start(&stack, &clash(&first_table));
    first.wait_ready().await;
    let second = RelayProcess::start(&stack, &clash(&second_table));
    let body = eventually("/readyz of one of them to name the server_id clash", Duration::from_secs(60), || async {
        [&first, &second]
            .into_iter()
            .filter_map(RelayProcess::readyz)
            .find(|b| b.contains("server_id") && b.contains("503"))
    })
    .await;
    assert!(body.contains(&server_id.to_string()) && body.contains("unique"), "the clash and the fix: {body}");
    for relay in [&first, &second] {
        assert_eq!(relay.metric("relay_position_lost_total"), 0.0, "not taken for a lost position");
        assert!(relay.metric("relay_full_sweeps_total") <= 1.0, "only the first start's sweep");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_during_the_drain_exits_at_once_and_a_restart_loses_nothing() {
    let scenario = Scenario::new("twice").await;
    let Scenario { outbox, events, .. } = &scenario;
    // Lanes wait a minute to fill a batch, so the drain after a SIGTERM has to wait.
    let lingering =
        scenario.options().env("OUTBOX_RELAY__LANES__LINGER_MS", 60_000).env("OUTBOX_RELAY__LANES__BATCH_SIZE", 1_000);
    let mut relay = scenario.relay_with(&lingering).await;
    outbox.insert_tx(&events.rows("k", 0..10)).await;
    eventually("the transaction in flight", Duration::from_secs(30), || async {
        (relay.metric("relay_in_flight_transactions") >= 1.0).then_some(())
    })
    .await;
    signal(&relay, "TERM");
    let body = relay.wait_readiness(false, Duration::from_secs(5)).await;
    assert!(body.contains("stopping"), "draining: {body}");
    signal(&relay, "TERM");
    assert_eq!(relay.wait_exit(Duration::from_secs(3)).await, Some(6), "the second signal exits at once");
    assert_eq!(outbox.count_status(RowStatus::Sent).await, 0, "nothing was sent before the exit");

    let restarted = scenario.relay_with(&lingering.clone().env("OUTBOX_RELAY__LANES__LINGER_MS", 1)).await;
    scenario.all_sent(10).await;
    scenario.finish(restarted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_id_equal_to_the_sources_own_is_refused_with_the_fix() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let mut conn = stack.replica_pool().await.get_conn().await.expect("replica");
    let own: Option<u32> = conn.query_first("SELECT @@server_id").await.expect("server_id");
    let own = own.expect("a server_id");
    let options = RelayOptions::new(outbox.name()).env("OUTBOX_RELAY__SOURCE__SERVER_ID", own);
    let mut relay = RelayProcess::start(&stack, &options);
    let code = relay.wait_exit(Duration::from_secs(60)).await;
    let log = relay.log_text();
    assert_eq!(code, Some(4), "{log}");
    assert!(log.contains("source.server_id") && log.contains("different from the source's server_id"), "{log}");
}
