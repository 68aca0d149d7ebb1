//! The running relay: checks, start position, and the pipeline's tasks.
//!
//! ```text
//! binlog reader ──SourceTx──> coordinator ──LaneEvent──> lane per queue ──SEND_OK──┐
//!      ^  permits (bounded in flight)  │  <───────────── LaneReport ────────────────┘
//!      └───────────────────────────────┤
//!                                      ├──> checkpoint (RocksDB, after ack)
//!                                      └──> SENT writer (primary, batched)
//! ```

mod coordinator;
mod sent_writer;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::ack::AckTracker;
use crate::backoff::Backoff;
use crate::checkpoint::{BinlogPosition, Checkpoint, CheckpointError, CheckpointStore};
use crate::config::{Config, Mode};
use crate::db::{self, DbError};
use crate::http;
use crate::metrics::RelayMetrics;
use crate::publish::lane::LaneSettings;
use crate::publish::rocketmq::{Producer, ProducerSettings, PublishError};
use crate::source::binlog::{
    self, ColumnError, ColumnMap, PreflightError, Reader, ReaderSettings, ServerInfo, SourceError,
};
use crate::store::{CheckpointMirror, OutboxTable, StatusStore};

use coordinator::{Coordinator, Inputs};

/// SENT write-backs that may wait for the primary before the pipeline slows down.
const SENT_BACKLOG: usize = 50_000;

/// Why the relay stopped (or could not start).
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
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

/// Runs the relay until `shutdown` is cancelled or a fatal error.
pub async fn run(config: &Config, shutdown: CancellationToken) -> Result<(), RelayError> {
    if config.mode == Mode::Poll {
        return Err(RelayError::State("mode = \"poll\" is not implemented yet; use mode = \"binlog\"".into()));
    }
    let outbox = outbox_table(config);
    let primary = db::connect("primary", &config.primary.url, config.primary.pool_max).await?;
    let source_pool = db::connect("source", &config.source.url, 2).await?;
    let address = config.source.url.address().to_owned();
    let mut conn = source_pool.get_conn().await.map_err(|e| DbError::query("source", &config.source.url, e))?;
    let server = binlog::preflight(&mut conn, &address).await?;
    ColumnMap::load(&mut conn, &outbox.schema, &outbox.table)
        .await
        .map_err(|e| DbError::query("source", &config.source.url, e))??;
    tracing::info!(version = %server.version, identity = %server.identity, "source checked");

    let store = CheckpointStore::open(&config.checkpoint.path)?;
    let checkpoint = start_checkpoint(config, &store, &server, &mut conn, &address).await?;
    drop(conn);
    tracing::info!(file = %checkpoint.position.file, pos = checkpoint.position.pos, gtid = ?checkpoint.position.gtid, "starting from checkpoint");

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
    let pipeline =
        Pipeline { outbox, primary, source_pool, server, store, checkpoint, producer: Arc::clone(&producer), metrics };
    let result = run_pipeline(config, pipeline, shutdown).await;
    if let Ok(producer) = Arc::try_unwrap(producer) {
        producer.shutdown().await;
    }
    result
}

/// The checkpoint to start from: the saved one, or "now" saved before anything else.
async fn start_checkpoint(
    config: &Config,
    store: &CheckpointStore,
    server: &ServerInfo,
    conn: &mut mysql_async::Conn,
    address: &str,
) -> Result<Checkpoint, RelayError> {
    let configured: HashMap<&String, u32> = config.rocketmq.topics.iter().map(|(t, c)| (t, c.queue_count)).collect();
    if let Some(saved) = store.load()? {
        for (topic, pinned) in &saved.queue_counts {
            if let Some(&wanted) = configured.get(topic).filter(|&&wanted| wanted != *pinned) {
                return Err(RelayError::State(format!(
                    "rocketmq.topics.{topic}.queue_count is {wanted} but the checkpoint pinned {pinned}: changing it would move keys to other queues and break their order; restore {pinned}, or drain the topic and delete the checkpoint"
                )));
            }
        }
        if saved.server_identity != server.identity {
            return Err(RelayError::State(format!(
                "the checkpoint belongs to source {} but source.url now reaches {}; point source.url back, or move the checkpoint directory aside to start from the current position",
                saved.server_identity, server.identity
            )));
        }
        return Ok(saved);
    }
    let position: BinlogPosition = binlog::current_position(conn, server.flavor, address).await?;
    let checkpoint = Checkpoint {
        position,
        server_identity: server.identity.clone(),
        queue_counts: configured.into_iter().map(|(t, c)| (t.clone(), c)).collect(),
    };
    store.save(&checkpoint)?;
    tracing::info!("no checkpoint: starting at the current binlog position (saved first)");
    Ok(checkpoint)
}

/// Everything the pipeline starts from, once the checks passed.
struct Pipeline {
    outbox: OutboxTable,
    primary: mysql_async::Pool,
    source_pool: mysql_async::Pool,
    server: ServerInfo,
    store: CheckpointStore,
    checkpoint: Checkpoint,
    producer: Arc<Producer>,
    metrics: RelayMetrics,
}

async fn run_pipeline(config: &Config, pipeline: Pipeline, shutdown: CancellationToken) -> Result<(), RelayError> {
    let Pipeline { outbox, primary, source_pool, server, store, checkpoint, producer, metrics } = pipeline;
    let configured: HashMap<String, u32> =
        config.rocketmq.topics.iter().map(|(t, c)| (t.clone(), c.queue_count)).collect();
    for (topic, count) in &configured {
        producer.pinned_queues(topic, *count).await?;
    }
    let max_in_flight = config.lanes.max_in_flight;
    let permits = Arc::new(Semaphore::new(max_in_flight));
    let backoff = Backoff::new(config.retry.backoff_initial(), config.retry.backoff_max());
    let mirror = CheckpointMirror::new(primary.clone(), outbox.clone());
    let status = StatusStore::new(primary, outbox.clone());
    let (source_tx, source_rx) = mpsc::channel(64);
    let (reports_tx, reports_rx) = mpsc::unbounded_channel();
    let (sent_tx, sent_rx) = mpsc::channel(SENT_BACKLOG);
    let sent_writer = tokio::spawn(sent_writer::run(status.clone(), sent_rx));
    tokio::spawn(watch_pending(status.clone(), metrics.clone(), shutdown.clone()));

    let reader = Reader::new(
        ReaderSettings {
            url: config.source.url.clone(),
            server_id: config.source.server_id,
            heartbeat: Duration::from_millis(config.source.heartbeat_ms),
            schema: outbox.schema.clone(),
            table: outbox.table.clone(),
            flavor: server.flavor,
            max_in_flight,
            reconnect: Backoff::new(Duration::from_millis(200), Duration::from_secs(10)),
        },
        source_pool,
        Arc::clone(&permits),
        source_tx,
    );
    let reader_stop = shutdown.child_token();
    let reader_task = tokio::spawn(reader.run(checkpoint.position.clone(), reader_stop.clone()));

    let coordinator = Coordinator {
        tracker: AckTracker::new(0),
        checkpoint,
        store,
        mirror,
        checkpoint_every: Duration::from_millis(config.checkpoint.interval_ms),
        producer,
        hash: config.rocketmq.hash,
        configured,
        permits,
        max_in_flight,
        status,
        lane_settings: Arc::new(LaneSettings {
            batch_size: config.lanes.batch_size,
            linger: Duration::from_millis(config.lanes.linger_ms),
            max_message_bytes: config.rocketmq.max_message_bytes,
            max_retry: config.retry.max_retry,
            backoff,
        }),
        sent: sent_tx,
        metrics,
        shutdown: shutdown.clone(),
    };
    let coordinated = coordinator.run(Inputs { source: source_rx, reports: reports_rx, reports_tx }).await;
    reader_stop.cancel();
    let read = reader_task.await.map_err(|e| RelayError::State(format!("binlog reader task failed: {e}")))?;
    shutdown.cancel();
    sent_writer.await.map_err(|e| RelayError::State(format!("status writer task failed: {e}")))?;
    coordinated?;
    read.map_err(RelayError::from)
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
