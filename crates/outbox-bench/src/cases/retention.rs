//! `retention`: what retiring expired SENT rows costs, batch DELETE against partition
//! DROP, side by side. Each method gets a table holding `--retention-rows` SENT rows
//! created three days ago (bodies of `--retention-body-bytes`), and a relay that
//! publishes a `--rate` load of new single-row transactions into the same table while
//! its leader retires the old rows on its own schedule (`[cleanup]`, one day of
//! retention, the default batches): by DELETE in batches of 1,000 with 50 ms between
//! them on an unpartitioned table, by dropping the expired partition on a table
//! partitioned by day (converted in place after the fill, which is timed too).
//!
//! Each side reports, from the relay's start until the last old row is gone (at least
//! `MIN_WINDOW`, so the load's latency has as many samples on both sides): the wall
//! time, the CPU seconds of the primary, the replicas and the relay, the binlog bytes
//! the primary wrote beyond the load's own (the load's bytes per event are taken from
//! the DROP side, whose retention writes one statement), and the load's created_at to
//! SEND_OK (sent_at) p50 and p99.

use std::time::{Duration, Instant};

use anyhow::Context;
use mysql_async::prelude::Queryable;
use outbox_kit::OutboxTable;
use outbox_relay::config::{DbUrl, PartitionPeriod};
use outbox_relay::store::{migrate, PartitionPlan};
use serde::Serialize;

use crate::cpu::Role;
use crate::options::Mode;
use crate::report::{Measurement, Percentiles};
use crate::rig::{until, Rig};
use crate::workload::Workload;

/// Rows per INSERT ... SELECT of the fill.
const FILL_CHUNK: usize = 100_000;
/// The shortest window measured, so both sides' latencies have enough samples.
const MIN_WINDOW: Duration = Duration::from_secs(60);
/// The load's writer connections.
const WRITERS: usize = 8;

/// How old rows are retired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Delete,
    Drop,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Delete => "delete",
            Method::Drop => "drop",
        }
    }
}

/// What one side of the comparison cost.
#[derive(Debug, Clone, Serialize)]
pub struct RetentionCost {
    pub rows_retired: usize,
    /// The in-place conversion of the filled table to partitions (DROP side only).
    pub convert_seconds: Option<f64>,
    pub primary_cpu_s: f64,
    pub replicas_cpu_s: f64,
    pub relay_cpu_s: f64,
    /// Binlog bytes written in the window beyond the load's own, MiB.
    pub binlog_mib_beyond_load: f64,
    pub load_events: usize,
}

pub async fn run(rig: &Rig) -> anyhow::Result<Vec<Measurement>> {
    let drop = side(rig, Method::Drop).await?;
    let delete = side(rig, Method::Delete).await?;
    let load_bytes_per_event = drop.binlog_bytes as f64 / drop.cost.load_events.max(1) as f64;
    Ok([drop, delete].into_iter().map(|side| side.measurement(load_bytes_per_event)).collect())
}

/// One side's raw outcome.
struct Side {
    method: Method,
    seconds: f64,
    binlog_bytes: u64,
    latency: Option<Percentiles>,
    cost: RetentionCost,
}

impl Side {
    fn measurement(mut self, load_bytes_per_event: f64) -> Measurement {
        let beyond = self.binlog_bytes as f64 - load_bytes_per_event * self.cost.load_events as f64;
        self.cost.binlog_mib_beyond_load = beyond.max(0.0) / (1024.0 * 1024.0);
        let mut m = Measurement::throughput("retention", self.method.name(), self.cost.rows_retired, self.seconds);
        m.latency = self.latency;
        m.offered_per_s = Some(self.cost.load_events as f64 / self.seconds.max(MIN_WINDOW.as_secs_f64()));
        m.retention = Some(self.cost);
        m
    }
}

async fn side(rig: &Rig, method: Method) -> anyhow::Result<Side> {
    let table = rig.table().await?;
    let workload = Workload { body_bytes: rig.options.retention_body_bytes, ..rig.workload("retention").await? };
    let rows = rig.options.retention_rows;
    fill(rig, &table, &workload, rows).await?;
    let convert_seconds = match method {
        Method::Delete => None,
        Method::Drop => Some(convert(rig, &table).await?),
    };
    wait_source_caught_up(rig).await?;
    let binlog_before = binlog_bytes(rig).await?;
    let started = Instant::now();
    let mut relay = rig.relay_with(Mode::Binlog, &table, &rig.checkpoint_dir(), &retention_settings(method))?;
    let processes = rig.processes(relay.pid());
    let cpu_before = processes.read()?;
    let load = Load::start(rig, &table, &workload, rows).await?;
    relay.wait_ready().await?;
    until("every old row retired", Duration::from_secs(3_600), || old_rows_gone(rig, &table, rows)).await?;
    let retired_after = started.elapsed();
    let window_end = started + retired_after.max(MIN_WINDOW);
    tokio::time::sleep_until(window_end.into()).await;
    let load_events = load.stop().await?;
    let cpu_after = processes.read()?;
    let binlog_bytes = binlog_bytes(rig).await?.saturating_sub(binlog_before);
    until("every load event SENT", Duration::from_secs(600), || async { Ok(rig.unsent(&table).await? == 0) }).await?;
    let latency = Percentiles::of(load_latencies_ms(rig, &table, &workload).await?);
    relay.stop()?;
    rig.drop_table(&table).await?;
    let cpu = |role| cpu_after.seconds(role) - cpu_before.seconds(role);
    let cost = RetentionCost {
        rows_retired: rows,
        convert_seconds,
        primary_cpu_s: cpu(Role::Primary),
        replicas_cpu_s: cpu(Role::Replicas),
        relay_cpu_s: cpu(Role::Relay),
        binlog_mib_beyond_load: 0.0,
        load_events,
    };
    Ok(Side { method, seconds: retired_after.as_secs_f64(), binlog_bytes, latency, cost })
}

/// The relay's retention: every second, one day kept; DELETE batches as configured by
/// default (1,000 rows, 50 ms apart).
fn retention_settings(method: Method) -> Vec<(String, String)> {
    let mut env = vec![
        ("OUTBOX_RELAY__CLEANUP__INTERVAL_MS".to_owned(), "1000".to_owned()),
        ("OUTBOX_RELAY__CLEANUP__RETENTION_SECS".to_owned(), "86400".to_owned()),
    ];
    if method == Method::Drop {
        env.push(("OUTBOX_RELAY__OUTBOX__PARTITION".to_owned(), PartitionPeriod::Daily.name().to_owned()));
    }
    env
}

/// `rows` SENT rows created three days ago, in statements of [`FILL_CHUNK`] rows.
async fn fill(rig: &Rig, table: &OutboxTable, workload: &Workload, rows: usize) -> anyhow::Result<()> {
    let mut conn = rig.root.get_conn().await?;
    let payload = workload.payload(0).replace('\'', "");
    for start in (1..=rows).step_by(FILL_CHUNK) {
        let end = (start + FILL_CHUNK - 1).min(rows);
        conn.query_drop(format!(
            "INSERT INTO {} (event_id, biz_key, topic, payload, status, msg_id, sent_at, created_at) \
             SELECT CONCAT('old-', seq), CONCAT('key-', seq % 1000), '{}', '{payload}', 2, 'OLD', \
             NOW(3) - INTERVAL 3 DAY, NOW(3) - INTERVAL 3 DAY FROM seq_{start}_to_{end}",
            table.qualified(),
            workload.topic
        ))
        .await
        .context("fill the table with old SENT rows (MariaDB's sequence engine)")?;
    }
    Ok(())
}

/// Converts the table to daily partitions in place; how long that took.
async fn convert(rig: &Rig, table: &OutboxTable) -> anyhow::Result<f64> {
    let started = Instant::now();
    migrate(&rig.root, table, PartitionPlan::Convert(PartitionPeriod::Daily)).await.context("convert to partitions")?;
    Ok(started.elapsed().as_secs_f64())
}

/// Waits until the relay's source applied everything the primary wrote (the fill and
/// the conversion), so that the window measures the retention alone.
async fn wait_source_caught_up(rig: &Rig) -> anyhow::Result<()> {
    let target: Option<String> = rig.root.get_conn().await?.query_first("SELECT @@gtid_binlog_pos").await?;
    let target = target.unwrap_or_default();
    let source = mysql_async::Pool::new(rig.options.replica_root_url.as_str());
    let caught_up = until("the relay's source caught up with the fill", Duration::from_secs(1_800), || {
        let (source, target) = (source.clone(), target.clone());
        async move {
            let done: Option<i64> =
                source.get_conn().await?.exec_first("SELECT MASTER_GTID_WAIT(?, 1)", (target,)).await?;
            Ok(done == Some(0))
        }
    })
    .await;
    source.disconnect().await.ok();
    caught_up.map(|_| ())
}

/// Bytes in the primary's binlog files.
async fn binlog_bytes(rig: &Rig) -> anyhow::Result<u64> {
    let logs: Vec<mysql_async::Row> = rig.root.get_conn().await?.query("SHOW BINARY LOGS").await?;
    Ok(logs.iter().filter_map(|row| row.get::<u64, _>(1)).sum())
}

/// Whether the fill's rows (the table's first ids) are all gone: one primary key probe.
async fn old_rows_gone(rig: &Rig, table: &OutboxTable, rows: usize) -> anyhow::Result<bool> {
    let old: Option<u64> = rig
        .root
        .get_conn()
        .await?
        .exec_first(format!("SELECT EXISTS (SELECT 1 FROM {} WHERE id <= ?)", table.qualified()), (rows,))
        .await?;
    Ok(old == Some(0))
}

/// The load's created_at to sent_at, milliseconds.
async fn load_latencies_ms(rig: &Rig, table: &OutboxTable, workload: &Workload) -> anyhow::Result<Vec<f64>> {
    let rows: Vec<i64> = rig
        .root
        .get_conn()
        .await?
        .exec(
            format!(
                "SELECT TIMESTAMPDIFF(MICROSECOND, created_at, sent_at) FROM {} WHERE event_id LIKE ?",
                table.qualified()
            ),
            (format!("{}-%", workload.prefix),),
        )
        .await?;
    Ok(rows.into_iter().map(|us| us as f64 / 1_000.0).collect())
}

/// Single-row transactions at `--rate` per second over [`WRITERS`] connections of a
/// pool of their own (the rig's is needed meanwhile to watch the table).
struct Load {
    stop: tokio::sync::watch::Sender<bool>,
    writers: Vec<tokio::task::JoinHandle<anyhow::Result<usize>>>,
    pool: mysql_async::Pool,
}

impl Load {
    /// Event numbers start at `first` (above the fill's).
    async fn start(rig: &Rig, table: &OutboxTable, workload: &Workload, first: usize) -> anyhow::Result<Self> {
        let pool = outbox_relay::db::connect("load", &DbUrl::new(&rig.options.db_url), WRITERS)
            .await
            .context("the load's connections")?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let interval = Duration::from_secs_f64(WRITERS as f64 / rig.options.rate.max(1) as f64);
        let writers = (0..WRITERS)
            .map(|writer| {
                let (pool, table, workload, stopped) = (pool.clone(), table.clone(), workload.clone(), stopped.clone());
                tokio::spawn(async move {
                    let mut conn = pool.get_conn().await?;
                    let mut next = tokio::time::Instant::now();
                    let mut written = 0;
                    while !*stopped.borrow() {
                        Rig::insert_one(&mut conn, &table, &workload, first + writer + written * WRITERS).await?;
                        written += 1;
                        next += interval;
                        tokio::time::sleep_until(next).await;
                    }
                    Ok(written)
                })
            })
            .collect();
        Ok(Self { stop, writers, pool })
    }

    /// Stops the writers; how many rows they wrote.
    async fn stop(self) -> anyhow::Result<usize> {
        self.stop.send(true).context("stop the load")?;
        let mut total = 0;
        for writer in self.writers {
            total += writer.await.context("load writer")??;
        }
        self.pool.disconnect().await.ok();
        Ok(total)
    }
}
