//! The binlog path: tail the source's binlog as a replica and hand on committed
//! transactions of outbox INSERTs.
//!
//! The reader registers with a configurable `server_id`, asks for replication
//! heartbeats and treats three missed heartbeats as a dead connection. On any
//! connection error it reconnects with backoff from the end of the last
//! transaction it handed on (the pipeline still holds everything before), so a
//! reconnect neither loses nor repeats a transaction; while an XA transaction is
//! prepared but undecided, that end is held at the prepare's start, so a reconnect
//! then repeats what came after it (duplicates, never loss). Transactions go through the
//! [`Handoff`]: when the pipeline is full it stops reading, which bounds memory.
//!
//! Errors a reconnect cannot fix by itself (a missing privilege, an event it cannot
//! decode, a row that does not fit the column map) do not stop the relay and are not
//! skipped: the reader reports them (log, `/readyz`), hands the sweep the whole
//! table at once, and keeps trying at the reconnect backoff's cap until an operator
//! fixes the cause; then it resumes from the last transaction it handed on.
//!
//! When the position can no longer be read (binlog purged, another server: error
//! 1236) it neither stops forever nor skips: it counts and logs the loss, records
//! the current position, has the sweep send every PENDING row committed so far,
//! then attaches at the recorded position. The same full sweep runs before the
//! first tail of a fresh checkpoint, so rows committed before the first start are
//! delivered too.

mod columns;
mod decode;
#[cfg(test)]
mod fixtures;
mod group;
mod gtid;
mod json;
mod mariadb;
mod preflight;
mod prepared;
mod row_image;
pub mod settings;
mod standing;
mod statement;
mod xa;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Pool};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

pub use columns::{ColumnError, ColumnMap};
pub use decode::{DecodeError, Decoded, Decoder};
pub use gtid::GtidState;
pub use preflight::{check as preflight, current_position, read_facts, PreflightError};
pub use standing::{bytes_after, expire_seconds, replication, Replication};

use super::{BinlogPosition, Handoff, Origin, OwedSweep, PipelineClosed, SourceTx};
use crate::backoff::Backoff;
use crate::config::{Config, ConfigError, DbUrl, TlsConfig};
use crate::db::{self, DbError};
use crate::health::{Dependency, Health, Part};
use crate::leader::Term;
use crate::metrics::RelayMetrics;
use crate::server::Flavor;
use crate::source::sweep::{FullSweep, Watermark};

/// How long position-only progress (transactions without outbox rows) may wait
/// before it is handed on, so the checkpoint follows an idle or busy-elsewhere source.
const POSITION_FLUSH: Duration = Duration::from_millis(200);

/// What the reader needs to know.
#[derive(Debug, Clone)]
pub struct ReaderSettings {
    pub url: DbUrl,
    pub tls: TlsConfig,
    pub server_id: u32,
    pub heartbeat: Duration,
    pub schema: String,
    pub table: String,
    pub flavor: Flavor,
    pub reconnect: Backoff,
    /// A transaction with more outbox events than this is handed on in parts, so
    /// memory stays bounded however large it is (half the in-flight budget). Rows
    /// that may still be undone (undecided XA, after a savepoint) cannot go ahead:
    /// the reader holds at most this many of them, and leaves a group that would
    /// hold more to the sweep.
    pub part_events: usize,
}

/// How the reader backs off between reconnects.
const RECONNECT: Backoff = Backoff { initial: Duration::from_millis(200), max: Duration::from_secs(10) };

impl ReaderSettings {
    /// The reader's settings from the configuration, for a source of `flavor`.
    pub fn new(config: &Config, flavor: Flavor) -> Result<Self, ConfigError> {
        let source = config.source()?;
        let outbox = config.outbox_table();
        Ok(Self {
            url: source.url.clone(),
            tls: source.tls.clone(),
            server_id: source.server_id,
            heartbeat: Duration::from_millis(source.heartbeat_ms),
            schema: outbox.schema,
            table: outbox.table,
            flavor,
            reconnect: RECONNECT,
            part_events: (config.lanes.max_in_flight / 2).max(1),
        })
    }
}

/// What the reader talks to besides the source.
pub struct ReaderLinks {
    /// Pool for information_schema look-ups and position queries while streaming.
    pub pool: Pool,
    pub handoff: Handoff,
    /// Where full sweeps are requested (first start, lost position).
    pub sweeps: mpsc::Sender<FullSweep>,
    /// Connection state for the sweep's takeover.
    pub watermark: Arc<Watermark>,
    pub metrics: RelayMetrics,
    /// Where the reader says whether it streams.
    pub health: Health,
    /// The leader term it reads for: a deposed leader does not register with the
    /// source again (instances of a fleet share `server_id`, so it would cut the new
    /// leader's connection).
    pub term: Term,
}

/// Where the reader starts.
#[derive(Debug, Clone)]
pub struct Start {
    pub position: BinlogPosition,
    pub kind: StartKind,
}

/// Why the reader starts where it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartKind {
    /// From the saved checkpoint.
    Resume,
    /// No checkpoint: a full sweep first, then tail from the recorded current position.
    Fresh(OwedSweep),
    /// The saved position means nothing on this source: counted as a lost position,
    /// a full sweep first, then tail from the current position.
    PositionLost(OwedSweep),
    /// An earlier start's full sweep was cut short: it runs again before tailing from
    /// the saved position.
    SweepOwed(OwedSweep),
}

impl StartKind {
    /// The full sweep this start runs before tailing, if any.
    pub fn owed_sweep(&self) -> Option<&OwedSweep> {
        match self {
            StartKind::Resume => None,
            StartKind::Fresh(owed) | StartKind::PositionLost(owed) | StartKind::SweepOwed(owed) => Some(owed),
        }
    }
}

impl std::fmt::Display for StartKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartKind::Resume => f.write_str("resume"),
            StartKind::Fresh(_) => f.write_str("first start"),
            StartKind::PositionLost(owed) => write!(f, "position lost: {}", owed.reason),
            StartKind::SweepOwed(owed) => write!(f, "full sweep cut short earlier ({}): sweeping again", owed.reason),
        }
    }
}

/// The binlog reader task.
pub struct Reader {
    settings: ReaderSettings,
    links: ReaderLinks,
}

impl Reader {
    pub fn new(settings: ReaderSettings, links: ReaderLinks) -> Self {
        Self { settings, links }
    }

    /// Streams from `start` until `shutdown` or until the pipeline closes,
    /// reconnecting as needed. It never gives up on its own.
    pub async fn run(self, start: Start, shutdown: CancellationToken) {
        tokio::select! {
            _ = self.serve(start) => {}
            () = shutdown.cancelled() => {}
        }
    }

    async fn serve(&self, start: Start) -> Result<(), PipelineClosed> {
        let mut position = start.position;
        match start.kind {
            StartKind::Resume => {}
            StartKind::Fresh(owed) | StartKind::SweepOwed(owed) => self.full_sweep(owed, &position).await?,
            StartKind::PositionLost(owed) => self.position_lost(owed, &position).await?,
        }
        let mut failures = 0u32;
        loop {
            let delay = match self.stream_from(&mut position, &mut failures).await {
                Retry::Closed => return Err(PipelineClosed),
                Retry::PositionLost(detail) => {
                    position = self.recover_lost_position(&position, &detail).await?;
                    continue;
                }
                Retry::Again(reason) => self.connection_lost(&reason, &position, &mut failures),
                Retry::Operator(reason) => self.needs_operator(&reason, &position),
            };
            tokio::time::sleep(delay).await;
        }
    }

    fn dependency(&self) -> Dependency {
        Dependency::BinlogSource(self.settings.url.address().to_owned())
    }

    /// A transient loss: reconnect with backoff; the sweep takes over if it lasts.
    fn connection_lost(&self, reason: &str, position: &BinlogPosition, failures: &mut u32) -> Duration {
        self.links.watermark.source_down();
        self.links.metrics.binlog_connected.set(0);
        self.links.health.problem(
            Part::BinlogSource,
            format!("binlog source {}: connection lost ({reason}); reconnecting", self.settings.url.address()),
        );
        *failures += 1;
        self.links.metrics.binlog_reconnects.inc();
        let delay = self.settings.reconnect.delay(*failures);
        self.links.health.dependencies().down(&self.dependency(), &reason);
        tracing::debug!(%reason, file = %position.file, pos = position.pos, retry_in = ?delay, "binlog connection lost; reconnecting");
        delay
    }

    /// A cause a reconnect cannot fix: the sweep takes over at once, the reader tries
    /// again at the backoff's cap until someone fixes it.
    fn needs_operator(&self, reason: &str, position: &BinlogPosition) -> Duration {
        self.links.watermark.source_broken();
        self.links.metrics.binlog_connected.set(0);
        self.links.health.problem(Part::BinlogSource, format!("binlog source: {reason}"));
        let delay = self.settings.reconnect.max;
        tracing::error!(%reason, file = %position.file, pos = position.pos, retry_in = ?delay, "binlog path stopped: the sweep delivers every PENDING row older than sweep.grace_ms until it is fixed; nothing is skipped");
        delay
    }

    /// The saved position is gone: count it, take the current one, sweep everything
    /// committed so far, and resume at the current position.
    async fn recover_lost_position(
        &self,
        lost: &BinlogPosition,
        detail: &str,
    ) -> Result<BinlogPosition, PipelineClosed> {
        let current = self.current_position().await;
        let reason = format!("the source cannot read binlog {}:{} any more (purged?): {detail}", lost.file, lost.pos);
        // No reading of the primary's clock here: the sweep places the position by
        // the time since the request.
        self.position_lost(OwedSweep { reason, position_read_local_us: None }, &current).await?;
        Ok(current)
    }

    /// Counts and reports a lost position, then sweeps and moves on to `resume_at`.
    async fn position_lost(&self, owed: OwedSweep, resume_at: &BinlogPosition) -> Result<(), PipelineClosed> {
        let reason = &owed.reason;
        self.links.metrics.position_lost.inc();
        self.links.watermark.forget_takeover();
        self.links.health.problem(
            Part::BinlogSource,
            format!("binlog source: position lost ({reason}); sweeping every PENDING row, then tailing again"),
        );
        tracing::error!(%reason, file = %resume_at.file, pos = resume_at.pos, "binlog position lost: sweeping every PENDING row, then tailing from the current position; nothing is skipped");
        self.links.handoff.send(SourceTx::moved()).await?;
        self.full_sweep(owed, resume_at).await
    }

    async fn current_position(&self) -> BinlogPosition {
        let address = self.settings.url.address().to_owned();
        let mut failures = 0u32;
        loop {
            let position = match self.links.pool.get_conn().await {
                Ok(mut conn) => {
                    current_position(&mut conn, self.settings.flavor, &address).await.map_err(|e| e.to_string())
                }
                Err(error) => Err(error.to_string()),
            };
            match position {
                Ok(position) => return position,
                Err(error) => {
                    failures += 1;
                    let delay = self.settings.reconnect.delay(failures);
                    self.links.health.dependencies().down(&self.dependency(), &error);
                    tracing::debug!(%error, retry_in = ?delay, "cannot read the source's current binlog position; retrying");
                    self.links.watermark.source_down();
                    self.links.health.problem(
                        Part::BinlogSource,
                        format!("binlog source {address}: cannot read the current binlog position ({error}); retrying"),
                    );
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// Has the sweep hand on every row committed so far, then moves the checkpoint to
    /// `from` (where tailing starts) once everything before is acknowledged.
    async fn full_sweep(&self, owed: OwedSweep, from: &BinlogPosition) -> Result<(), PipelineClosed> {
        self.links.metrics.full_sweeps.inc();
        let (done, swept) = oneshot::channel();
        let request = FullSweep { owed, position_read: Instant::now(), done };
        self.links.sweeps.send(request).await.map_err(|_| PipelineClosed)?;
        swept.await.map_err(|_| PipelineClosed)?;
        self.links.handoff.send(SourceTx::binlog(Vec::new(), from.clone())).await
    }

    /// Streams until something stops it; says how.
    async fn stream_from(&self, position: &mut BinlogPosition, failures: &mut u32) -> Retry {
        match self.stream(position, failures).await {
            Ok(never) => match never {},
            Err(retry) => retry,
        }
    }

    async fn stream(
        &self,
        position: &mut BinlogPosition,
        failures: &mut u32,
    ) -> Result<std::convert::Infallible, Retry> {
        let mut stream = self.connect(position).await?;
        tracing::info!(file = %position.file, pos = position.pos, gtid = ?position.gtid, server_id = self.settings.server_id, "tailing binlog");
        let mut decoder =
            Decoder::new(&self.settings.schema, &self.settings.table, position, self.settings.part_events);
        decoder.set_columns(self.load_columns().await?);
        let dead_after = self.settings.heartbeat * 3;
        let mut unflushed: Option<BinlogPosition> = None;
        let mut last_flush = tokio::time::Instant::now();
        let mut streaming = false;
        loop {
            let event = match tokio::time::timeout(dead_after, stream.next()).await {
                Err(_) => return Err(Retry::Again(format!("no event or heartbeat for {dead_after:?}"))),
                Ok(None) => return Err(Retry::Again("the server closed the binlog stream".into())),
                Ok(Some(Err(e))) => return Err(self.read_error(e, &decoder)),
                Ok(Some(Ok(event))) => event,
            };
            if !streaming {
                streaming = true;
                *failures = 0;
                self.links.watermark.source_up();
                self.links.health.clear(&Part::BinlogSource);
                self.links.health.dependencies().up(&self.dependency());
                self.links.metrics.binlog_connected.set(1);
            }
            let tx = match decoder.handle(&event)? {
                Decoded::NeedColumns => {
                    // A map just loaded that still does not fit is the decoder's error.
                    decoder.set_columns(self.load_columns().await?);
                    decoder.handle(&event)?
                }
                other => other,
            };
            let mut flush_now = false;
            match tx {
                Decoded::Commit(tx) if tx.events.is_empty() => {
                    self.read_through(tx.end(), None);
                    unflushed = tx.end().cloned();
                }
                Decoded::Commit(tx) => {
                    self.read_through(tx.end(), tx.events.iter().filter_map(|e| e.created_local_us).max());
                    unflushed = None;
                    last_flush = tokio::time::Instant::now();
                    self.hand_on(tx, position).await?;
                }
                Decoded::Heartbeat if decoder.open_events() == 0 => {
                    // Read up to the end of what the server has: the position moves on,
                    // but its commit time stays that of the last transaction read. An
                    // idle stream from a replica that stopped applying has not passed
                    // what the primary committed since; the leader's lease renewals
                    // keep real commits, with the primary's clock, coming while idle.
                    let end = unflushed.take().unwrap_or_else(|| position.clone());
                    self.read_through(Some(&end), None);
                    unflushed = Some(end);
                    flush_now = true;
                }
                Decoded::Part(events) => {
                    self.hand_on(SourceTx { events, origin: Origin::BinlogPart }, position).await?;
                }
                Decoded::Heartbeat | Decoded::Nothing | Decoded::NeedColumns => {}
            }
            let idle_or_due = decoder.open_events() == 0 && last_flush.elapsed() >= POSITION_FLUSH;
            if let Some(end) = unflushed.take_if(|_| idle_or_due || flush_now) {
                last_flush = tokio::time::Instant::now();
                self.hand_on(SourceTx::binlog(Vec::new(), end), position).await?;
            }
        }
    }

    /// Records for the lag metrics that the reader has read through `end`, a
    /// transaction whose newest outbox row was created at `created_local_us`.
    fn read_through(&self, end: Option<&BinlogPosition>, created_local_us: Option<i64>) {
        if let Some(end) = end {
            self.links.metrics.lag.read_through(&end.file, end.pos, end.commit_time, created_local_us);
        }
    }

    async fn hand_on(&self, tx: SourceTx, position: &mut BinlogPosition) -> Result<(), Retry> {
        let end = tx.end().cloned();
        self.links.handoff.send(tx).await.map_err(|PipelineClosed| Retry::Closed)?;
        if let Some(end) = end {
            *position = end;
        }
        Ok(())
    }

    async fn connect(&self, position: &BinlogPosition) -> Result<BinlogStream, Retry> {
        let mut conn = db::open_conn("source", &self.settings.url, &self.settings.tls).await.map_err(login_error)?;
        let heartbeat_ns = self.settings.heartbeat.as_nanos();
        conn.query_drop(format!("SET @master_heartbeat_period = {heartbeat_ns}"))
            .await
            .map_err(|e| Retry::Again(e.to_string()))?;
        if self.settings.flavor == Flavor::MariaDb {
            conn.query_drop(format!("SET @mariadb_slave_capability = {}", mariadb::SLAVE_CAPABILITY_GTID))
                .await
                .map_err(|e| Retry::Again(e.to_string()))?;
            if let Some(gtid) = position.gtid.as_deref().map(GtidState::parse).filter(GtidState::is_mariadb) {
                // Resume by GTID: the same position holds on every server of the
                // replication topology, so a switch of source.url loses nothing.
                let state = gtid.render().unwrap_or_default();
                conn.query_drop(format!(
                    "SET @slave_connect_state = '{state}', @slave_gtid_strict_mode = 0, @slave_gtid_ignore_duplicates = 0"
                ))
                .await
                .map_err(|e| Retry::Again(e.to_string()))?;
            }
        }
        let request = BinlogStreamRequest::new(self.settings.server_id);
        let gtid = position.gtid.as_deref().map(GtidState::parse).unwrap_or_default();
        // MySQL resumes by its executed GTID set where the checkpoint has one (the
        // server then sends what the set lacks, on any server of the topology).
        let request = if self.settings.flavor == Flavor::MySql && gtid.is_mysql() {
            request.with_gtid().with_gtid_set(gtid.mysql_sids()).with_pos(4)
        } else {
            request.with_filename(position.file.as_bytes()).with_pos(position.pos)
        };
        if !self.links.term.is_current() {
            return Err(Retry::Closed);
        }
        conn.get_binlog_stream(request).await.map_err(|e| self.stream_error(e))
    }

    async fn load_columns(&self) -> Result<ColumnMap, Retry> {
        let mut conn = self.links.pool.get_conn().await.map_err(|e| Retry::Again(e.to_string()))?;
        let map = ColumnMap::load(&mut conn, &self.settings.schema, &self.settings.table)
            .await
            .map_err(|e| Retry::Again(e.to_string()))?;
        map.map_err(|e| Retry::Operator(e.to_string()))
    }

    /// An error while reading the stream: an event that cannot be parsed is named by
    /// where it starts; anything else is what it is when connecting, with the place.
    fn read_error(&self, error: mysql_async::Error, decoder: &Decoder) -> Retry {
        if let mysql_async::Error::Io(mysql_async::IoError::Io(e)) = &error {
            if matches!(e.kind(), std::io::ErrorKind::InvalidData | std::io::ErrorKind::Other) {
                return Retry::Again(decoder.unreadable(e).to_string());
            }
        }
        match self.stream_error(error) {
            Retry::Again(detail) => Retry::Again(format!("{detail} (reading after {})", decoder.reading_at())),
            other => other,
        }
    }

    fn stream_error(&self, error: mysql_async::Error) -> Retry {
        match &error {
            // The server dropped this dump because another replica registered with the
            // same server_id: not a lost position, and a sweep would not help.
            mysql_async::Error::Server(e) if same_server_id(&e.message) => Retry::Operator(format!(
                "source.server_id {} is used by another replica or relay on {} (server: {}); fix: give each relay fleet a source.server_id unique among the source's replicas",
                self.settings.server_id,
                self.settings.url.address(),
                e.message
            )),
            // ER_MASTER_FATAL_ERROR_READING_BINLOG: purged file, bad position, other server.
            mysql_async::Error::Server(e) if e.code == 1236 => Retry::PositionLost(e.message.clone()),
            mysql_async::Error::Server(e) if e.code == 1227 || e.code == 1045 => {
                let user = self.settings.url.user().unwrap_or_default();
                Retry::Operator(format!(
                    "REPLICATION SLAVE missing for '{user}' on {} (server: {}); fix: GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{user}'",
                    self.settings.url.address(),
                    e.message
                ))
            }
            _ => Retry::Again(error.to_string()),
        }
    }
}

/// A failed login: wrong credentials, a dropped database or a TLS mismatch need a
/// person; the rest is a connection problem.
fn login_error(error: DbError) -> Retry {
    match error {
        DbError::Unreachable { reason, .. } => Retry::Again(reason),
        other => Retry::Operator(other.to_string()),
    }
}

/// Whether a server error says another replica connected with our server_id
/// (MySQL and MariaDB word it "A slave with the same server_uuid/server_id ...").
fn same_server_id(message: &str) -> bool {
    message.contains("same server_uuid/server_id") || message.contains("same server_id")
}

/// How streaming stopped, which decides what the reader does next.
enum Retry {
    /// A connection problem: reconnect with backoff.
    Again(String),
    /// Error 1236: the position cannot be read any more.
    PositionLost(String),
    /// A cause only a person can fix (privilege, undecodable event, column map).
    Operator(String),
    /// The pipeline stopped: so does the reader.
    Closed,
}

impl From<DecodeError> for Retry {
    fn from(error: DecodeError) -> Self {
        Retry::Operator(error.to_string())
    }
}
