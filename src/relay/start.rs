//! Where the binlog path starts: the source's checks, the checkpoint, and whether a
//! full sweep must run first.
//!
//! - A saved checkpoint of the same source: resume there.
//! - No checkpoint (first start, or the RocksDB directory was deleted): record the
//!   current position first, then sweep every PENDING row, then tail from it.
//! - A checkpoint of another server (failover without GTID positioning, a rebuilt
//!   replica): the position means nothing there; treated as a lost position.
//!
//! Changing a pinned queue count is refused: it would move keys between queues.

use std::collections::HashMap;

use mysql_async::Pool;

use super::RelayError;
use crate::checkpoint::{Checkpoint, CheckpointStore};
use crate::config::Config;
use crate::db::{self, DbError};
use crate::source::binlog::{self, ColumnMap, ServerInfo, Start, StartKind};
use outbox_kit::OutboxTable;

/// The checked source and where its reader starts.
pub struct BinlogStart {
    /// Pool on the source for look-ups while streaming.
    pub pool: Pool,
    pub server: ServerInfo,
    pub store: CheckpointStore,
    pub checkpoint: Checkpoint,
    pub start: Start,
}

/// Checks the source (settings, privileges, outbox columns) and opens the checkpoint.
pub async fn open(config: &Config, outbox: &OutboxTable) -> Result<BinlogStart, RelayError> {
    let source = config.source()?;
    let pool = db::connect("source", &source.url, 2).await?;
    let address = source.url.address().to_owned();
    let mut conn = pool.get_conn().await.map_err(|e| DbError::query("source", &source.url, e))?;
    let server = binlog::preflight(&mut conn, &address).await?;
    ColumnMap::load(&mut conn, &outbox.schema, &outbox.table)
        .await
        .map_err(|e| DbError::query("source", &source.url, e))??;
    tracing::info!(version = %server.version, identity = %server.identity, "source checked");
    let store = CheckpointStore::open(&config.checkpoint.path)?;
    let (checkpoint, kind) = start_checkpoint(config, &store, &server, &mut conn, &address).await?;
    drop(conn);
    tracing::info!(file = %checkpoint.position.file, pos = checkpoint.position.pos, gtid = ?checkpoint.position.gtid, "starting from checkpoint");
    let start = Start { position: checkpoint.position.clone(), kind };
    Ok(BinlogStart { pool, server, store, checkpoint, start })
}

/// The checkpoint to start from, saved before anything else when it is new.
async fn start_checkpoint(
    config: &Config,
    store: &CheckpointStore,
    server: &ServerInfo,
    conn: &mut mysql_async::Conn,
    address: &str,
) -> Result<(Checkpoint, StartKind), RelayError> {
    let configured: HashMap<&String, u32> = config.rocketmq.topics.iter().map(|(t, c)| (t, c.queue_count)).collect();
    let saved = store.load()?;
    if let Some(saved) = &saved {
        for (topic, pinned) in &saved.queue_counts {
            if let Some(&wanted) = configured.get(topic).filter(|&&wanted| wanted != *pinned) {
                return Err(RelayError::Environment(format!(
                    "rocketmq.topics.{topic}.queue_count is {wanted} but the checkpoint pinned {pinned}: changing it would move keys to other queues and break their order; restore {pinned}, or drain the topic and delete the checkpoint"
                )));
            }
        }
        if saved.server_identity == server.identity {
            return Ok((saved.clone(), StartKind::Resume));
        }
    }
    let position = binlog::current_position(conn, server.flavor, address).await?;
    let (queue_counts, kind) = match saved {
        Some(saved) => {
            let reason = format!(
                "the checkpoint belongs to source {} but source.url now reaches {}",
                saved.server_identity, server.identity
            );
            (saved.queue_counts, StartKind::PositionLost(reason))
        }
        None => (configured.into_iter().map(|(t, c)| (t.clone(), c)).collect(), StartKind::Fresh),
    };
    let checkpoint = Checkpoint { position, server_identity: server.identity.clone(), queue_counts };
    store.save(&checkpoint)?;
    tracing::info!(start = ?kind, "new checkpoint at the source's current binlog position (saved first)");
    Ok((checkpoint, kind))
}
