//! Where the binlog path starts: the source's checks (once per process), then at the
//! start of every leader term the checkpoint to resume from and whether a full sweep
//! must run first.
//!
//! - The checkpoint is the newer of the local RocksDB one and the mirror row on the
//!   primary (a standby that takes over on another host has only the mirror). Newer
//!   is decided by GTID where the server has them, else by file and position of the
//!   same server; when they cannot be compared the mirror wins (the last leader wrote it).
//! - A checkpoint of the same source, or one with a GTID position (MariaDB GTID list,
//!   MySQL executed set): resume there. A GTID position holds on every server of the
//!   replication topology, so a new `source.url` (another replica, or the primary)
//!   resumes without a sweep.
//! - No checkpoint (first start, or the RocksDB directory was deleted and no mirror):
//!   record the current position first, then sweep every PENDING row, then tail from it.
//! - A checkpoint of another server without a GTID: the position means nothing
//!   there; treated as a lost position.
//!
//! Changing a pinned queue count is refused: it would move keys between queues.

use mysql_async::Pool;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::RelayError;
use crate::checkpoint::{Checkpoint, CheckpointStore, Mirror};
use crate::config::{Config, DbUrl};
use crate::db::{self, DbError};
use crate::rocketmq::QueueLayout;
use crate::server::{Flavor, ServerInfo};
use crate::source::binlog::{self, ColumnMap, GtidState, Start, StartKind};
use crate::source::OwedSweep;
use outbox_kit::OutboxTable;

/// How long a new leader waits for the mirror row before it goes on without it.
const MIRROR_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The checked source and the local checkpoint, kept for the whole process.
pub struct BinlogSource {
    /// Pool on the source for look-ups while streaming.
    pub pool: Pool,
    pub server: ServerInfo,
    pub store: Arc<CheckpointStore>,
    url: DbUrl,
}

/// Where one leader term's reader starts.
pub struct BinlogStart {
    pub checkpoint: Checkpoint,
    pub start: Start,
}

/// Checks the source (settings, privileges, outbox columns) and opens the checkpoint.
pub async fn open(config: &Config, outbox: &OutboxTable) -> Result<BinlogSource, RelayError> {
    let source = config.source()?;
    let pool = db::connect_with("source", &source.url, &source.tls, 2, &[]).await?;
    let address = source.url.address().to_owned();
    let mut conn = pool.get_conn().await.map_err(|e| DbError::query("source", &source.url, e))?;
    let server = binlog::preflight(&mut conn, &address, source).await?;
    ColumnMap::load(&mut conn, &outbox.schema, &outbox.table)
        .await
        .map_err(|e| DbError::query("source", &source.url, e))??;
    drop(conn);
    tracing::info!(version = %server.version, identity = %server.identity, "source checked");
    let store = Arc::new(CheckpointStore::open(&config.checkpoint.path)?);
    Ok(BinlogSource { pool, server, store, url: source.url.clone() })
}

impl BinlogSource {
    /// The checkpoint a new leader term starts from, saved locally before anything else.
    /// `primary_now_us` is the primary's local clock read just before (see
    /// [`OwedSweep::position_read_local_us`]).
    pub async fn start(
        &self,
        config: &Config,
        mirror: &Mirror,
        primary_now_us: Option<i64>,
    ) -> Result<BinlogStart, RelayError> {
        let local = self.store.load()?;
        let mirrored = match tokio::time::timeout(MIRROR_READ_TIMEOUT, mirror.load()).await {
            Ok(Ok(found)) => found,
            Ok(Err(error)) => {
                tracing::warn!(%error, "cannot read the checkpoint mirror; starting from the local checkpoint (duplicates at most)");
                None
            }
            Err(_) => {
                tracing::warn!("the checkpoint mirror did not answer within {MIRROR_READ_TIMEOUT:?}; starting from the local checkpoint (duplicates at most)");
                None
            }
        };
        let from_mirror = mirrored.is_some() && !newer_or_same(local.as_ref(), mirrored.as_ref());
        let chosen = if from_mirror { mirrored } else { local };
        if let Some(chosen) = &chosen {
            check_pins(config, chosen)?;
        }
        let before = chosen.as_ref().map(|c| c.server_identity.clone()).unwrap_or_default();
        let owed = |reason: String| OwedSweep { reason, position_read_local_us: primary_now_us };
        let (mut checkpoint, kind) = match chosen {
            Some(saved) if saved.server_identity == self.server.identity => resumed(saved),
            Some(mut saved) if self.resumes_by_gtid(&saved) => {
                tracing::info!(gtid = ?saved.position.gtid, checkpoint_of = %saved.server_identity, source = %self.server.identity, "resuming by GTID on another server");
                // From here on the position is this server's; its file and offset follow
                // with the first event read. Its binlog may order the transactions of
                // different replication streams otherwise: the queues' marks, which
                // count on the same order, are dropped (duplicates at most).
                saved.server_identity.clone_from(&self.server.identity);
                saved.queue_marks.clear();
                resumed(saved)
            }
            Some(saved) => {
                let reason = format!(
                    "the checkpoint belongs to source {} but source.url now reaches {} and there is no GTID to resume by",
                    saved.server_identity, self.server.identity
                );
                let pinned = self.at_current_position(saved.queue_counts, saved.queue_layouts).await?;
                (pinned, StartKind::PositionLost(owed(reason)))
            }
            None => {
                let pins = config.rocketmq.topics.iter().map(|(t, c)| (t.clone(), c.queue_count)).collect();
                let fresh = self.at_current_position(pins, BTreeMap::new()).await?;
                (fresh, StartKind::Fresh(owed("first start: no checkpoint".into())))
            }
        };
        // Owed before the position is saved: a start cut short sweeps again.
        checkpoint.owed_sweep = kind.owed_sweep().cloned();
        if from_mirror || kind != StartKind::Resume || checkpoint.server_identity != before {
            self.store.save(&checkpoint)?;
        }
        let position = &checkpoint.position;
        tracing::info!(file = %position.file, pos = position.pos, gtid = ?position.gtid, from_mirror, start = %kind, "starting from checkpoint");
        let start = Start { position: position.clone(), kind };
        Ok(BinlogStart { checkpoint, start })
    }

    /// A GTID position of the server's family resumes on any server that has the transactions.
    fn resumes_by_gtid(&self, saved: &Checkpoint) -> bool {
        let gtid = saved.position.gtid.as_deref().map(GtidState::parse).unwrap_or_default();
        match self.server.flavor {
            Flavor::MariaDb => gtid.is_mariadb(),
            Flavor::MySql => gtid.is_mysql(),
        }
    }

    /// A new checkpoint at the source's current binlog position, with the pins given.
    async fn at_current_position(
        &self,
        queue_counts: BTreeMap<String, u32>,
        queue_layouts: BTreeMap<String, QueueLayout>,
    ) -> Result<Checkpoint, RelayError> {
        let mut conn = self.pool.get_conn().await.map_err(|e| DbError::query("source", &self.url, e))?;
        let position = binlog::current_position(&mut conn, self.server.flavor, self.url.address()).await?;
        let server_identity = self.server.identity.clone();
        // Every row committed before the position is the full sweep's to send.
        Ok(Checkpoint::at(position, server_identity, queue_counts, queue_layouts))
    }
}

/// A saved checkpoint resumed: tailing at once, or after the full sweep it still owes.
fn resumed(saved: Checkpoint) -> (Checkpoint, StartKind) {
    match saved.owed_sweep.clone() {
        Some(owed) => (saved, StartKind::SweepOwed(owed)),
        None => (saved, StartKind::Resume),
    }
}

/// A pinned queue count the configuration now contradicts is refused.
fn check_pins(config: &Config, saved: &Checkpoint) -> Result<(), RelayError> {
    let configured: HashMap<&String, u32> = config.rocketmq.topics.iter().map(|(t, c)| (t, c.queue_count)).collect();
    let layout_counts =
        saved.queue_layouts.iter().map(|(topic, layout)| (topic, u32::try_from(layout.len()).unwrap_or(u32::MAX)));
    for (topic, pinned) in saved.queue_counts.iter().map(|(topic, count)| (topic, *count)).chain(layout_counts) {
        if let Some(&wanted) = configured.get(topic).filter(|&&wanted| wanted != pinned) {
            return Err(RelayError::Environment(format!(
                "rocketmq.topics.{topic}.queue_count is {wanted} but the checkpoint pinned {pinned}: changing it would move keys to other queues and break their order; restore {pinned}, or drain the topic and delete the checkpoint"
            )));
        }
    }
    Ok(())
}

/// Whether `a` is at least as far as `b` (no `b`: yes; no `a`: no).
fn newer_or_same(a: Option<&Checkpoint>, b: Option<&Checkpoint>) -> bool {
    match (a, b) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(a), Some(b)) => a.is_at_least(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::BinlogPosition;

    fn at(identity: &str, file: &str, pos: u64, gtid: Option<&str>) -> Checkpoint {
        let position = BinlogPosition { file: file.into(), pos, gtid: gtid.map(Into::into), commit_time: None };
        Checkpoint::at(position, identity.into(), Default::default(), Default::default())
    }

    #[test]
    fn the_newer_checkpoint_is_decided_by_gtid_across_servers() {
        let replica = at("2@r:13307", "mariadb-bin.000009", 900, Some("0-1-120"));
        let primary = at("1@p:13306", "mariadb-bin.000002", 100, Some("0-1-100"));
        assert!(newer_or_same(Some(&replica), Some(&primary)));
        assert!(!newer_or_same(Some(&primary), Some(&replica)), "file names of other servers mean nothing");
    }

    #[test]
    fn without_gtids_only_the_same_server_compares_by_file_and_position() {
        let early = at("uuid-a", "binlog.000003", 500, None);
        let late = at("uuid-a", "binlog.000004", 4, None);
        assert!(newer_or_same(Some(&late), Some(&early)));
        assert!(!newer_or_same(Some(&early), Some(&late)));
        let other = at("uuid-b", "binlog.000009", 4, None);
        assert!(!newer_or_same(Some(&other), Some(&early)), "another server: the mirror wins");
        assert!(newer_or_same(Some(&early), None) && !newer_or_same(None, Some(&early)));
    }
}
