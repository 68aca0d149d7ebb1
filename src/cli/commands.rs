//! The operator commands of the `outbox-relay` binary: `status` (the database's view
//! and, from its HTTP endpoint, the local relay's lags and problems), `failed list`,
//! `requeue`, `skip`, `resend`, `cleanup`, `pause`, `resume`, `handover`, `reconcile`,
//! `verify`, `position show`/`set` and `check`, over
//! the library's `ops`. Human output by default (aligned columns), `--json` for
//! scripts; every change needs `--operator` and `--reason`, which go into its audit
//! row, and `--dry-run` shows what would change.

use anyhow::Context;
use mysql_async::Pool;
use outbox_relay::config::{Config, DbUrl};
use outbox_relay::db;
use outbox_relay::ops::check;
use outbox_relay::ops::manual::{Change, FailedFilter, Manual, Operator, SentFilter, Target};
use outbox_relay::ops::orders::{FleetOrders, PauseOrder};
use outbox_relay::ops::position::{LocalOutcome, LocalState, NewPosition, PositionChange, PositionView, Positions};
use outbox_relay::ops::probe::{self, InstanceView};
use outbox_relay::ops::reconcile::{DedupTable, Differences, Reconcile, Side, Window};
use outbox_relay::ops::report::{status_report, LeaderReport, PositionReport, StatusReport};
use outbox_relay::ops::verify;
use outbox_relay::rocketmq::{Producer, ProducerSettings};
use outbox_relay::store::{InstanceSeen, Instances, LeaseStore};

use super::args::{ByWhom, FailedCommand, OperatorCommand, PositionCommand, ReconcileArgs};
use super::table::print_table;

/// Runs `action` against the primary and outbox table of `config`; prints the result.
pub async fn run(config: &Config, command: OperatorCommand, json: bool) -> anyhow::Result<()> {
    let pool = db::connect_with("primary", &config.primary.url, &config.primary.tls, 2, &[]).await?;
    let manual = Manual::new(pool.clone(), config.outbox_table());
    let table = config.outbox_table().qualified();
    // A server error (a missing table, a missing grant) classifies as exit 4.
    let on_primary = |e| db::DbError::query("primary", &config.primary.url, e);
    let done = async {
        match command {
            OperatorCommand::Status => {
                let lease = LeaseStore::new(pool.clone(), &config.outbox_table().schema, &config.lease_name());
                let report =
                    status_report(&pool, &config.outbox_table(), &lease).await.map_err(on_primary).with_context(
                        || format!("reading the status of {table} (does it exist? `outbox-relay migrate` creates it)"),
                    )?;
                let fleet = Instances::new(pool.clone(), &config.outbox_table().schema, &config.lease_name());
                let fleet = fleet.list().await.map_err(|e| format!("{e} (run `outbox-relay migrate`)"));
                let instance = probe::view(&config.http.listen).await.map_err(|e| e.to_string());
                if json {
                    let output = StatusOutput {
                        report: &report,
                        fleet: fleet.as_ref().ok(),
                        fleet_error: fleet.as_ref().err(),
                        instance: instance.as_ref().ok(),
                        instance_error: instance.as_ref().err(),
                    };
                    println!("{}", serde_json::to_string(&output)?);
                } else {
                    print_status(&report);
                    print_fleet(&fleet);
                    print_instance(&instance);
                }
                Ok(())
            }
            OperatorCommand::Failed(FailedCommand::List { limit, topic, key }) => {
                let rows = manual
                    .failed(&FailedFilter { limit, topic, biz_key: key })
                    .await
                    .map_err(on_primary)
                    .with_context(|| format!("listing FAILED rows of {table}"))?;
                if json {
                    println!("{}", serde_json::to_string(&rows)?);
                } else {
                    print_table(
                        &["id", "event_id", "biz_key", "topic", "retries", "created_at", "last_error"],
                        rows.iter()
                            .map(|r| {
                                vec![
                                    r.id.to_string(),
                                    r.event_id.clone(),
                                    r.biz_key.clone(),
                                    r.topic.clone(),
                                    r.retry_count.to_string(),
                                    r.created_at.clone(),
                                    r.last_error.chars().take(80).collect(),
                                ]
                            })
                            .collect(),
                    );
                }
                Ok(())
            }
            OperatorCommand::Requeue { which, by } => {
                let target = if which.all_failed { Target::AllFailed } else { Target::Ids(which.ids) };
                let change = manual.requeue(&target, &operator(&by), by.dry_run).await;
                report_change(change.map_err(on_primary).with_context(|| format!("requeue in {table}"))?, json)
            }
            OperatorCommand::Skip { ids, by } => {
                let change = manual.skip(&Target::Ids(ids), &operator(&by), by.dry_run).await;
                report_change(change.map_err(on_primary).with_context(|| format!("skip in {table}"))?, json)
            }
            OperatorCommand::Resend { since, until, topic, key, by } => {
                let rows = SentFilter { window: Window::new(since, until)?, topic, biz_key: key };
                let change = manual.resend(&rows, &operator(&by), by.dry_run).await;
                report_change(change.map_err(on_primary).with_context(|| format!("resend in {table}"))?, json)
            }
            OperatorCommand::Pause { by } => set_paused(config, &pool, PauseOrder::Pause, &by, json).await,
            OperatorCommand::Resume { by } => set_paused(config, &pool, PauseOrder::Resume, &by, json).await,
            OperatorCommand::Handover { within_secs, by } => {
                let within = std::time::Duration::from_secs(within_secs);
                let handover = orders(config, &pool).handover(&operator(&by), within, by.dry_run).await;
                let handover = handover.with_context(|| format!("handover of the relay of {table}"))?;
                if json {
                    println!("{}", serde_json::to_string(&handover)?);
                } else if handover.dry_run {
                    println!(
                        "dry run: would order {} (term {}) to hand over to a standby",
                        handover.from, handover.from_term
                    );
                } else {
                    println!(
                        "handed over in {:.1} s: {} (term {}) -> {} (term {}) (audited)",
                        handover.seconds, handover.from, handover.from_term, handover.to, handover.to_term
                    );
                }
                Ok(())
            }
            OperatorCommand::Cleanup { retention, batch, pace_ms, by } => {
                let pace = std::time::Duration::from_millis(pace_ms);
                let interactive = std::io::IsTerminal::is_terminal(&std::io::stderr());
                let progress = |deleted: u64| {
                    if interactive {
                        eprint!("\rdeleted {deleted} rows");
                    }
                };
                let cleaned = manual
                    .cleanup(retention, batch, pace, &operator(&by), by.dry_run, progress)
                    .await
                    .map_err(on_primary)
                    .with_context(|| format!("cleanup of {table}"))?;
                if interactive && !by.dry_run {
                    eprintln!();
                }
                if json {
                    println!("{}", serde_json::to_string(&cleaned)?);
                } else if cleaned.dry_run {
                    println!("dry run: would delete {} SENT rows older than {}s", cleaned.deleted, retention.as_secs());
                } else {
                    println!(
                        "deleted {} SENT rows older than {}s in {} batches",
                        cleaned.deleted,
                        retention.as_secs(),
                        cleaned.batches
                    );
                }
                Ok(())
            }
            OperatorCommand::Reconcile(args) => reconcile(config, &pool, args, json).await,
            OperatorCommand::Verify { sample } => verify_on_broker(config, &pool, sample, json).await,
            OperatorCommand::Position(PositionCommand::Show) => {
                let positions = Positions::new(config, config.outbox_table(), pool.clone());
                let view = positions.show().await.with_context(|| {
                    format!("reading the position of the relay of {table} (`outbox-relay migrate` creates its tables)")
                })?;
                if json {
                    println!("{}", serde_json::to_string(&view)?);
                } else {
                    print_position(&view);
                }
                Ok(())
            }
            OperatorCommand::Position(PositionCommand::Set { target, by }) => {
                let to = match (target.gtid, target.file, target.pos) {
                    (Some(gtid), _, _) => NewPosition::Gtid(gtid),
                    (None, Some(file), Some(pos)) => NewPosition::File { file, pos },
                    _ => anyhow::bail!("give --gtid G, or --file F with --pos P"),
                };
                let positions = Positions::new(config, config.outbox_table(), pool.clone());
                let change = positions
                    .set(&to, &operator(&by), target.force, by.dry_run)
                    .await
                    .with_context(|| format!("setting the position of the relay of {table}"))?;
                if json {
                    println!("{}", serde_json::to_string(&change)?);
                } else {
                    print_position_change(&change);
                }
                Ok(())
            }
        }
    }
    .await;
    pool.disconnect().await.ok();
    done
}

/// The orders to the leader of the configured fleet.
fn orders(config: &Config, pool: &Pool) -> FleetOrders {
    let lease = LeaseStore::new(pool.clone(), &config.outbox_table().schema, &config.lease_name());
    FleetOrders::new(pool.clone(), config.outbox_table(), lease)
}

/// `pause` and `resume`.
async fn set_paused(config: &Config, pool: &Pool, order: PauseOrder, by: &ByWhom, json: bool) -> anyhow::Result<()> {
    let paused = order == PauseOrder::Pause;
    let change = orders(config, pool).order(order, &operator(by), by.dry_run).await.with_context(|| {
        format!("{} the relay of {}", if paused { "pausing" } else { "resuming" }, config.outbox_table().qualified())
    })?;
    if json {
        println!("{}", serde_json::to_string(&change)?);
        return Ok(());
    }
    let before = match &change.before {
        Some(p) => format!("paused by {} since {} UTC", p.by, p.since),
        None => "running".to_owned(),
    };
    let after = if paused {
        "paused: the leader publishes nothing within a second, its position kept"
    } else {
        "running: the leader publishes again within a second"
    };
    if change.dry_run {
        println!("dry run: {before}; would be {after}");
    } else {
        println!("was {before}; now {after} (audited)");
    }
    Ok(())
}

/// `reconcile`: compares, prints the differences, and fails with their exit code when
/// there are any.
async fn reconcile(config: &Config, pool: &Pool, args: ReconcileArgs, json: bool) -> anyhow::Result<()> {
    let window = Window::new(args.since, args.until)?;
    let outbox = config.outbox_table();
    let consumer_db = match args.consumer_db.map(DbUrl::new) {
        Some(url) => {
            let pool = db::connect_with("consumer", &url, &config.primary.tls, 1, &[])
                .await
                .context("connecting to the consumer database of --consumer-db")?;
            Some((pool, url))
        }
        None => None,
    };
    let primary = Side { role: "primary", pool, url: &config.primary.url };
    let (consumer, dedup) = match &consumer_db {
        Some((pool, url)) => (Side { role: "consumer", pool, url }, args.consumer_table),
        None => (primary, args.consumer_table.in_schema(&outbox.schema)),
    };
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let compared = Reconcile { primary, outbox: &outbox, consumer, dedup: &dedup }
        .run(&window, |read| {
            if interactive {
                eprint!("\rread {} outbox rows, {} dedup rows", read.outbox_rows, read.dedup_rows);
            }
        })
        .await
        .with_context(|| {
            format!(
                "reconciling {} with the consumer's dedup table {dedup} (the consumer kit creates it; name it with --consumer-table and, in another database, --consumer-db)",
                outbox.qualified()
            )
        });
    if interactive {
        eprintln!();
    }
    if let Some((pool, _)) = consumer_db {
        pool.disconnect().await.ok();
    }
    let found = compared?;
    if json {
        println!("{}", serde_json::to_string(&found)?);
    } else {
        print_differences(&found, &outbox.qualified(), &dedup);
    }
    Ok(found.verdict()?)
}

/// `verify`: samples SENT rows, looks them up on the broker, prints the missing ones
/// and fails with the differences' exit code when there are any.
async fn verify_on_broker(config: &Config, pool: &Pool, sample: usize, json: bool) -> anyhow::Result<()> {
    let table = config.outbox_table();
    let rows = verify::sample(pool, &table, sample, 0)
        .await
        .map_err(|e| db::DbError::query("primary", &config.primary.url, e))
        .with_context(|| format!("sampling SENT rows of {}", table.qualified()))?;
    let mq = &config.rocketmq;
    let settings = ProducerSettings {
        namesrv: mq.namesrv.clone(),
        group: format!("{}-verify", mq.producer_group),
        send_timeout: std::time::Duration::from_millis(mq.send_timeout_ms),
    };
    let producer = Producer::start_with(settings, mq.acl().as_ref()).await?;
    let verified = verify::check(&producer, rows).await;
    producer.shutdown().await;
    let verified = verified.with_context(|| format!("looking SENT rows up on the broker via {}", mq.namesrv))?;
    if json {
        println!("{}", serde_json::to_string(&verified)?);
    } else {
        println!("checked {} SENT rows on the broker: {} missing", verified.checked, verified.missing.len());
        let rows = verified.missing.iter().map(|m| {
            let found = if m.found_msg_ids.is_empty() { "no message".to_owned() } else { m.found_msg_ids.join(",") };
            vec![
                m.row.id.to_string(),
                m.row.event_id.clone(),
                m.row.topic.clone(),
                m.row.msg_id.clone().unwrap_or_default(),
                found,
            ]
        });
        if !verified.missing.is_empty() {
            print_table(&["id", "event_id", "topic", "msg_id", "on the broker"], rows.collect());
        }
    }
    Ok(verified.verdict()?)
}

fn print_differences(found: &Differences, outbox: &str, dedup: &DedupTable) {
    print_table(
        &["", ""],
        vec![
            vec!["window".into(), format!("{} .. {} (UTC, end excluded)", found.since, found.until)],
            vec!["SENT in the outbox".into(), format!("{} rows of {outbox}", found.sent_checked)],
            vec!["handled by the consumer".into(), format!("{} rows of {dedup}", found.processed_checked)],
        ],
    );
    for (what, ids) in [
        ("sent but never processed", &found.sent_not_processed),
        ("processed but unknown to the outbox", &found.processed_unknown),
    ] {
        println!("{what}: {}", ids.len());
        for id in ids {
            println!("  {id}");
        }
    }
}

fn print_position(view: &PositionView) {
    let path = view.local.path.display();
    let local = match &view.local.state {
        LocalState::Absent => format!("none at {path}"),
        LocalState::Empty => format!("{path}: no checkpoint saved yet"),
        LocalState::Saved { position: p } => {
            let server = if p.server.is_empty() { "?" } else { &p.server };
            format!("{} (server {server}) at {path}", describe_place(&p.file, p.pos, p.gtid.as_deref()))
        }
        LocalState::Unreadable { error } => format!("{path}: unreadable: {error}"),
    };
    print_table(
        &["", ""],
        vec![
            vec!["local".into(), local],
            vec!["mirror".into(), describe_mirror(view.mirror.as_ref())],
            vec!["leader".into(), describe_leader(view.leader.as_ref())],
        ],
    );
}

fn print_position_change(change: &PositionChange) {
    let after = &change.after;
    let new = describe_place(&after.file, after.pos, after.gtid.as_deref());
    let was = describe_mirror(change.before.as_ref());
    if change.dry_run {
        println!("dry run: would set the mirrored position to {new} (now {was})");
    } else {
        println!("position set (audited): mirror now {new}, was {was}");
    }
    if let Some(ended) = &change.ended_term {
        let what = if ended.was_leading {
            "it was leading: it steps down and starts again from the newer of its local checkpoint and this position"
        } else {
            "no leader was running"
        };
        println!("ended lease term {} of {} ({what})", ended.term, ended.holder);
    }
    let path = change.local_path.display();
    match change.local {
        LocalOutcome::NotPresent => println!("local checkpoint: none at {path} on this host"),
        LocalOutcome::Rewritten => println!("local checkpoint at {path}: rewritten to the same position"),
        LocalOutcome::InUse => println!(
            "local checkpoint at {path}: held by a running relay and not further, so left; the mirror was set and that relay takes it at its next leader term"
        ),
    }
}

fn operator(by: &ByWhom) -> Operator {
    Operator { name: by.operator.clone(), reason: by.reason.clone() }
}

fn report_change(change: Change, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(&change)?);
        return Ok(());
    }
    let list = |ids: &[u64]| ids.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    match (change.dry_run, change.ids.is_empty()) {
        (_, true) => println!("{}: no {} row to change; nothing to do", change.action, change.from),
        (true, false) => println!("dry run: would {} {} rows: {}", change.action, change.ids.len(), list(&change.ids)),
        (false, false) => {
            println!("{}: {} rows changed (audited): {}", change.action, change.ids.len(), list(&change.ids))
        }
    }
    if !change.left_alone.is_empty() {
        println!("not {}, left alone: {}", change.from, list(&change.left_alone));
    }
    Ok(())
}

/// Who leads, as a status line shows it.
fn describe_leader(leader: Option<&LeaderReport>) -> String {
    match leader {
        Some(l) if l.lease_remaining_ms >= 0 => {
            format!("{} (term {}, lease {:.1} s left)", l.holder, l.term, l.lease_remaining_ms as f64 / 1e3)
        }
        Some(l) => {
            format!("none: the lease of term {} ran out {:.1} s ago", l.term, -l.lease_remaining_ms as f64 / 1e3)
        }
        None => "none: no instance has held the lease yet".to_owned(),
    }
}

/// The mirrored checkpoint, as a status line shows it.
fn describe_mirror(position: Option<&PositionReport>) -> String {
    position.map_or_else(
        || "none mirrored yet".to_owned(),
        |p| {
            let server = p.server.as_deref().filter(|s| !s.is_empty()).unwrap_or("?");
            let place = describe_place(&p.file, p.pos, p.gtid.as_deref());
            format!("{place} (server {server}, term {}, at {})", p.term, p.updated_at)
        },
    )
}

/// `file:pos gtid G`; a position set by GTID alone has no file until the relay reads on.
fn describe_place(file: &str, pos: u64, gtid: Option<&str>) -> String {
    let gtid = gtid.map(|g| format!("gtid {g}"));
    match (file.is_empty(), gtid) {
        (false, Some(gtid)) => format!("{file}:{pos} {gtid}"),
        (false, None) => format!("{file}:{pos}"),
        (true, Some(gtid)) => gtid,
        (true, None) => "nowhere".to_owned(),
    }
}

/// Prints the status report as labelled lines.
fn print_status(report: &StatusReport) {
    let leader = describe_leader(report.leader.as_ref());
    let position = describe_mirror(report.position.as_ref());
    let rows: Vec<String> = report.rows.iter().map(|(name, n)| format!("{name} {n}")).collect();
    print_table(
        &["", ""],
        vec![
            vec!["table".into(), report.table.clone()],
            vec!["leader".into(), leader],
            vec!["position".into(), position],
            vec!["rows".into(), rows.join(", ")],
            vec!["waiting".into(), format!("{} (oldest {:.1} s)", report.waiting, report.oldest_waiting_seconds)],
            vec!["failed keys".into(), report.failed_keys.to_string()],
        ],
    );
}

/// `status --json`: the database's view, and the local instance's own (or why it
/// could not be asked).
#[derive(serde::Serialize)]
struct StatusOutput<'a> {
    #[serde(flatten)]
    report: &'a StatusReport,
    /// Every instance of the fleet, as each last reported itself.
    fleet: Option<&'a Vec<InstanceSeen>>,
    fleet_error: Option<&'a String>,
    instance: Option<&'a InstanceView>,
    instance_error: Option<&'a String>,
}

/// Prints the fleet's roll call: every instance, its role, term and readiness.
fn print_fleet(fleet: &Result<Vec<InstanceSeen>, String>) {
    let seen = match fleet {
        Ok(seen) => seen,
        Err(error) => {
            println!("\nfleet: cannot read the roll call: {error}");
            return;
        }
    };
    println!("\nfleet ({} instances):", seen.len());
    print_table(
        &["instance", "http", "role", "term", "ready", "seen"],
        seen.iter()
            .map(|i| {
                let ready = match (&i.report.reason, i.report.ready) {
                    (_, true) => "yes".to_owned(),
                    (Some(reason), false) => format!("no: {reason}"),
                    (None, false) => "no".to_owned(),
                };
                vec![
                    i.report.instance.clone(),
                    i.report.http.clone(),
                    i.report.role.name().to_owned(),
                    i.report.term.to_string(),
                    ready,
                    seen_ago(i),
                ]
            })
            .collect(),
    );
}

/// When an instance last reported; a silent one's row is stale, and says so.
fn seen_ago(instance: &InstanceSeen) -> String {
    let ago = format!("{:.0} s ago", instance.seen_secs_ago);
    if instance.silent {
        format!("{ago}: SILENT (killed, hung or cut off from the primary; its row is stale)")
    } else {
        ago
    }
}

/// Prints what the instance on `http.listen` says of itself: role, lags, problems.
fn print_instance(instance: &Result<InstanceView, String>) {
    let view = match instance {
        Ok(view) => view,
        Err(error) => return println!("\nthis host's relay: not asked ({error})"),
    };
    let readiness = if view.ready { "ready" } else { "NOT READY" };
    println!("\nthe relay on http://{}: {}, {readiness}", view.address, view.role);
    let gauges = view.gauges.iter().map(|(name, value)| vec![name.clone(), format_gauge(*value)]).collect();
    print_table(&["", ""], gauges);
    for problem in &view.problems {
        println!("problem: {problem}");
    }
}

/// A gauge as a person reads it: NaN is "unknown" (a standby, or not measured yet).
fn format_gauge(value: f64) -> String {
    if value.is_nan() {
        "unknown".to_owned()
    } else {
        format!("{value:.1}")
    }
}

/// `outbox-relay check`: every check as one line (or the list as JSON). Any FAIL is
/// an error of the environment class, so the command exits 4 after the report.
pub async fn check(config: &Config, json: bool) -> anyhow::Result<()> {
    let report = check::run(config).await;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_table(
            &["result", "check", "found", "fix"],
            report
                .findings
                .iter()
                .map(|f| {
                    vec![
                        f.level.label().to_owned(),
                        format!("{} {}", f.group.label(), f.name),
                        f.found.clone(),
                        f.fix.clone().unwrap_or_default(),
                    ]
                })
                .collect(),
        );
    }
    match report.failures() {
        0 => Ok(()),
        failed => Err(outbox_relay::relay::RelayError::Environment(format!(
            "{failed} of {} checks FAILED; each FAIL line above names its fix",
            report.findings.len()
        ))
        .into()),
    }
}
