//! One run of the harness: a fresh outbox table, business table and topic; the
//! independent consumer; the relays; the load; the schedule's faults one after the
//! other, each followed by a wait for a ready leader; then the load stops, the
//! relays get time to deliver everything, and the verdict is computed.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use mysql_async::prelude::Queryable;
use mysql_async::Pool;
use outbox_kit::{OutboxTable, RowStatus};
use outbox_relay::config::DbUrl;
use outbox_test_support::unique;

use crate::consumer::Consumer;
use crate::faults;
use crate::fleet::{Fleet, UnplannedExit};
use crate::load::{Load, LoadSettings};
use crate::options::Options;
use crate::relay_config::RelaySettings;
use crate::report::{self, Tally};
use crate::rng::Rng;
use crate::schedule::{FaultKind, Schedule};
use crate::stack::Stack;
use crate::verdict::{Injected, StoredRow, Verdict};

/// Queues of the run's topic.
const QUEUES: u32 = 8;
/// Relay environment that makes every relay acknowledge one send in this many
/// without sending it (needs the fault-injection feature).
const BROKEN_RELAY_ENV: (&str, &str) = ("OUTBOX_RELAY_FAULT_ACK_WITHOUT_SEND_EVERY", "20");

/// The report and whether the run passed.
pub struct Outcome {
    pub report: String,
    pub passed: bool,
}

pub async fn run(options: Options) -> anyhow::Result<Outcome> {
    let seed = options.seed.unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64));
    let lease = Duration::from_millis(options.lease_ms);
    let schedule = Schedule::draw(seed, options.cycles, options.kills, lease);
    let dir = std::env::temp_dir().join(format!("outbox-chaos-{seed}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    eprintln!("outbox-chaos: seed {seed}, {} faults, logs in {}", schedule.faults.len(), dir.display());
    let stack = Stack::from_env(&dir.join("stack.log"))?;
    stack.up().await?;
    let pool = outbox_relay::db::connect("chaos", &DbUrl::new(&stack.primary_root_url), 16)
        .await
        .context("the stack's primary (scripts/stack up)")?;
    let table = OutboxTable { schema: "app".into(), table: unique("chaos") };
    outbox_relay::store::migrate(&pool, &table).await.context("create the run's outbox table")?;
    let topic = unique("chaos");
    outbox_relay::admin::create_topic(&stack.namesrv, "DefaultCluster", &topic, QUEUES)
        .await
        .with_context(|| format!("create topic {topic}"))?;
    let config = dir.join("relay.toml");
    let settings =
        RelaySettings { primary_url: &stack.writer_url, namesrv: &stack.namesrv, table: &table.table, topic: &topic, queues: QUEUES, lease };
    settings.write(&config)?;
    let consumer = Consumer::start(&stack.namesrv, &topic, &unique("chaos_consumer")).await?;
    let env = if options.break_relay { vec![(BROKEN_RELAY_ENV.0.to_owned(), BROKEN_RELAY_ENV.1.to_owned())] } else { vec![] };
    let sources = stack.replicas.iter().map(|r| r.repl_url.clone()).collect();
    let mut fleet = Fleet::new(&relay_binary(&options)?, &config, &dir, env, sources, options.relays);
    let result = drive(&options, &stack, &pool, &table, &topic, &schedule, &mut fleet, &consumer, seed).await;
    fleet.kill_all()?;
    consumer.shutdown().await;
    let (verdict, tallies) = result?;
    let header = format!(
        "outbox-chaos seed {seed}: {} faults ({} rounds, {} kills per round), {} events/s offered, {} relays, lease {} ms; logs {}",
        schedule.faults.len(),
        options.cycles,
        options.kills,
        options.rate,
        options.relays,
        options.lease_ms,
        dir.display()
    );
    let (report, passed) = report::render(&header, &tallies, &verdict);
    Ok(Outcome { report, passed })
}

fn relay_binary(options: &Options) -> anyhow::Result<PathBuf> {
    let binary = match &options.relay {
        Some(path) => path.clone(),
        None => std::env::current_exe()?.with_file_name("outbox-relay"),
    };
    anyhow::ensure!(
        binary.exists(),
        "relay binary {} not found: build it with cargo build --features outbox-relay/fault-injection --bins (scripts/chaos does)",
        binary.display()
    );
    Ok(binary)
}

/// Load, faults, settling and the verdict.
#[allow(clippy::too_many_arguments)]
async fn drive(
    options: &Options,
    stack: &Stack,
    pool: &Pool,
    table: &OutboxTable,
    topic: &str,
    schedule: &Schedule,
    fleet: &mut Fleet,
    consumer: &Consumer,
    seed: u64,
) -> anyhow::Result<(Verdict, BTreeMap<FaultKind, Tally>)> {
    let recover = Duration::from_secs(options.recover_secs);
    fleet.start_baseline()?;
    let (first, exits) = fleet.wait_ready_leader(recover).await;
    anyhow::ensure!(first.is_some(), "no relay became a ready leader within {recover:?} of the start; relay logs: {exits:?}");
    let mut rng = Rng::new(seed ^ 0x5EED);
    let settings = LoadSettings {
        rate: options.rate,
        writers: options.writers,
        keys: options.keys,
        topic: topic.to_owned(),
        accounts: format!("`app`.`{}`", unique("chaos_accounts")),
        outbox: table.clone(),
    };
    let started = Instant::now();
    let load = Load::start(pool, settings, &mut rng).await?;
    let mut tallies: BTreeMap<FaultKind, Tally> = BTreeMap::new();
    let mut injected = Vec::new();
    for (n, fault) in schedule.faults.iter().enumerate() {
        tokio::time::sleep(fault.after).await;
        injected.push(Injected { kind: fault.kind, started_ms: now_ms() });
        faults::inject(stack, fleet, fault).await.with_context(|| format!("inject {}", fault.kind.name()))?;
        fleet.start_baseline()?;
        let (recovered, exits) = fleet.wait_ready_leader(recover).await;
        record(tallies.entry(fault.kind).or_default(), recovered, &exits);
        eprintln!(
            "outbox-chaos: [{}/{}] {} (held {:.1} s): {}",
            n + 1,
            schedule.faults.len(),
            fault.kind.name(),
            fault.hold.as_secs_f64(),
            recovered.map_or("NOT RECOVERED".to_owned(), |d| format!("ready leader after {:.1} s", d.as_secs_f64()))
        );
    }
    if let Some(rest) = Duration::from_secs(options.duration).checked_sub(started.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let written = load.finish().await?;
    eprintln!("outbox-chaos: load stopped after {:.0} s; settling", started.elapsed().as_secs_f64());
    settle(pool, table, consumer, Duration::from_secs(options.settle_secs)).await?;
    let rows = stored_rows(pool, table).await?;
    Ok((Verdict::compute(&written, &rows, &consumer.received(), &injected), tallies))
}

fn record(tally: &mut Tally, recovered: Option<Duration>, exits: &[UnplannedExit]) {
    tally.injected += 1;
    match recovered {
        Some(took) => tally.worst_recovery = tally.worst_recovery.max(took),
        None => tally.unrecovered += 1,
    }
    tally.relay_exits += exits.len();
    for exit in exits {
        eprintln!("outbox-chaos: relay {} exited on its own ({:?}); log {}", exit.slot, exit.code, exit.log.display());
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Waits until every row of the table is SENT and the consumer has every event, or
/// `deadline` passes (the verdict then names what is missing).
async fn settle(pool: &Pool, table: &OutboxTable, consumer: &Consumer, deadline: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    while started.elapsed() < deadline {
        let unsent: Option<u64> = pool
            .get_conn()
            .await?
            .query_first(format!("SELECT COUNT(*) FROM {} WHERE status <> {}", table.qualified(), RowStatus::Sent.code()))
            .await?;
        if unsent == Some(0) {
            let rows = stored_rows(pool, table).await?;
            let delivered: HashSet<String> = consumer.received().into_iter().map(|r| r.event_id).collect();
            if rows.iter().all(|r| delivered.contains(&r.event_id)) {
                eprintln!("outbox-chaos: settled in {:.1} s", started.elapsed().as_secs_f64());
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!("outbox-chaos: not settled within {deadline:?}");
    Ok(())
}

async fn stored_rows(pool: &Pool, table: &OutboxTable) -> anyhow::Result<Vec<StoredRow>> {
    let rows: Vec<(String, u8, bool)> = pool
        .get_conn()
        .await?
        .query(format!("SELECT event_id, status, msg_id IS NOT NULL FROM {}", table.qualified()))
        .await?;
    rows.into_iter()
        .map(|(event_id, status, has_msg_id)| {
            let status = RowStatus::from_code(status).with_context(|| format!("unknown status {status} of {event_id}"))?;
            Ok(StoredRow { event_id, status, has_msg_id })
        })
        .collect()
}
