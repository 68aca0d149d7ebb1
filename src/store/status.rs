//! Status on the primary: FAILED write-backs, and the counts and backlog age the
//! gauges and the status report read.
//!
//! FAILED is written before the event counts as acknowledged, so the checkpoint never
//! passes an event that is neither on the broker nor visibly FAILED in the table. (SENT
//! write-backs run off the send path on connections of their own: `sent.rs`.) No
//! update touches a row that is already SENT, or SKIPPED by an operator.

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Pool, Value};

use outbox_kit::{truncate_utf8, OutboxTable, RowStatus};

use super::{keyed, padded, RowKey, TermFence, FAILED, PENDING, SENDING, SENT, SKIPPED};

/// `last_error` column width.
const LAST_ERROR_MAX: usize = 1024;

/// Status updates on the outbox table, by one leader term: each write changes rows
/// only while that term is current.
#[derive(Clone)]
pub struct StatusStore {
    pool: Pool,
    outbox: OutboxTable,
    fence: TermFence,
}

/// The age of the backlog, by the database's clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backlog {
    /// Rows waiting: PENDING, and SENDING whose lease has passed.
    pub waiting: u64,
    pub oldest_waiting_secs: f64,
}

impl StatusStore {
    pub fn new(pool: Pool, outbox: OutboxTable, fence: TermFence) -> Self {
        Self { pool, outbox, fence }
    }

    /// How many rows wait to be sent (PENDING, or SENDING whose lease has passed or
    /// was never set) and how late the oldest is, in seconds of the database's own
    /// clock.
    pub async fn backlog(&self) -> Result<Backlog, mysql_async::Error> {
        let row: Option<(u64, Option<i64>)> = self
            .pool
            .get_conn()
            .await?
            .query_first(format!(
                "SELECT COUNT(*), TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(3)) \
                 FROM {} WHERE status = {PENDING} OR (status = {SENDING} AND (lease_until IS NULL OR lease_until < NOW(3)))",
                self.outbox.qualified()
            ))
            .await?;
        let (waiting, micros) = row.unwrap_or((0, None));
        Ok(Backlog { waiting, oldest_waiting_secs: micros.unwrap_or(0).max(0) as f64 / 1e6 })
    }

    /// How far the primary's local clock reading (in the time zone its sessions write
    /// `created_at` in) is ahead of this host's clock, in microseconds.
    pub async fn db_ahead_us(&self) -> Result<Option<i64>, mysql_async::Error> {
        super::clock::db_ahead_us(&self.pool).await
    }

    /// Rows per status; SENT rows (the whole retention window, the costly count) only
    /// with `with_sent`. Statuses without rows are counted 0.
    pub async fn row_counts(&self, with_sent: bool) -> Result<Vec<(RowStatus, u64)>, mysql_async::Error> {
        let statuses: Vec<RowStatus> =
            RowStatus::ALL.into_iter().filter(|s| with_sent || *s != RowStatus::Sent).collect();
        let codes: Vec<String> = statuses.iter().map(|s| s.code().to_string()).collect();
        let mut conn = self.pool.get_conn().await?;
        let found: Vec<(u8, u64)> = conn
            .query(format!(
                "SELECT status, COUNT(*) FROM {} WHERE status IN ({}) GROUP BY status",
                self.outbox.qualified(),
                codes.join(",")
            ))
            .await?;
        Ok(statuses
            .into_iter()
            .map(|status| (status, found.iter().find(|(code, _)| *code == status.code()).map_or(0, |(_, n)| *n)))
            .collect())
    }

    /// Marks `rows` FAILED with `reason` (status 3, retry_count + 1, last_error).
    pub async fn mark_failed(&self, rows: &[RowKey<'_>], reason: &str) -> Result<u64, mysql_async::Error> {
        if rows.is_empty() {
            return Ok(0);
        }
        let sql = format!(
            "UPDATE {} o JOIN ({}) v ON o.id = v.id AND o.event_id = v.event_id {} \
             SET o.status = {FAILED}, o.last_error = ?, o.retry_count = o.retry_count + 1, o.owner = NULL, \
             o.lease_until = NULL WHERE o.status NOT IN ({SENT}, {SKIPPED})",
            self.outbox.qualified(),
            keyed(rows.len(), &[]),
            self.fence.join()
        );
        let mut params = key_params(rows);
        params.push(Value::from(truncate_utf8(reason, LAST_ERROR_MAX)));
        self.exec(sql, params).await
    }

    /// Marks rows FAILED by id alone: rows whose event_id cannot even be read.
    pub async fn mark_failed_by_id(&self, ids: &[u64], reason: &str) -> Result<u64, mysql_async::Error> {
        if ids.is_empty() {
            return Ok(0);
        }
        let sql = format!(
            "UPDATE {} o {} SET o.status = {FAILED}, o.last_error = ?, o.retry_count = o.retry_count + 1, \
             o.owner = NULL, o.lease_until = NULL WHERE o.id IN ({}) AND o.status NOT IN ({SENT}, {SKIPPED})",
            self.outbox.qualified(),
            self.fence.join(),
            vec!["?"; ids.len()].join(",")
        );
        let mut params = vec![Value::from(truncate_utf8(reason, LAST_ERROR_MAX))];
        params.extend(ids.iter().map(|id| Value::from(*id)));
        self.exec(sql, params).await
    }

    async fn exec(&self, sql: String, params: Vec<Value>) -> Result<u64, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(sql, Params::Positional(params)).await?;
        Ok(conn.affected_rows())
    }
}

/// The parameters naming `rows` in a [`keyed`] table: id and event_id of each, in
/// order, [`padded`].
pub(super) fn key_params(rows: &[RowKey<'_>]) -> Vec<Value> {
    padded(rows).flat_map(|r| [Value::from(r.id), Value::from(r.event_id)]).collect()
}
