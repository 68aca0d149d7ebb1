//! A copy of the checkpoint in the primary's `outbox_relay_checkpoint` table.
//!
//! RocksDB is each instance's own truth (local and synced); the mirror is the fleet's
//! (and shows an operator where the binlog path stands without that disk):
//! a standby that becomes leader on another host, without that disk, starts from it.
//! The checkpoint writer writes it after each local checkpoint, in order, best
//! effort: a failed mirror write is logged and the next checkpoint writes it again.
//! Each write is fenced by the leader's term, so a deposed leader cannot move it.

use mysql_async::prelude::Queryable;
use mysql_async::Pool;

use super::Checkpoint;
use crate::store::TermFence;
use outbox_kit::OutboxTable;

/// The mirror row of one outbox table, written under one leader term.
#[derive(Clone)]
pub struct Mirror {
    pool: Pool,
    outbox: OutboxTable,
    fence: TermFence,
}

impl Mirror {
    pub fn new(pool: Pool, outbox: OutboxTable, fence: TermFence) -> Self {
        Self { pool, outbox, fence }
    }

    fn source_id(&self) -> String {
        format!("{}.{}", self.outbox.schema, self.outbox.table)
    }

    /// Upserts `checkpoint` as the row of this outbox table, if our term is still current.
    pub async fn save(&self, checkpoint: &Checkpoint) -> Result<(), mysql_async::Error> {
        let whole = serde_json::to_string(checkpoint).unwrap_or_default();
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "INSERT INTO `{}`.`outbox_relay_checkpoint` (source_id, binlog_file, binlog_pos, gtid, server_uuid, term, checkpoint) \
                 SELECT ?, ?, ?, ?, ?, term, ? {} \
                 ON DUPLICATE KEY UPDATE binlog_file = VALUES(binlog_file), binlog_pos = VALUES(binlog_pos), \
                 gtid = VALUES(gtid), server_uuid = VALUES(server_uuid), term = VALUES(term), checkpoint = VALUES(checkpoint)",
                self.outbox.schema,
                self.fence.select_from()
            ),
            (
                self.source_id(),
                &checkpoint.position.file,
                checkpoint.position.pos,
                &checkpoint.position.gtid,
                &checkpoint.server_identity,
                whole,
            ),
        )
        .await
    }

    /// The mirrored checkpoint, if there is one the relay can read.
    pub async fn load(&self) -> Result<Option<Checkpoint>, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let whole: Option<Option<String>> = conn
            .exec_first(
                format!(
                    "SELECT checkpoint FROM `{}`.`outbox_relay_checkpoint` WHERE source_id = ?",
                    self.outbox.schema
                ),
                (self.source_id(),),
            )
            .await?;
        Ok(whole.flatten().and_then(|whole| match serde_json::from_str(&whole) {
            Ok(checkpoint) => Some(checkpoint),
            Err(error) => {
                tracing::warn!(%error, "the checkpoint mirror row cannot be read; ignoring it");
                None
            }
        }))
    }
}
