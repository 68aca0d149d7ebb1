//! The binlog path: tail the source's binlog as a replica and hand on committed
//! transactions of outbox INSERTs.
//!
//! The reader registers with a configurable `server_id`, asks for replication
//! heartbeats and treats three missed heartbeats as a dead connection. On any
//! connection error it reconnects with backoff from the end of the last
//! transaction it handed on (the pipeline still holds everything before), so a
//! reconnect neither loses nor repeats a transaction. Before handing on a
//! transaction it takes in-flight permits: when the pipeline is full it stops
//! reading, which is the backpressure that bounds memory.

mod columns;
mod decode;
mod gtid;
mod mariadb;
mod preflight;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn, Opts, Pool};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

pub use columns::{ColumnError, ColumnMap};
pub use decode::{DecodeError, Decoded, Decoder};
pub use gtid::GtidState;
pub use preflight::{check as preflight, current_position, Flavor, PreflightError, ServerInfo};

use super::SourceTx;
use crate::backoff::Backoff;
use crate::checkpoint::BinlogPosition;
use crate::config::DbUrl;

/// How long position-only progress (transactions without outbox rows) may wait
/// before it is handed on, so the checkpoint follows an idle or busy-elsewhere source.
const POSITION_FLUSH: Duration = Duration::from_millis(200);

/// Why the binlog path stopped for good (a retry cannot help).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error(transparent)]
    Columns(#[from] ColumnError),
    #[error("the source no longer has binlog {file} at {pos} (purged, or a different server): {detail}")]
    PositionLost { file: String, pos: u64, detail: String },
    #[error("source database: {0}")]
    Fatal(String),
}

/// What the reader needs to know.
#[derive(Debug, Clone)]
pub struct ReaderSettings {
    pub url: DbUrl,
    pub server_id: u32,
    pub heartbeat: Duration,
    pub schema: String,
    pub table: String,
    pub flavor: Flavor,
    pub max_in_flight: usize,
    pub reconnect: Backoff,
}

/// The binlog reader task.
pub struct Reader {
    settings: ReaderSettings,
    /// Pool for information_schema look-ups while streaming.
    pool: Pool,
    permits: Arc<Semaphore>,
    output: mpsc::Sender<SourceTx>,
}

impl Reader {
    pub fn new(settings: ReaderSettings, pool: Pool, permits: Arc<Semaphore>, output: mpsc::Sender<SourceTx>) -> Self {
        Self { settings, pool, permits, output }
    }

    /// Permits a transaction of `events` events takes: one per event, but at most
    /// the whole budget, so a transaction larger than the budget waits for an empty
    /// pipeline instead of waiting forever.
    pub fn permits_for(events: usize, max_in_flight: usize) -> usize {
        events.min(max_in_flight)
    }

    /// Streams from `start` until `shutdown` or a fatal error, reconnecting as needed.
    pub async fn run(self, start: BinlogPosition, shutdown: CancellationToken) -> Result<(), SourceError> {
        let mut position = start;
        let mut failures = 0u32;
        loop {
            let outcome = tokio::select! {
                outcome = self.stream_from(&mut position, &mut failures) => outcome,
                () = shutdown.cancelled() => return Ok(()),
            };
            match outcome {
                Ok(()) => return Ok(()),
                Err(Retry::Fatal(error)) => return Err(error),
                Err(Retry::Again(reason)) => {
                    failures += 1;
                    let delay = self.settings.reconnect.delay(failures);
                    tracing::warn!(%reason, file = %position.file, pos = position.pos, retry_in = ?delay, "binlog connection lost; reconnecting");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = shutdown.cancelled() => return Ok(()),
                    }
                }
            }
        }
    }

    async fn stream_from(&self, position: &mut BinlogPosition, failures: &mut u32) -> Result<(), Retry> {
        let mut stream = self.connect(position).await?;
        tracing::info!(file = %position.file, pos = position.pos, server_id = self.settings.server_id, "tailing binlog");
        let mut decoder = Decoder::new(
            &self.settings.schema,
            &self.settings.table,
            &position.file,
            GtidState::parse(position.gtid.as_deref().unwrap_or_default()),
        );
        decoder.set_columns(self.load_columns().await?);
        let dead_after = self.settings.heartbeat * 3;
        let mut unflushed: Option<BinlogPosition> = None;
        let mut last_flush = tokio::time::Instant::now();
        loop {
            let event = match tokio::time::timeout(dead_after, stream.next()).await {
                Err(_) => return Err(Retry::Again(format!("no event or heartbeat for {dead_after:?}"))),
                Ok(None) => return Err(Retry::Again("the server closed the binlog stream".into())),
                Ok(Some(Err(e))) => return Err(self.stream_error(position, e)),
                Ok(Some(Ok(event))) => event,
            };
            *failures = 0;
            let tx = match decoder.handle(&event)? {
                Decoded::NeedColumns => {
                    decoder.set_columns(self.load_columns().await?);
                    match decoder.handle(&event)? {
                        Decoded::NeedColumns => {
                            return Err(Retry::Fatal(SourceError::Fatal(format!(
                                "the outbox table's column count changed again while reading {}:{}",
                                position.file,
                                event.header().log_pos()
                            ))))
                        }
                        other => other,
                    }
                }
                other => other,
            };
            match tx {
                Decoded::Commit(tx) if tx.events.is_empty() => unflushed = Some(tx.end),
                Decoded::Commit(tx) => {
                    unflushed = None;
                    last_flush = tokio::time::Instant::now();
                    self.hand_on(tx, position).await?;
                }
                Decoded::Nothing | Decoded::NeedColumns => {}
            }
            let idle_or_due = decoder.open_events() == 0 && last_flush.elapsed() >= POSITION_FLUSH;
            if let Some(end) = unflushed.take_if(|_| idle_or_due) {
                last_flush = tokio::time::Instant::now();
                self.hand_on(SourceTx { events: Vec::new(), end }, position).await?;
            }
        }
    }

    async fn hand_on(&self, tx: SourceTx, position: &mut BinlogPosition) -> Result<(), Retry> {
        let wanted = Self::permits_for(tx.events.len(), self.settings.max_in_flight);
        let count = u32::try_from(wanted).unwrap_or(u32::MAX);
        if count > 0 {
            let permits = self
                .permits
                .acquire_many(count)
                .await
                .map_err(|_| Retry::Fatal(SourceError::Fatal("pipeline closed".into())))?;
            permits.forget();
        }
        let end = tx.end.clone();
        self.output.send(tx).await.map_err(|_| Retry::Fatal(SourceError::Fatal("pipeline closed".into())))?;
        *position = end;
        Ok(())
    }

    async fn connect(&self, position: &BinlogPosition) -> Result<BinlogStream, Retry> {
        let opts =
            Opts::from_url(self.settings.url.expose()).map_err(|e| Retry::Fatal(SourceError::Fatal(e.to_string())))?;
        let mut conn = Conn::new(opts).await.map_err(|e| Retry::Again(e.to_string()))?;
        let heartbeat_ns = self.settings.heartbeat.as_nanos();
        conn.query_drop(format!("SET @master_heartbeat_period = {heartbeat_ns}"))
            .await
            .map_err(|e| Retry::Again(e.to_string()))?;
        if self.settings.flavor == Flavor::MariaDb {
            conn.query_drop(format!("SET @mariadb_slave_capability = {}", mariadb::SLAVE_CAPABILITY_GTID))
                .await
                .map_err(|e| Retry::Again(e.to_string()))?;
        }
        let request = BinlogStreamRequest::new(self.settings.server_id)
            .with_filename(position.file.as_bytes())
            .with_pos(position.pos);
        conn.get_binlog_stream(request).await.map_err(|e| self.stream_error(position, e))
    }

    async fn load_columns(&self) -> Result<ColumnMap, Retry> {
        let mut conn = self.pool.get_conn().await.map_err(|e| Retry::Again(e.to_string()))?;
        let map = ColumnMap::load(&mut conn, &self.settings.schema, &self.settings.table)
            .await
            .map_err(|e| Retry::Again(e.to_string()))?;
        map.map_err(|e| Retry::Fatal(e.into()))
    }

    fn stream_error(&self, position: &BinlogPosition, error: mysql_async::Error) -> Retry {
        match &error {
            // ER_MASTER_FATAL_ERROR_READING_BINLOG: purged file, bad position, other server.
            mysql_async::Error::Server(e) if e.code == 1236 => Retry::Fatal(SourceError::PositionLost {
                file: position.file.clone(),
                pos: position.pos,
                detail: e.message.clone(),
            }),
            mysql_async::Error::Server(e) if e.code == 1227 || e.code == 1045 => Retry::Fatal(SourceError::Fatal(
                format!("{error}; grant REPLICATION SLAVE, REPLICATION CLIENT ON *.* to the source user"),
            )),
            _ => Retry::Again(error.to_string()),
        }
    }
}

/// A reconnectable failure, or the end of the road.
enum Retry {
    Again(String),
    Fatal(SourceError),
}

impl From<DecodeError> for Retry {
    fn from(error: DecodeError) -> Self {
        Retry::Fatal(error.into())
    }
}
