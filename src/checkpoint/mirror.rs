//! A copy of the checkpoint in the primary's `outbox_relay_checkpoint` table.
//!
//! RocksDB is each instance's own truth (local and synced); the mirror is the fleet's
//! (and shows an operator where the binlog path stands without that disk):
//! a standby that becomes leader on another host, without that disk, starts from it.
//! The checkpoint writer writes it after each local checkpoint, in order, best
//! effort: a failed mirror write is logged and the next checkpoint writes it again.
//! Each write is fenced by the leader's term, so a deposed leader cannot move it.

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Pool, Value};

use super::Checkpoint;
use serde::Serialize;

use crate::store::{ReadFor, TermFence};
use outbox_kit::OutboxTable;

/// The mirrored checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PositionReport {
    pub file: String,
    pub pos: u64,
    pub gtid: Option<String>,
    pub server: Option<String>,
    /// The leader term that wrote it.
    pub term: u64,
    pub updated_at: String,
}

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

    /// Upserts `checkpoint` as the row of this outbox table, if our term is still current.
    pub async fn save(&self, checkpoint: &Checkpoint) -> Result<(), mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "INSERT INTO `{}`.`outbox_relay_checkpoint` ({COLUMNS}) SELECT ?, ?, ?, ?, ?, ?, term {} {ON_DUPLICATE}",
                self.outbox.schema,
                self.fence.select_from()
            ),
            Params::Positional(row_values(&self.outbox, checkpoint)),
        )
        .await
    }

    /// The mirrored checkpoint, if there is one the relay can read.
    pub async fn load(&self) -> Result<Option<Checkpoint>, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        Ok(read_row(&mut conn, &self.outbox, ReadFor::Show).await?.and_then(|row| row.checkpoint))
    }
}

/// The mirror row's columns: those [`row_values`] gives, in its order, then `term`.
const COLUMNS: &str = "source_id, binlog_file, binlog_pos, gtid, server_uuid, checkpoint, term";

/// How an upsert replaces an existing mirror row.
const ON_DUPLICATE: &str =
    "ON DUPLICATE KEY UPDATE binlog_file = VALUES(binlog_file), binlog_pos = VALUES(binlog_pos), \
    gtid = VALUES(gtid), server_uuid = VALUES(server_uuid), term = VALUES(term), checkpoint = VALUES(checkpoint)";

/// The mirror row's key: `schema.table` of the outbox table.
fn source_id(outbox: &OutboxTable) -> String {
    format!("{}.{}", outbox.schema, outbox.table)
}

/// The values of every column but `term`, in the order of [`COLUMNS`].
fn row_values(outbox: &OutboxTable, checkpoint: &Checkpoint) -> Vec<Value> {
    let whole = serde_json::to_string(checkpoint).unwrap_or_default();
    vec![
        source_id(outbox).into(),
        checkpoint.position.file.as_str().into(),
        checkpoint.position.pos.into(),
        checkpoint.position.gtid.as_deref().into(),
        checkpoint.server_identity.as_str().into(),
        whole.into(),
    ]
}

/// The mirror row as it stands: its columns, and the whole checkpoint when it is
/// there and readable.
#[derive(Debug, Clone)]
pub(crate) struct MirrorRow {
    pub(crate) columns: PositionReport,
    pub(crate) checkpoint: Option<Checkpoint>,
}

/// The mirror row of `outbox`, read on `conn` (with [`ReadFor::Update`] locked until
/// the caller's transaction ends).
pub(crate) async fn read_row(
    conn: &mut impl Queryable,
    outbox: &OutboxTable,
    read_for: ReadFor,
) -> Result<Option<MirrorRow>, mysql_async::Error> {
    let row: Option<(String, u64, Option<String>, Option<String>, u64, String, Option<String>)> = conn
        .exec_first(
            format!(
                "SELECT binlog_file, binlog_pos, gtid, server_uuid, term, CAST(updated_at AS CHAR), checkpoint \
                 FROM `{}`.`outbox_relay_checkpoint` WHERE source_id = ?{}",
                outbox.schema,
                read_for.sql()
            ),
            (source_id(outbox),),
        )
        .await?;
    Ok(row.map(|(file, pos, gtid, server, term, updated_at, whole)| MirrorRow {
        columns: PositionReport { file, pos, gtid, server, term, updated_at },
        checkpoint: whole.and_then(|whole| match serde_json::from_str(&whole) {
            Ok(checkpoint) => Some(checkpoint),
            Err(error) => {
                tracing::warn!(%error, "the checkpoint mirror row cannot be read; ignoring it");
                None
            }
        }),
    }))
}

/// Replaces the mirror row of `outbox` with `checkpoint`, recorded under `term`, on
/// `conn` inside the caller's transaction and without a fence: for an operator who
/// ends every earlier term in the same transaction, so no leader overwrites it.
pub(crate) async fn overwrite(
    conn: &mut impl Queryable,
    outbox: &OutboxTable,
    checkpoint: &Checkpoint,
    term: u64,
) -> Result<(), mysql_async::Error> {
    let mut values = row_values(outbox, checkpoint);
    values.push(term.into());
    conn.exec_drop(
        format!(
            "INSERT INTO `{}`.`outbox_relay_checkpoint` ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) {ON_DUPLICATE}",
            outbox.schema
        ),
        Params::Positional(values),
    )
    .await
}
