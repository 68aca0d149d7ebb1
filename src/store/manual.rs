//! What an operator does to the outbox table by hand: list FAILED rows, requeue or
//! skip them, and delete SENT rows past their retention. Every change writes its
//! `outbox_relay_audit` row (who, why, when, what before, what after, result) in the
//! same transaction as the change itself, so there is no change without its record.
//! Each action only touches rows in the state it expects (requeue and skip only
//! FAILED rows, cleanup only SENT ones), which makes a repeated call a no-op.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Pool, TxOpts, Value};
use serde::Serialize;

use outbox_kit::{truncate_utf8, OutboxTable, RowStatus};

use super::{FAILED, PENDING, SENT};

/// Who makes a change, and why (both go into the audit row).
#[derive(Debug, Clone)]
pub struct Operator {
    pub name: String,
    pub reason: String,
}

/// A FAILED row as `failed list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedRow {
    pub id: u64,
    pub event_id: String,
    pub biz_key: String,
    pub topic: String,
    pub retry_count: i64,
    pub last_error: String,
    pub created_at: String,
}

/// Which FAILED rows to list.
#[derive(Debug, Clone, Default)]
pub struct FailedFilter {
    pub limit: usize,
    pub topic: Option<String>,
    pub biz_key: Option<String>,
}

/// Which FAILED rows a requeue or skip is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Ids(Vec<u64>),
    AllFailed,
}

/// What a manual action changed (or, with `dry_run`, would change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub action: &'static str,
    pub ids: Vec<u64>,
    pub dry_run: bool,
}

/// What a cleanup run deleted (or, with `dry_run`, would delete).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cleanup {
    pub deleted: u64,
    pub batches: u64,
    pub dry_run: bool,
}

/// The manual actions on one outbox table.
pub struct Manual {
    pool: Pool,
    outbox: OutboxTable,
}

impl Manual {
    pub fn new(pool: Pool, outbox: OutboxTable) -> Self {
        Self { pool, outbox }
    }

    /// FAILED rows, oldest first.
    pub async fn failed(&self, filter: &FailedFilter) -> Result<Vec<FailedRow>, mysql_async::Error> {
        let mut sql = format!(
            "SELECT id, event_id, biz_key, topic, retry_count, COALESCE(last_error, ''), CAST(created_at AS CHAR) \
             FROM {} WHERE status = {FAILED}",
            self.outbox.qualified()
        );
        let mut params: Vec<Value> = Vec::new();
        for (column, value) in [("topic", &filter.topic), ("biz_key", &filter.biz_key)] {
            if let Some(value) = value {
                sql.push_str(&format!(" AND {column} = ?"));
                params.push(Value::from(value.as_str()));
            }
        }
        sql.push_str(&format!(" ORDER BY id LIMIT {}", filter.limit.max(1)));
        let rows: Vec<(u64, String, String, String, i64, String, String)> =
            self.pool.get_conn().await?.exec(sql, Params::Positional(params)).await?;
        Ok(rows
            .into_iter()
            .map(|(id, event_id, biz_key, topic, retry_count, last_error, created_at)| FailedRow {
                id,
                event_id,
                biz_key,
                topic,
                retry_count,
                last_error,
                created_at,
            })
            .collect())
    }

    /// FAILED rows back to PENDING, due now with their retries reset: the relay sends
    /// them again (the sweep picks them up) and releases their keys once delivered.
    pub async fn requeue(&self, target: &Target, by: &Operator, dry_run: bool) -> Result<Change, mysql_async::Error> {
        let set = format!("status = {PENDING}, retry_count = 0, next_retry_at = NOW(3), last_error = NULL");
        self.change_failed("requeue", target, &set, RowStatus::Pending, by, dry_run).await
    }

    /// FAILED rows to SKIPPED: never sent; the events of their keys waiting behind
    /// them go on.
    pub async fn skip(&self, target: &Target, by: &Operator, dry_run: bool) -> Result<Change, mysql_async::Error> {
        let set = format!("status = {}", RowStatus::Skipped.code());
        self.change_failed("skip", target, &set, RowStatus::Skipped, by, dry_run).await
    }

    /// Applies `set` to the FAILED rows of `target` with one audit row each, in one
    /// transaction; rows no longer FAILED are left alone.
    async fn change_failed(
        &self,
        action: &'static str,
        target: &Target,
        set: &str,
        to: RowStatus,
        by: &Operator,
        dry_run: bool,
    ) -> Result<Change, mysql_async::Error> {
        let table = self.outbox.qualified();
        let (which, params) = match target {
            Target::AllFailed => (String::new(), Vec::new()),
            Target::Ids(ids) if ids.is_empty() => return Ok(Change { action, ids: Vec::new(), dry_run }),
            Target::Ids(ids) => (
                format!(" AND id IN ({})", vec!["?"; ids.len()].join(",")),
                ids.iter().map(|id| Value::from(*id)).collect(),
            ),
        };
        let mut conn = self.pool.get_conn().await?;
        let mut tx = conn.start_transaction(TxOpts::default()).await?;
        let rows: Vec<(u64, String)> = tx
            .exec(
                format!("SELECT id, event_id FROM {table} WHERE status = {FAILED}{which} ORDER BY id FOR UPDATE"),
                Params::Positional(params),
            )
            .await?;
        let ids: Vec<u64> = rows.iter().map(|(id, _)| *id).collect();
        if dry_run || ids.is_empty() {
            tx.rollback().await?;
            return Ok(Change { action, ids, dry_run });
        }
        let placeholders = vec!["?"; ids.len()].join(",");
        tx.exec_drop(
            format!("UPDATE {table} SET {set} WHERE status = {FAILED} AND id IN ({placeholders})"),
            Params::Positional(ids.iter().map(|id| Value::from(*id)).collect()),
        )
        .await?;
        for (id, event_id) in &rows {
            let what = AuditEntry {
                action,
                target: format!("{table} id={id} event_id={event_id}"),
                old_state: RowStatus::Failed.name().to_owned(),
                new_state: to.name().to_owned(),
                result: "changed".to_owned(),
            };
            audit(&mut tx, &self.outbox, by, &what).await?;
        }
        tx.commit().await?;
        Ok(Change { action, ids, dry_run })
    }

    /// Deletes SENT rows delivered more than `retention` ago (by `sent_at`, or
    /// `created_at` for rows without one), by primary key in batches of `batch`,
    /// pausing `pace` between batches; never a row in any other status. `progress`
    /// hears the running total after each batch. One audit row records the run.
    pub async fn cleanup(
        &self,
        retention: Duration,
        batch: usize,
        pace: Duration,
        by: &Operator,
        dry_run: bool,
        mut progress: impl FnMut(u64),
    ) -> Result<Cleanup, mysql_async::Error> {
        let table = self.outbox.qualified();
        let old_enough = format!(
            "status = {SENT} AND COALESCE(sent_at, created_at) < NOW(3) - INTERVAL {} SECOND",
            retention.as_secs()
        );
        let mut conn = self.pool.get_conn().await?;
        if dry_run {
            let count: Option<u64> =
                conn.query_first(format!("SELECT COUNT(*) FROM {table} WHERE {old_enough}")).await?;
            return Ok(Cleanup { deleted: count.unwrap_or_default(), batches: 0, dry_run });
        }
        let (mut deleted, mut batches) = (0u64, 0u64);
        loop {
            let ids: Vec<u64> = conn
                .query(format!("SELECT id FROM {table} WHERE {old_enough} ORDER BY id LIMIT {}", batch.max(1)))
                .await?;
            if ids.is_empty() {
                break;
            }
            let placeholders = vec!["?"; ids.len()].join(",");
            conn.exec_drop(
                format!("DELETE FROM {table} WHERE {old_enough} AND id IN ({placeholders})"),
                Params::Positional(ids.iter().map(|id| Value::from(*id)).collect()),
            )
            .await?;
            deleted += conn.affected_rows();
            batches += 1;
            progress(deleted);
            tokio::time::sleep(pace).await;
        }
        let what = AuditEntry {
            action: "cleanup",
            target: format!("{table} SENT rows older than {}s", retention.as_secs()),
            old_state: RowStatus::Sent.name().to_owned(),
            new_state: "deleted".to_owned(),
            result: format!("deleted {deleted} rows in {batches} batches"),
        };
        audit(&mut conn, &self.outbox, by, &what).await?;
        Ok(Cleanup { deleted, batches, dry_run })
    }
}

/// One audit row's content besides who, why and when.
struct AuditEntry {
    action: &'static str,
    target: String,
    old_state: String,
    new_state: String,
    result: String,
}

/// Writes the audit row of `what` done by `by` on `conn` (inside the caller's transaction).
async fn audit(
    conn: &mut impl Queryable,
    outbox: &OutboxTable,
    by: &Operator,
    what: &AuditEntry,
) -> Result<(), mysql_async::Error> {
    conn.exec_drop(
        format!(
            "INSERT INTO `{}`.`outbox_relay_audit` (operator, reason, action, target, old_state, new_state, result) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
            outbox.schema
        ),
        (
            truncate_utf8(&by.name, 128),
            truncate_utf8(&by.reason, 1024),
            what.action,
            truncate_utf8(&what.target, 255),
            &what.old_state,
            &what.new_state,
            truncate_utf8(&what.result, 1024),
        ),
    )
    .await
}
