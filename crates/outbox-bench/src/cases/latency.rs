//! `latency`: a fixed offered load of single-row transactions (`--rate` per second for
//! `--seconds`), commit to SEND_OK per event. The commit time is taken by the writer
//! when its COMMIT returns (fractional seconds); SEND_OK is the row's `sent_at`, which
//! the relay records when the broker answers (millisecond resolution). Beside it, the
//! median of the relay's own `relay_commit_to_ack_seconds` over the same events, so
//! the metric can be checked against an outside measurement: the relay's measure
//! starts at the row's `created_at`, the INSERT's start (MariaDB's binlog has no finer
//! commit time than whole seconds), so the bench also gives its own median from the
//! instant each writer sent its INSERT. It also counts the relay's own transactions on
//! the primary (those it binlogged beyond the writers' one per event).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use mysql_async::prelude::Queryable;

use crate::cpu::CpuPerEvent;
use crate::options::Mode;
use crate::report::{histogram_max_at_most, histogram_quantile, Measurement, Percentiles};
use crate::rig::{until, Rig};

/// Concurrent writer connections, so commits overlap as in an application.
const WRITERS: usize = 8;

/// The case in every mode; with `held` keys held behind a FAILED row each (the
/// `held` case), none of them a key of the load.
pub async fn run_modes(rig: &Rig, held: usize) -> anyhow::Result<Vec<Measurement>> {
    let mut results = Vec::new();
    for &mode in &rig.options.modes {
        results.push(run(rig, mode, held).await?);
    }
    Ok(results)
}

async fn run(rig: &Rig, mode: Mode, held: usize) -> anyhow::Result<Measurement> {
    let case = if held > 0 { "held" } else { "latency" };
    let table = rig.table().await?;
    let workload = rig.workload(case).await?;
    rig.fail_keys(&table, &workload, held).await?;
    let mut relay = rig.relay(mode, &table, &rig.checkpoint_dir())?;
    relay.wait_ready().await?;
    let total = (rig.options.rate * rig.options.seconds) as usize;
    let interval = Duration::from_secs_f64(1.0 / rig.options.rate.max(1) as f64);
    let processes = rig.processes(relay.pid());
    let cpu_before = processes.read()?;
    let commits_before = rig.binlog_commits().await?;
    let start = tokio::time::Instant::now() + Duration::from_millis(200);
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let mut conn = rig.root.get_conn().await?;
        let (table, workload) = (table.clone(), workload.clone());
        writers.push(tokio::spawn(async move {
            let mut commits = Vec::new();
            for i in (writer..total).step_by(WRITERS) {
                tokio::time::sleep_until(start + interval * i as u32).await;
                let inserted = unix_seconds(SystemTime::now());
                Rig::insert_one(&mut conn, &table, &workload, i).await?;
                commits.push((i, Started { inserted, committed: unix_seconds(SystemTime::now()) }));
            }
            anyhow::Ok(commits)
        }));
    }
    let mut started: HashMap<usize, Started> = HashMap::with_capacity(total);
    for writer in writers {
        started.extend(writer.await.context("writer task")??);
    }
    until("every row SENT", Duration::from_secs(600), || async { Ok(rig.unsent(&table).await? == held as u64) })
        .await?;
    let cpu_after = processes.read()?;
    let relay_commits = rig.binlog_commits().await?.saturating_sub(commits_before + total as u64);
    let sent: Vec<(String, String)> = rig
        .root
        .get_conn()
        .await?
        .query(format!(
            "SELECT event_id, CAST(UNIX_TIMESTAMP(sent_at) AS CHAR) FROM {} WHERE status = 2",
            table.qualified()
        ))
        .await?;
    let since = |from: fn(&Started) -> f64| -> Vec<f64> {
        sent.iter()
            .filter_map(|(event_id, at)| {
                let i: usize = event_id.rsplit('-').next()?.parse().ok()?;
                Some(((at.parse::<f64>().ok()? - from(started.get(&i)?)) * 1_000.0).max(0.0))
            })
            .collect()
    };
    let latencies = since(|s| s.committed);
    let (first, last) =
        started.values().fold((f64::MAX, f64::MIN), |(lo, hi), s| (lo.min(s.committed), hi.max(s.committed)));
    let mut measurement = Measurement::throughput(case, mode.name(), latencies.len(), last - first);
    measurement.offered_per_s = Some(rig.options.rate as f64);
    measurement.latency = Percentiles::of(latencies);
    measurement.from_insert_p50_ms = Percentiles::of(since(|s| s.inserted)).map(|p| p.p50_ms);
    measurement.cpu = CpuPerEvent::between(&cpu_before, &cpu_after, total);
    measurement.relay_commits_per_event = Some(relay_commits as f64 / total.max(1) as f64);
    let relay_buckets = relay.histogram("relay_commit_to_ack_seconds")?;
    measurement.relay_p50_ms = histogram_quantile(0.5, &relay_buckets).map(|s| s * 1_000.0);
    let in_relay = relay.histogram("relay_route_to_ack_seconds")?;
    measurement.in_relay_p50_ms = histogram_quantile(0.5, &in_relay).map(|s| s * 1_000.0);
    measurement.in_relay_p99_ms = histogram_quantile(0.99, &in_relay).map(|s| s * 1_000.0);
    measurement.in_relay_max_at_most_ms = histogram_max_at_most(&in_relay).map(|s| s * 1_000.0);
    let sends = relay.histogram("relay_send_seconds")?;
    measurement.send_max_at_most_ms = histogram_max_at_most(&sends).map(|s| s * 1_000.0);
    measurement.send_p50_ms = histogram_quantile(0.5, &sends).map(|s| s * 1_000.0);
    let (batches, published) =
        (relay.metric_sum("relay_send_batches_total")?, relay.metric_sum("relay_events_published_total")?);
    measurement.events_per_send = (batches > 0.0).then(|| published / batches);
    measurement.peak_rss_mib = Some(relay.peak_rss_mib()?);
    relay.stop()?;
    rig.drop_table(&table).await?;
    Ok(measurement)
}

/// When a writer sent an event's INSERT and when its COMMIT returned, unix seconds.
struct Started {
    inserted: f64,
    committed: f64,
}

fn unix_seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}
