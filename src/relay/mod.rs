//! The running relay: checks, start position, and the pipeline's tasks.
//!
//! ```text
//! binlog reader ──┐                                   ┌──> lane per queue ──SEND_OK──┐
//!                 ├─SourceTx─> coordinator ─LaneEvent─┤                              │
//! sweep (claims) ─┘   (permits: bounded in flight)    └<──────── LaneReport ─────────┘
//!                                │
//!                                ├──> checkpoint (RocksDB, after ack; binlog mode)
//!                                └──> SENT writer (primary, batched)
//! ```
//!
//! In poll mode there is no binlog reader and no checkpoint: the sweep alone feeds
//! the lanes, and the outbox table is the only state.

mod coordinator;
mod sent_writer;
mod start;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::ack::AckTracker;
use crate::backoff::Backoff;
use crate::checkpoint::CheckpointError;
use crate::config::{Config, ConfigError, Mode};
use crate::db::{self, DbError};
use crate::http;
use crate::metrics::RelayMetrics;
use crate::publish::lane::LaneSettings;
use crate::publish::recorder::Recorder;
use crate::publish::rocketmq::{Producer, ProducerSettings, PublishError};
use crate::source::binlog::{ColumnError, PreflightError, Reader, ReaderLinks, ReaderSettings, SourceError};
use crate::source::Handoff;
use crate::store::{CheckpointMirror, ClaimStore, OutboxTable, StatusStore};
use crate::sweep::{BinlogGuard, SweepSettings, Sweeper, Watermark};

use coordinator::{Coordinator, Durable, Inputs};
use start::BinlogStart;

/// SENT write-backs that may wait for the primary before the pipeline slows down.
const SENT_BACKLOG: usize = 50_000;

/// Session setting for the relay's own writes. With the FULL image every SENT UPDATE
/// logs the whole row (payload included) twice, and the binlog path reads it back.
const MINIMAL_ROW_IMAGE: &str = "SET SESSION binlog_row_image = 'MINIMAL'";

/// Why the relay stopped (or could not start).
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    #[error(transparent)]
    Columns(#[from] ColumnError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Publish(#[from] PublishError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("{0}")]
    State(String),
}

/// The outbox table the configuration names.
pub fn outbox_table(config: &Config) -> OutboxTable {
    OutboxTable { schema: config.outbox_schema().unwrap_or_default().to_owned(), table: config.outbox.table.clone() }
}

/// This process's name in `owner` of the rows it claims: host, pid and start time,
/// so a restarted relay never mistakes a dead predecessor's leases for its own.
pub fn process_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "relay".to_owned());
    let started =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    format!("{host}:{}:{started}", std::process::id())
}

/// Runs the relay until `shutdown` is cancelled or a fatal error.
pub async fn run(config: &Config, shutdown: CancellationToken) -> Result<(), RelayError> {
    let outbox = outbox_table(config);
    let primary = open_primary(config).await?;
    let binlog = match config.mode {
        Mode::Binlog => Some(start::open(config, &outbox).await?),
        Mode::Poll => None,
    };
    let claims = ClaimStore::open(
        primary.clone(),
        outbox.clone(),
        process_owner(),
        Duration::from_millis(config.sweep.lease_ms),
        config.sweep.claim,
    )
    .await
    .map_err(|e| DbError::query("primary", &config.primary.url, e))?;
    tracing::info!(mode = ?config.mode, owner = claims.owner(), claim = ?claims.method(), "starting");

    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = RelayMetrics::register(&mut registry);
    let http_address = http::serve(&config.http.listen, Arc::new(registry), shutdown.clone())
        .await
        .map_err(|e| RelayError::State(format!("cannot listen on {} (http.listen): {e}", config.http.listen)))?;
    tracing::info!("metrics on http://{http_address}/metrics, health on http://{http_address}/healthz");
    let producer = Arc::new(
        Producer::start(ProducerSettings {
            namesrv: config.rocketmq.namesrv.clone(),
            group: config.rocketmq.producer_group.clone(),
            send_timeout: Duration::from_millis(config.rocketmq.send_timeout_ms),
        })
        .await?,
    );
    let pipeline = Pipeline { outbox, primary, binlog, claims, producer: Arc::clone(&producer), metrics };
    let result = run_pipeline(config, pipeline, shutdown).await;
    if let Ok(producer) = Arc::try_unwrap(producer) {
        producer.shutdown().await;
    }
    result
}

/// The primary's pool; its connections log with MINIMAL row images when allowed.
async fn open_primary(config: &Config) -> Result<mysql_async::Pool, RelayError> {
    let primary = &config.primary;
    let pool = db::connect("primary", &primary.url, primary.pool_max).await?;
    if !primary.minimal_row_image {
        return Ok(pool);
    }
    let probe = async { pool.get_conn().await?.query_drop(MINIMAL_ROW_IMAGE).await };
    if let Err(error) = probe.await {
        tracing::warn!(%error, "the primary user cannot set binlog_row_image = MINIMAL for the relay's own updates (grant BINLOG ADMIN on MariaDB or SESSION_VARIABLES_ADMIN on MySQL 8, or set primary.minimal_row_image = false): SENT write-backs are logged with full row images");
        return Ok(pool);
    }
    // Best effort: the probe's pool is replaced by one whose every connection has the setting.
    let _ = pool.disconnect().await;
    Ok(db::connect_with("primary", &primary.url, primary.pool_max, &[MINIMAL_ROW_IMAGE]).await?)
}

/// Everything the pipeline starts from, once the checks passed.
struct Pipeline {
    outbox: OutboxTable,
    primary: mysql_async::Pool,
    /// The binlog path (binlog mode only).
    binlog: Option<BinlogStart>,
    claims: ClaimStore,
    producer: Arc<Producer>,
    metrics: RelayMetrics,
}

async fn run_pipeline(config: &Config, pipeline: Pipeline, shutdown: CancellationToken) -> Result<(), RelayError> {
    let Pipeline { outbox, primary, binlog, claims, producer, metrics } = pipeline;
    let configured: HashMap<String, u32> =
        config.rocketmq.topics.iter().map(|(t, c)| (t.clone(), c.queue_count)).collect();
    for (topic, count) in &configured {
        producer.pinned_queues(topic, *count).await?;
    }
    let max_in_flight = config.lanes.max_in_flight;
    let permits = Arc::new(Semaphore::new(max_in_flight));
    let backoff = Backoff::new(config.retry.backoff_initial(), config.retry.backoff_max());
    let status = StatusStore::new(primary.clone(), outbox.clone());
    let (source_tx, source_rx) = mpsc::channel(64);
    let handoff = Handoff::new(Arc::clone(&permits), max_in_flight, source_tx);
    let (reports_tx, reports_rx) = mpsc::unbounded_channel();
    let (sent_tx, sent_rx) = mpsc::channel(SENT_BACKLOG);
    let sent_writer = tokio::spawn(sent_writer::run(status.clone(), sent_rx));
    tokio::spawn(watch_pending(status.clone(), metrics.clone(), shutdown.clone()));

    let watermark = Arc::new(Watermark::new(binlog.as_ref().and_then(|b| b.checkpoint.position.commit_time)));
    let (sweeps_tx, sweeps_rx) = mpsc::channel(4);
    let sweeper = Sweeper {
        claims: claims.clone(),
        handoff: handoff.clone(),
        settings: SweepSettings {
            interval: config.sweep.interval(config.mode),
            batch: config.sweep.batch,
            binlog: binlog.as_ref().map(|_| BinlogGuard {
                watermark: Arc::clone(&watermark),
                grace: Duration::from_millis(config.sweep.grace_ms),
                takeover_after: Duration::from_millis(config.sweep.takeover_after_ms),
            }),
        },
        requests: sweeps_rx,
        metrics: metrics.clone(),
    };
    let sweeper_task = tokio::spawn(sweeper.run(shutdown.child_token()));

    let reader_stop = shutdown.child_token();
    let (reader_task, pins, durable) = match binlog {
        Some(binlog) => {
            let source = config.source()?;
            let reader = Reader::new(
                ReaderSettings {
                    url: source.url.clone(),
                    server_id: source.server_id,
                    heartbeat: Duration::from_millis(source.heartbeat_ms),
                    schema: outbox.schema.clone(),
                    table: outbox.table.clone(),
                    flavor: binlog.server.flavor,
                    reconnect: Backoff::new(Duration::from_millis(200), Duration::from_secs(10)),
                    part_events: (max_in_flight / 2).max(1),
                },
                ReaderLinks {
                    pool: binlog.pool,
                    handoff,
                    sweeps: sweeps_tx,
                    watermark: Arc::clone(&watermark),
                    metrics: metrics.clone(),
                },
            );
            let task = tokio::spawn(reader.run(binlog.start, reader_stop.clone()));
            let pins = binlog.checkpoint.queue_counts.clone();
            let durable = Durable {
                store: binlog.store,
                mirror: CheckpointMirror::new(primary, outbox.clone()),
                checkpoint: binlog.checkpoint,
            };
            (Some(task), pins, Some(durable))
        }
        None => {
            // Poll mode: no checkpoint; topics not in the config are pinned per process.
            drop(sweeps_tx);
            let pins: BTreeMap<String, u32> = configured.iter().map(|(t, c)| (t.clone(), *c)).collect();
            (None, pins, None)
        }
    };

    let coordinator = Coordinator {
        tracker: AckTracker::new(0),
        pins,
        durable,
        watermark,
        checkpoint_every: Duration::from_millis(config.checkpoint.interval_ms),
        producer,
        hash: config.rocketmq.hash,
        configured,
        permits,
        max_in_flight,
        lane_settings: Arc::new(LaneSettings {
            batch_size: config.lanes.batch_size,
            linger: Duration::from_millis(config.lanes.linger_ms),
            max_message_bytes: config.rocketmq.max_message_bytes,
            max_retry: config.retry.max_retry,
            backoff,
        }),
        recorder: Recorder { status, claims: claims.clone(), backoff, reports: reports_tx, shutdown: shutdown.clone() },
        sent: sent_tx,
        metrics,
        shutdown: shutdown.clone(),
    };
    let coordinated = coordinator.run(Inputs { source: source_rx, reports: reports_rx }).await;
    reader_stop.cancel();
    shutdown.cancel();
    let read = match reader_task {
        Some(task) => task.await.map_err(|e| RelayError::State(format!("binlog reader task failed: {e}")))?,
        None => Ok(()),
    };
    sweeper_task.await.map_err(|e| RelayError::State(format!("sweep task failed: {e}")))?;
    sent_writer.await.map_err(|e| RelayError::State(format!("status writer task failed: {e}")))?;
    release_claims(&claims).await;
    coordinated?;
    read.map_err(RelayError::from)
}

/// Claimed rows this process did not finish go back to PENDING for the next sweeper.
async fn release_claims(claims: &ClaimStore) {
    match claims.release_own().await {
        Ok(0) => {}
        Ok(rows) => tracing::info!(rows, "released unfinished claims back to PENDING"),
        Err(error) => {
            tracing::warn!(%error, "cannot release unfinished claims; their lease expires and another sweeper takes them")
        }
    }
}

/// How often the PENDING backlog is measured for `outbox_oldest_pending_seconds`.
const PENDING_POLL: Duration = Duration::from_secs(5);

/// Keeps the backlog gauges current until shutdown.
async fn watch_pending(status: StatusStore, metrics: RelayMetrics, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(PENDING_POLL);
    loop {
        tokio::select! {
            _ = tick.tick() => match status.pending_summary().await {
                Ok((rows, oldest)) => {
                    metrics.pending_rows.set(i64::try_from(rows).unwrap_or(i64::MAX));
                    metrics.oldest_pending_seconds.set(oldest);
                }
                Err(error) => tracing::warn!(%error, "cannot measure the PENDING backlog"),
            },
            () = shutdown.cancelled() => return,
        }
    }
}
