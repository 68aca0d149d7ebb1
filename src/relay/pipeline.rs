//! One leader term's pipeline, built stage by stage: the write-back first (the sweep
//! and the coordinator queue to it), the side jobs, the sweep, the binlog path with its
//! checkpoint (binlog mode), and the coordinator last, which routes to the lanes. Each
//! stage is built by its own constructor from the configuration; its policy (queue
//! sizes, backoffs) is named beside it. Every task is spawned under the term's
//! supervisor, which the caller joins.
//!
//! ```text
//! binlog reader ──┐                                   ┌──> lane per queue ──SEND_OK──┐
//!                 ├─SourceTx─> coordinator ─LaneEvent─┤                              │
//! sweep (claims) ─┘   (permits: bounded in flight)    └<──────── LaneReport ─────────┘
//!                                │
//!                                ├──> checkpoint (RocksDB, after ack; binlog mode)
//!                                └──> SENT write-back (primary, batched)
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::start::{BinlogSource, BinlogStart};
use super::{gauges, ok, Warm};
use crate::checkpoint::{CheckpointWriter, Mirror};
use crate::config::Config;
use crate::coordinator::topics::{self, TopicPin};
use crate::coordinator::{self, Coordinator, Durable, Inputs, Pins};
use crate::db::{self, DbError};
use crate::error::RelayError;
use crate::health::Health;
use crate::lanes::{HeldKeys, Recorder};
use crate::leader::Term;
use crate::metrics::RelayMetrics;
use crate::ops::reconcile::hourly::Hourly;
use crate::ops::retention::Retention;
use crate::ops::verify;
use crate::rocketmq::QueueLayout;
use crate::source::binlog::{Reader, ReaderLinks, ReaderSettings};
use crate::source::sweep::{self, FullSweep, SweepLinks, SweepSettings, Sweeper, Watermark};
use crate::source::{Budget, Handoff};
use crate::store::{AckedThrough, ClaimStore, SentStore, StatusStore, TermFence};
use crate::supervise::Supervisor;
use crate::write_back::{self, Misses, Unwritten, WriteBacks};

/// What every stage of one term shares.
pub(super) struct TermRun<'a> {
    pub config: &'a Config,
    pub warm: &'a Warm,
    pub claims: &'a ClaimStore,
    pub term: &'a Term,
    pub supervisor: &'a Supervisor,
    pub metrics: RelayMetrics,
    pub health: &'a Health,
}

/// Spawns every task of the term's pipeline.
pub(super) async fn start(run: TermRun<'_>) -> Result<(), RelayError> {
    let fence = run.warm.lease.fence(run.term.number());
    let mirror = Mirror::new(run.warm.primary.clone(), run.warm.outbox.clone(), fence.clone());
    let primary_error = |e| DbError::query("primary", &run.config.primary.url, e);
    let mut binlog = match &run.warm.binlog {
        Some(source) => {
            let primary_now = run.claims.local_now_us().await.map_err(primary_error)?;
            Some((source, source.start(run.config, &mirror, primary_now).await?))
        }
        None => None,
    };
    let layouts = binlog.as_ref().map(|(_, b)| b.checkpoint.queue_layouts.clone()).unwrap_or_default();
    let configured = run.config.rocketmq.topics.iter().map(|(t, c)| (t.clone(), c.queue_count)).collect();
    watch_topics(&run, &configured, &layouts).await?;
    let left_behind = binlog.as_ref().map_or(AckedThrough(0), |(_, start)| left_to_the_sweep(start));
    if let Some((_, start)) = binlog.as_mut() {
        bound_what_the_start_covers(run.claims, start).await.map_err(primary_error)?;
    }
    let held = held_at_start(run.claims, left_behind).await.map_err(primary_error)?;
    let status = StatusStore::new(run.warm.primary.clone(), run.warm.outbox.clone(), fence.clone());
    let (write_backs, unwritten) = spawn_write_back(&run, &fence);
    spawn_side_jobs(&run, &status, &fence);
    let (handoff, admitted) = Handoff::channel(Budget::of(&run.config.lanes), run.metrics.clone());
    let watermark = Arc::new(Watermark::new(binlog.as_ref().and_then(|(_, b)| b.checkpoint.position.commit_time)));
    let (sweeps, requests) = sweep::full_sweeps();
    let links = SweepLinks {
        claims: run.claims.clone(),
        handoff: handoff.clone(),
        requests,
        metrics: run.metrics.clone(),
        health: run.health.clone(),
        status: status.clone(),
        held: held.clone(),
        write_backs: write_backs.clone(),
        unwritten,
    };
    let watched = binlog.as_ref().map(|_| Arc::clone(&watermark));
    let sweeper = Sweeper::new(SweepSettings::new(&run.config.sweep, run.config.mode, watched), links);
    run.supervisor.spawn("sweep", ok(sweeper.run(run.supervisor.stop_token().child_token())));
    let (counts, durable) = match binlog {
        Some((source, start)) => {
            let counts = start.checkpoint.queue_counts.clone();
            let feeds = Feeds { handoff, sweeps, watermark: Arc::clone(&watermark) };
            (counts, Some(spawn_binlog(&run, source, start, mirror, feeds)?))
        }
        // Poll mode: no checkpoint; topics not in the config are pinned per process.
        None => (configured.iter().map(|(t, c)| (t.clone(), *c)).collect(), None),
    };
    let (reports, lane_reports) = mpsc::unbounded_channel();
    let recorder = Recorder::new(
        status,
        run.claims.clone(),
        run.config.retry.backoff(),
        reports,
        run.supervisor.stop_token(),
        run.metrics.clone(),
    );
    let links = coordinator::Links {
        publisher: Arc::clone(&run.warm.publisher),
        held,
        durable,
        watermark,
        recorder,
        write_backs,
        metrics: run.metrics.clone(),
        health: run.health.clone(),
        supervisor: run.supervisor.clone(),
        term: run.term.clone(),
    };
    let coordinator = Coordinator::new(run.config, Pins { counts, layouts, configured }, links);
    run.supervisor.spawn("coordinator", coordinator.run(Inputs { source: admitted, reports: lane_reports }));
    Ok(())
}

/// Checks every configured topic's route; one without a usable route is watched until
/// it has one. Starts the broker probe.
async fn watch_topics(
    run: &TermRun<'_>,
    configured: &HashMap<String, u32>,
    layouts: &BTreeMap<String, QueueLayout>,
) -> Result<(), RelayError> {
    let publisher = &run.warm.publisher;
    for (topic, &count) in configured {
        let pin = TopicPin { count, layout: layouts.get(topic).cloned() };
        if !topics::routed(publisher, topic, &pin, run.health).await? {
            let watch = topics::watch(Arc::clone(publisher), topic.clone(), pin, run.health.clone());
            run.supervisor.spawn("configured topic route", topics::until_stopped(watch, run.supervisor.stop_token()));
        }
    }
    run.supervisor.spawn("broker probe", ok(Arc::clone(publisher).probe(run.supervisor.stop_token())));
    Ok(())
}

/// Starts the SENT writer on its own connections; returns its queue, and where it
/// hands the rows whose write did not land.
fn spawn_write_back(run: &TermRun<'_>, fence: &TermFence) -> (WriteBacks, Unwritten) {
    let sent =
        SentStore::new(run.warm.write_backs.clone(), run.warm.outbox.clone(), fence.clone(), db::CONNECTION_LIFETIME);
    let (write_backs, queued) = WriteBacks::channel();
    let unwritten = Unwritten::default();
    let misses = Misses { metrics: run.metrics.clone(), unwritten: unwritten.clone() };
    run.supervisor.spawn("SENT write-back", ok(write_back::run(sent, queued, misses)));
    (write_backs, unwritten)
}

/// Starts the leader's side jobs: the outbox gauges, the table's retention, the
/// sampler of SENT rows on the broker and the hourly reconciliation.
fn spawn_side_jobs(run: &TermRun<'_>, status: &StatusStore, fence: &TermFence) {
    let stop = run.supervisor.stop_token();
    let watching = gauges::watch_outbox(status.clone(), run.metrics.clone(), stop.clone());
    run.supervisor.spawn("outbox gauges", ok(watching));
    let retention = Retention {
        primary: run.warm.primary.clone(),
        outbox: run.warm.outbox.clone(),
        fence: fence.clone(),
        instance: run.claims.owner().to_owned(),
        cleanup: run.config.cleanup.clone(),
        expected: run.config.outbox.partition,
        metrics: run.metrics.upkeep.clone(),
    };
    run.supervisor.spawn("outbox retention", ok(retention.run(stop.clone())));
    if run.config.verify.interval_ms > 0 {
        let sampling = verify::run_scheduled(
            run.warm.primary.clone(),
            run.warm.outbox.clone(),
            Arc::clone(&run.warm.publisher),
            run.config.verify.clone(),
            run.metrics.upkeep.clone(),
            stop.clone(),
        );
        run.supervisor.spawn("SENT-on-broker sampler", ok(sampling));
    }
    if run.config.reconcile.interval_ms > 0 {
        let hourly = Hourly {
            primary: run.warm.primary.clone(),
            outbox: run.warm.outbox.clone(),
            settings: run.config.reconcile.clone(),
            tls: run.config.primary.tls.clone(),
            metrics: run.metrics.upkeep.clone(),
        };
        run.supervisor.spawn("hourly reconciliation", ok(hourly.run(stop)));
    }
}

/// What the binlog reader feeds: the coordinator (through the hand-off), the sweep
/// (full sweeps) and the sweep's view of its progress.
struct Feeds {
    handoff: Handoff,
    sweeps: mpsc::Sender<FullSweep>,
    watermark: Arc<Watermark>,
}

/// Starts the checkpoint writer and mirror, the binlog reader and the source's gauges.
fn spawn_binlog(
    run: &TermRun<'_>,
    source: &BinlogSource,
    start: BinlogStart,
    mirror: Mirror,
    feeds: Feeds,
) -> Result<Durable, RelayError> {
    run.metrics.lag.saved_through(start.checkpoint.position.commit_time);
    let lag = Arc::clone(&run.metrics.lag);
    let (writer, writing, mirroring) =
        CheckpointWriter::start(Arc::clone(&source.store), mirror, run.term.clone(), lag);
    run.supervisor.spawn("checkpoint writer", async move { writing.await.map_err(RelayError::from) });
    run.supervisor.spawn("checkpoint mirror", ok(mirroring));
    let links = ReaderLinks {
        pool: source.pool.clone(),
        handoff: feeds.handoff,
        sweeps: feeds.sweeps,
        watermark: feeds.watermark,
        metrics: run.metrics.clone(),
        health: run.health.clone(),
        term: run.term.clone(),
    };
    let reader = Reader::new(ReaderSettings::new(run.config, source.server.flavor)?, links);
    let stop = run.supervisor.stop_token();
    run.supervisor.spawn("binlog reader", ok(reader.run(start.start, stop.child_token())));
    let lag_limit = std::time::Duration::from_millis(run.config.sweep.grace_ms);
    let watching = gauges::watch_source(source.pool.clone(), run.metrics.clone(), run.health.clone(), lag_limit, stop);
    run.supervisor.spawn("source gauges", ok(watching));
    Ok(Durable { writer, checkpoint: start.checkpoint })
}

/// The unsent rows a term's binlog path will not read: those at or below the id its
/// checkpoint acknowledged through (all of them when unknown), none when a full sweep
/// runs first (it sends them before the binlog path starts).
fn left_to_the_sweep(start: &BinlogStart) -> AckedThrough {
    match start.start.kind.owed_sweep() {
        Some(_) => AckedThrough(0),
        None => AckedThrough(start.checkpoint.acked_through.unwrap_or(u64::MAX)),
    }
}

/// After a start whose full sweep, or whose holds, cover every row committed before
/// its position, the checkpoint acknowledges through the table's newest id (read
/// after the position was): a later start holds the keys of whichever of those rows
/// are still unsent then, since the binlog path will not read them.
async fn bound_what_the_start_covers(claims: &ClaimStore, start: &mut BinlogStart) -> Result<(), mysql_async::Error> {
    let checkpoint = &mut start.checkpoint;
    if start.start.kind.owed_sweep().is_some() || checkpoint.acked_through.is_none() {
        let newest = claims.newest_id().await?;
        checkpoint.acked_through = Some(checkpoint.acked_through.unwrap_or(0).max(newest));
    }
    Ok(())
}

/// The keys that wait, from the table, before this term routes anything: those the
/// last leader held (a FAILED row, a booked retry) and those with rows the binlog path
/// will not read again (`left_behind`, or claimed by a relay that is gone). A restart,
/// a resume, a new term or a standby taking over holds exactly the same keys, and the
/// sweep sends what they wait for in order before any newer event of theirs.
async fn held_at_start(claims: &ClaimStore, left_behind: AckedThrough) -> Result<HeldKeys, mysql_async::Error> {
    // Claims of an earlier pipeline of this term (a pause whose release failed) would
    // pass as this one's: PENDING again first, so they are claimed in order.
    claims.release_own().await?;
    let held = HeldKeys::default();
    held.hold_all(claims.held_keys(Some(left_behind)).await?);
    if !held.is_empty() {
        tracing::info!(keys = held.len(), acked_through = left_behind.0, "holding the keys with rows that wait: FAILED, a booked retry, claimed by a relay that is gone, or left behind before the checkpoint");
    }
    Ok(held)
}
