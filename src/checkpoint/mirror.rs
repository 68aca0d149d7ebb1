//! A copy of the checkpoint in the primary's `outbox_relay_checkpoint` table.
//!
//! RocksDB is the relay's truth (local and synced); the mirror lets an operator, or
//! a relay started on another host, see where the binlog path stands without that
//! disk. The checkpoint writer writes it after each local checkpoint, in order, best
//! effort: a failed mirror write is logged and the next checkpoint writes it again.

use mysql_async::prelude::Queryable;
use mysql_async::Pool;

use super::Checkpoint;
use outbox_kit::OutboxTable;

/// Writes checkpoints to the primary, keyed by the outbox table they belong to.
#[derive(Clone)]
pub struct Mirror {
    pool: Pool,
    outbox: OutboxTable,
}

impl Mirror {
    pub fn new(pool: Pool, outbox: OutboxTable) -> Self {
        Self { pool, outbox }
    }

    /// Upserts `checkpoint` as the row of this outbox table.
    pub async fn save(&self, checkpoint: &Checkpoint) -> Result<(), mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "INSERT INTO `{}`.`outbox_relay_checkpoint` (source_id, binlog_file, binlog_pos, gtid, server_uuid) \
                 VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE binlog_file = VALUES(binlog_file), \
                 binlog_pos = VALUES(binlog_pos), gtid = VALUES(gtid), server_uuid = VALUES(server_uuid)",
                self.outbox.schema
            ),
            (
                format!("{}.{}", self.outbox.schema, self.outbox.table),
                &checkpoint.position.file,
                checkpoint.position.pos,
                &checkpoint.position.gtid,
                &checkpoint.server_identity,
            ),
        )
        .await
    }
}
