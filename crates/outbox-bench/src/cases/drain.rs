//! `drain`: rows committed while the relay is stopped, then the relay started. Timed,
//! with each process's CPU, from the relay's start until every row is SENT in the table
//! and, in binlog mode, the mirrored checkpoint has reached the end of the binlog.
//!
//! Not from its readiness: the relay sends as soon as its reader streams, and reports
//! ready only once its first sweep has run too, so events (and their CPU) sent before
//! "ready" would count without their time; a first sweep slow enough made a whole
//! drain look instant.

use std::time::{Duration, Instant};

use crate::cpu::CpuPerEvent;
use crate::options::Mode;
use crate::report::Measurement;
use crate::rig::{until, Rig};

/// The longest a drain may take before the run is called failed.
const LIMIT: Duration = Duration::from_secs(1_800);

pub async fn run_modes(rig: &Rig) -> anyhow::Result<Vec<Measurement>> {
    let mut results = Vec::new();
    for &mode in &rig.options.modes {
        results.push(backlog(rig, mode, "drain", rig.options.events).await?);
    }
    Ok(results)
}

/// `--events` rows committed before a relay's first start: its full sweep sends them
/// (the fallback's rate), measured as `drain` is.
pub async fn first_start(rig: &Rig) -> anyhow::Result<Measurement> {
    backlog_from(rig, Mode::Binlog, "sweep-drain", rig.options.events, Path::FirstStart).await
}

/// Commits `rows` rows with the relay stopped, then measures the drain.
pub async fn backlog(rig: &Rig, mode: Mode, case: &'static str, rows: usize) -> anyhow::Result<Measurement> {
    backlog_from(rig, mode, case, rows, Path::Binlog).await
}

/// Which path a binlog-mode relay drains a backlog by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// It has a checkpoint from before the rows: the binlog path reads every one.
    Binlog,
    /// It starts without one: its first start's full sweep claims them.
    FirstStart,
}

async fn backlog_from(
    rig: &Rig,
    mode: Mode,
    case: &'static str,
    rows: usize,
    path: Path,
) -> anyhow::Result<Measurement> {
    let table = rig.table().await?;
    let workload = rig.workload(case).await?;
    let checkpoint = rig.checkpoint_dir();
    if mode == Mode::Binlog && path == Path::Binlog {
        // A checkpoint from before the rows, so the binlog path reads every one of them.
        let mut relay = rig.relay(mode, &table, &checkpoint)?;
        relay.wait_ready().await?;
        relay.stop()?;
    }
    rig.insert(&table, &workload, 0..rows, 1_000).await?;
    let end = rig.binlog_end().await?;
    let mut relay = rig.relay(mode, &table, &checkpoint)?;
    let started = Instant::now();
    let processes = rig.processes(relay.pid());
    let cpu_before = processes.read()?;
    let ready = relay.wait_ready().await?;
    let send_ok = until("every row SEND_OK", LIMIT, || async {
        Ok(relay.metric_sum("relay_events_published_total").unwrap_or(0.0) >= rows as f64)
    })
    .await?;
    let mut done = until("every row SENT in the table", LIMIT, || async { Ok(rig.unsent(&table).await? == 0) }).await?;
    if mode == Mode::Binlog {
        done = until("the checkpoint at the end of the binlog", LIMIT, || async {
            Ok(rig.mirrored_checkpoint(&table).await?.is_some_and(|at| at >= end))
        })
        .await?;
    }
    let cpu_after = processes.read()?;
    let mut measurement = Measurement::throughput(case, mode.name(), rows, (done - started).as_secs_f64());
    measurement.cpu = CpuPerEvent::between(&cpu_before, &cpu_after, rows);
    measurement.ready_seconds = Some((ready - started).as_secs_f64());
    measurement.send_ok_seconds = Some((send_ok - started).as_secs_f64());
    measurement.peak_rss_mib = Some(relay.peak_rss_mib()?);
    relay.stop()?;
    rig.drop_table(&table).await?;
    Ok(measurement)
}
