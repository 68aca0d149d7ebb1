//! One run of the harness: a fresh outbox table, business table and topic; the
//! independent consumer; the relays; the load; the schedule's faults one after the
//! other, each followed by a wait for a ready leader; then the load stops, the
//! relays get time to deliver everything, and the verdict is computed.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
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

/// Runs the harness as `options` say.
pub async fn run(options: Options) -> anyhow::Result<Outcome> {
    let seed = options.seed.unwrap_or_else(clock_seed);
    let lease = Duration::from_millis(options.lease_ms);
    let schedule = Schedule::draw(seed, options.cycles, options.kills, lease);
    let dir = std::env::temp_dir().join(format!("outbox-chaos-{seed}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    tracing::info!("seed {seed}, {} faults, logs in {}", schedule.faults.len(), dir.display());
    let stack = Stack::from_env(&dir.join("stack.log"))?;
    stack.up().await?;
    let mut run = Run::prepare(&options, stack, &dir).await?;
    let result = run.drive(&schedule, seed).await;
    run.fleet.kill_all()?;
    run.consumer.shutdown().await;
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
    let (report, passed) = report::render(&header, &tallies, &verdict, run.stopped.as_deref());
    Ok(Outcome { report, passed })
}

fn clock_seed() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
}

/// What one run works with.
struct Run<'a> {
    options: &'a Options,
    stack: Stack,
    pool: Pool,
    table: OutboxTable,
    topic: String,
    fleet: Fleet,
    consumer: Consumer,
    /// Why the schedule stopped early, if it did (the verdict is still computed).
    stopped: Option<String>,
}

impl<'a> Run<'a> {
    /// A fresh table and topic, the relays' configuration, the consumer and the fleet.
    async fn prepare(options: &'a Options, stack: Stack, dir: &Path) -> anyhow::Result<Self> {
        let pool = outbox_relay::db::connect("chaos", &DbUrl::new(&stack.primary_root_url), 16)
            .await
            .context("the stack's primary (scripts/stack up)")?;
        let table = OutboxTable { schema: "app".into(), table: unique("chaos") };
        outbox_relay::store::migrate(&pool, &table, outbox_relay::store::PartitionPlan::AsItIs)
            .await
            .context("create the run's outbox table")?;
        let topic = unique("chaos");
        outbox_relay::ops::admin::create_topic(
            outbox_relay::ops::admin::NameServer::unsigned(&stack.namesrv),
            "DefaultCluster",
            &topic,
            QUEUES,
            None,
        )
        .await
        .with_context(|| format!("create topic {topic}"))?;
        let config = dir.join("relay.toml");
        let lease = Duration::from_millis(options.lease_ms);
        let settings = RelaySettings {
            primary_url: &stack.writer_url,
            namesrv: &stack.namesrv,
            table: &table.table,
            topic: &topic,
            queues: QUEUES,
            lease,
        };
        settings.write(&config).with_context(|| format!("write {}", config.display()))?;
        let consumer = Consumer::start(&stack.namesrv, &topic, &unique("chaos_consumer")).await?;
        let env = if options.break_relay {
            vec![(BROKEN_RELAY_ENV.0.to_owned(), BROKEN_RELAY_ENV.1.to_owned())]
        } else {
            vec![]
        };
        let sources = stack.replicas.iter().map(|r| r.repl_url.clone()).collect();
        let qualified = format!("{}.{}", table.schema, table.table);
        let fleet =
            Fleet::new(&relay_binary(options)?, &config, &qualified, dir, env, sources, options.relays as usize);
        Ok(Self { options, stack, pool, table, topic, fleet, consumer, stopped: None })
    }

    /// Load, faults, settling and the verdict.
    async fn drive(&mut self, schedule: &Schedule, seed: u64) -> anyhow::Result<(Verdict, BTreeMap<FaultKind, Tally>)> {
        let recover = Duration::from_secs(self.options.recover_secs);
        self.fleet.start_baseline()?;
        let (first, exits) = self.fleet.wait_ready_leader(recover).await;
        anyhow::ensure!(first.is_some(), "no relay became a ready leader within {recover:?} of the start: {exits:?}");
        let started = Instant::now();
        let load = Load::start(&self.pool, self.load_settings(), &mut Rng::new(seed ^ 0x5EED)).await?;
        let mut tallies: BTreeMap<FaultKind, Tally> = BTreeMap::new();
        let mut injected = Vec::new();
        for (n, fault) in schedule.faults.iter().enumerate() {
            tokio::time::sleep(fault.after).await;
            injected.push(Injected { kind: fault.kind, started_ms: now_ms() });
            if let Err(error) = faults::inject(&self.stack, &mut self.fleet, fault).await {
                let stopped = format!("the schedule stopped at fault {} ({}): {error:#}", n + 1, fault.kind.name());
                tracing::error!("{stopped}");
                self.stopped = Some(stopped);
                break;
            }
            self.fleet.start_baseline()?;
            let (recovered, exits) = self.fleet.wait_ready_leader(recover).await;
            record(tallies.entry(fault.kind).or_default(), recovered, &exits);
            let outcome = recovered
                .map_or("NOT RECOVERED".to_owned(), |d| format!("ready leader after {:.1} s", d.as_secs_f64()));
            let (held, total) = (fault.hold.as_secs_f64(), schedule.faults.len());
            tracing::info!("[{}/{total}] {} (held {held:.1} s): {outcome}", n + 1, fault.kind.name());
        }
        if let Err(error) = self.stack.up().await {
            tracing::error!("the stack is not whole before settling: {error:#}");
        }
        self.fleet.start_baseline()?;
        if let Some(rest) = Duration::from_secs(self.options.duration).checked_sub(started.elapsed()) {
            tokio::time::sleep(rest).await;
        }
        let written = load.finish().await?;
        tracing::info!("load stopped after {:.0} s; settling", started.elapsed().as_secs_f64());
        self.settle(Duration::from_secs(self.options.settle_secs)).await?;
        let rows = stored_rows(&self.pool, &self.table).await?;
        Ok((Verdict::compute(&written, &rows, &self.consumer.received(), &injected), tallies))
    }

    fn load_settings(&self) -> LoadSettings {
        LoadSettings {
            rate: self.options.rate,
            writers: self.options.writers as usize,
            keys: self.options.keys as usize,
            topic: self.topic.clone(),
            accounts: format!("`app`.`{}`", unique("chaos_accounts")),
            outbox: self.table.clone(),
        }
    }

    /// Waits until every row of the table is SENT and the consumer has every event, or
    /// `deadline` passes (the verdict then names what is missing).
    async fn settle(&self, deadline: Duration) -> anyhow::Result<()> {
        let started = Instant::now();
        while started.elapsed() < deadline {
            if self.settled().await? {
                tracing::info!("settled in {:.1} s", started.elapsed().as_secs_f64());
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        tracing::warn!("not settled within {deadline:?}");
        Ok(())
    }

    async fn settled(&self) -> anyhow::Result<bool> {
        let sql = format!("SELECT COUNT(*) FROM {} WHERE status <> {}", self.table.qualified(), RowStatus::Sent.code());
        let unsent: Option<u64> = self.pool.get_conn().await?.query_first(sql).await.context("count unsent rows")?;
        if unsent != Some(0) {
            return Ok(false);
        }
        let delivered: HashSet<String> = self.consumer.received().into_iter().map(|r| r.event_id).collect();
        Ok(stored_rows(&self.pool, &self.table).await?.iter().all(|r| delivered.contains(&r.event_id)))
    }
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

fn record(tally: &mut Tally, recovered: Option<Duration>, exits: &[UnplannedExit]) {
    tally.injected += 1;
    match recovered {
        Some(took) => tally.worst_recovery = tally.worst_recovery.max(took),
        None => tally.unrecovered += 1,
    }
    tally.relay_exits += exits.len();
    for exit in exits {
        tracing::error!("relay {} exited on its own ({:?}); log {}", exit.slot, exit.code, exit.log.display());
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

async fn stored_rows(pool: &Pool, table: &OutboxTable) -> anyhow::Result<Vec<StoredRow>> {
    let rows: Vec<(String, u8, bool)> = pool
        .get_conn()
        .await?
        .query(format!("SELECT event_id, status, msg_id IS NOT NULL FROM {}", table.qualified()))
        .await
        .context("read the outbox rows")?;
    rows.into_iter()
        .map(|(event_id, status, has_msg_id)| {
            let status =
                RowStatus::from_code(status).with_context(|| format!("unknown status {status} of {event_id}"))?;
            Ok(StoredRow { event_id, status, has_msg_id })
        })
        .collect()
}
