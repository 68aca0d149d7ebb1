//! Status write-back on the primary: SENT (with msg_id and sent_at) and FAILED.
//!
//! SENT updates are batched and run off the send path: if one is lost, the row stays
//! PENDING and the sweep sends it again (a duplicate, never a loss). FAILED is
//! written before the event counts as acknowledged, so the checkpoint never passes an
//! event that is neither on the broker nor visibly FAILED in the table.
//! Neither update touches a row that is already SENT.

use std::time::{SystemTime, UNIX_EPOCH};

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Pool, Value};

use outbox_kit::{truncate_utf8, OutboxTable};

use super::{FAILED, PENDING, SENT};

/// `last_error` column width.
const LAST_ERROR_MAX: usize = 1024;

/// Status updates on the outbox table.
#[derive(Clone)]
pub struct StatusStore {
    pool: Pool,
    outbox: OutboxTable,
}

/// One row to mark SENT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub id: u64,
    pub msg_id: String,
    /// When the broker answered SEND_OK (stored as `sent_at`, so it measures delivery,
    /// not how long the batched write-back took).
    pub at: SystemTime,
}

impl StatusStore {
    pub fn new(pool: Pool, outbox: OutboxTable) -> Self {
        Self { pool, outbox }
    }

    /// Marks `rows` SENT with their msg_id in one statement; returns rows changed.
    pub async fn mark_sent(&self, rows: &[Sent]) -> Result<u64, mysql_async::Error> {
        if rows.is_empty() {
            return Ok(0);
        }
        let derived: Vec<&str> = std::iter::once("SELECT ? AS id, ? AS msg_id, ? AS sent_at")
            .chain(std::iter::repeat_n("SELECT ?, ?, ?", rows.len() - 1))
            .collect();
        let sql = format!(
            "UPDATE {} o JOIN ({}) v ON o.id = v.id \
             SET o.status = {SENT}, o.msg_id = v.msg_id, o.sent_at = FROM_UNIXTIME(v.sent_at), o.owner = NULL, \
             o.lease_until = NULL WHERE o.status <> {SENT}",
            self.outbox.qualified(),
            derived.join(" UNION ALL ")
        );
        let params: Vec<Value> = rows
            .iter()
            .flat_map(|r| [Value::from(r.id), Value::from(r.msg_id.as_str()), Value::from(unix_millis_text(r.at))])
            .collect();
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(sql, Params::Positional(params)).await?;
        Ok(conn.affected_rows())
    }

    /// (PENDING rows, age in seconds of the oldest one) for the lag metrics.
    pub async fn pending_summary(&self) -> Result<(u64, f64), mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let row: Option<(u64, Option<i64>)> = conn
            .query_first(format!(
                "SELECT COUNT(*), TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(3)) FROM {} WHERE status = {PENDING}",
                self.outbox.qualified()
            ))
            .await?;
        let (pending, micros) = row.unwrap_or((0, None));
        Ok((pending, micros.unwrap_or(0).max(0) as f64 / 1e6))
    }

    /// Marks `ids` FAILED with `reason` (status 3, retry_count + 1, last_error).
    pub async fn mark_failed(&self, ids: &[u64], reason: &str) -> Result<u64, mysql_async::Error> {
        if ids.is_empty() {
            return Ok(0);
        }
        let placeholders = vec!["?"; ids.len()].join(",");
        let sql = format!(
            "UPDATE {} SET status = {FAILED}, last_error = ?, retry_count = retry_count + 1, owner = NULL, lease_until = NULL \
             WHERE id IN ({placeholders}) AND status <> {SENT}",
            self.outbox.qualified()
        );
        let mut params = vec![Value::from(truncate_utf8(reason, LAST_ERROR_MAX))];
        params.extend(ids.iter().map(|id| Value::from(*id)));
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(sql, Params::Positional(params)).await?;
        Ok(conn.affected_rows())
    }
}

/// `seconds.millis` since the epoch, as text (exact in SQL, unlike a double).
fn unix_millis_text(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:03}", since.as_secs(), since.subsec_millis())
}
