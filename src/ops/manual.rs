//! What an operator does to the outbox table by hand: list FAILED rows, requeue or
//! skip them, send SENT rows of a window once more, and delete SENT rows past their
//! retention. Every change writes its
//! `outbox_relay_audit` rows (who, why, when, what before, what after, result) in the
//! same transaction as the change itself, so there is no change without its record.
//! Each action only touches rows in the state it expects (requeue and skip only
//! FAILED rows, cleanup only SENT ones), which makes a repeated call a no-op.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{IsolationLevel, Params, Pool, TxOpts, Value};
use serde::Serialize;

use outbox_kit::{truncate_utf8, OutboxTable, RowStatus};

use super::reconcile::{local_bounds, Window};
use crate::store::{placeholders, TermFence, FAILED, PENDING, SENT};

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
    /// The status the action takes rows from (FAILED, SENT).
    pub from: RowStatus,
    pub ids: Vec<u64>,
    /// Ids that were not in that status (missing, or changed by someone else first).
    pub left_alone: Vec<u64>,
    pub dry_run: bool,
}

/// Which SENT rows `resend` sends once more: created in `window`, of `topic` and
/// `biz_key` when given.
#[derive(Debug, Clone)]
pub struct SentFilter {
    pub window: Window,
    pub topic: Option<String>,
    pub biz_key: Option<String>,
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
    /// The leader term its deletes hold under (the scheduled cleanup); `None` for an
    /// operator's command, which runs beside any leader.
    fence: Option<TermFence>,
}

impl Manual {
    pub fn new(pool: Pool, outbox: OutboxTable) -> Self {
        Self { pool, outbox, fence: None }
    }

    /// The actions of the leader of `fence`'s term: its deletes change nothing once
    /// the term has ended, like every other write of the leader.
    pub fn fenced(pool: Pool, outbox: OutboxTable, fence: TermFence) -> Self {
        Self { pool, outbox, fence: Some(fence) }
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

    /// SENT rows back to PENDING, due now, their msg_id and sent_at cleared: the sweep
    /// publishes them once more, under the same event_id (consumers deduplicate it).
    pub async fn resend(&self, rows: &SentFilter, by: &Operator, dry_run: bool) -> Result<Change, mysql_async::Error> {
        let found = self.sent_among(rows).await?;
        let set = format!(
            "status = {PENDING}, retry_count = 0, next_retry_at = NOW(3), last_error = NULL, msg_id = NULL, sent_at = NULL"
        );
        let action = Action { name: "resend", from: RowStatus::Sent, to: RowStatus::Pending, set: &set };
        self.change_found(&action, found, Vec::new(), by, dry_run).await
    }

    /// Applies `set` to the FAILED rows of `target` (see [`Manual::change_found`]);
    /// ids given that are not FAILED are reported as left alone.
    async fn change_failed(
        &self,
        name: &'static str,
        target: &Target,
        set: &str,
        to: RowStatus,
        by: &Operator,
        dry_run: bool,
    ) -> Result<Change, mysql_async::Error> {
        let found = self.failed_among(target).await?;
        let left_alone = match target {
            Target::Ids(ids) => ids.iter().copied().filter(|id| !found.contains(id)).collect(),
            Target::AllFailed => Vec::new(),
        };
        let action = Action { name, from: RowStatus::Failed, to, set };
        self.change_found(&action, found, left_alone, by, dry_run).await
    }

    /// Applies the action to the rows `found`, in transactions of at most [`CHUNK`]
    /// rows, each with one audit row per row (its state before); rows no longer in the
    /// action's status are left alone and reported as such. READ COMMITTED, so only
    /// the rows changed are locked, never the gaps the relay's own write-backs need.
    async fn change_found(
        &self,
        action: &Action<'_>,
        found: Vec<u64>,
        mut left_alone: Vec<u64>,
        by: &Operator,
        dry_run: bool,
    ) -> Result<Change, mysql_async::Error> {
        let change = |ids, left_alone| Change { action: action.name, from: action.from, ids, left_alone, dry_run };
        if dry_run {
            return Ok(change(found, left_alone));
        }
        let mut changed = Vec::with_capacity(found.len());
        for chunk in found.chunks(CHUNK) {
            changed.extend(self.change_chunk(action, chunk, by).await?);
        }
        left_alone.extend(found.iter().copied().filter(|id| !changed.contains(id)));
        Ok(change(changed, left_alone))
    }

    /// The ids of SENT rows `rows` names (a plain read: nothing is locked). The window
    /// is UTC; `created_at` holds the session's local time, so the bounds are converted.
    async fn sent_among(&self, rows: &SentFilter) -> Result<Vec<u64>, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let (since, until) = local_bounds(&mut conn, &rows.window).await?;
        let mut sql = format!(
            "SELECT id FROM {} WHERE status = {SENT} AND created_at >= ? AND created_at < ?",
            self.outbox.qualified()
        );
        let mut params = vec![Value::from(since), Value::from(until)];
        for (column, value) in [("topic", &rows.topic), ("biz_key", &rows.biz_key)] {
            if let Some(value) = value {
                sql.push_str(&format!(" AND {column} = ?"));
                params.push(Value::from(value.as_str()));
            }
        }
        sql.push_str(" ORDER BY id");
        conn.exec(sql, Params::Positional(params)).await
    }

    /// The ids of `target` that are FAILED now (a plain read: nothing is locked).
    async fn failed_among(&self, target: &Target) -> Result<Vec<u64>, mysql_async::Error> {
        let table = self.outbox.qualified();
        let mut conn = self.pool.get_conn().await?;
        match target {
            Target::AllFailed => {
                conn.query(format!("SELECT id FROM {table} WHERE status = {FAILED} ORDER BY id")).await
            }
            Target::Ids(ids) => {
                let mut found = Vec::new();
                for chunk in ids.chunks(CHUNK) {
                    let sql = format!(
                        "SELECT id FROM {table} WHERE status = {FAILED} AND id IN ({}) ORDER BY id",
                        placeholders(chunk.len())
                    );
                    found.extend(conn.exec::<u64, _, _>(sql, id_params(chunk)).await?);
                }
                Ok(found)
            }
        }
    }

    /// One transaction: lock those of `ids` still in the action's status, change them,
    /// audit each.
    async fn change_chunk(
        &self,
        action: &Action<'_>,
        ids: &[u64],
        by: &Operator,
    ) -> Result<Vec<u64>, mysql_async::Error> {
        let table = self.outbox.qualified();
        let from = action.from.code();
        let mut conn = self.pool.get_conn().await?;
        let mut options = TxOpts::default();
        options.with_isolation_level(IsolationLevel::ReadCommitted);
        let mut tx = conn.start_transaction(options).await?;
        let rows: Vec<RowBefore> = tx
            .exec(
                format!(
                    "SELECT id, event_id, retry_count, last_error, msg_id FROM {table} WHERE status = {from} AND id IN ({}) \
                     ORDER BY id FOR UPDATE",
                    placeholders(ids.len())
                ),
                id_params(ids),
            )
            .await?;
        let locked: Vec<u64> = rows.iter().map(|r| r.0).collect();
        if !locked.is_empty() {
            tx.exec_drop(
                format!(
                    "UPDATE {table} SET {} WHERE status = {from} AND id IN ({})",
                    action.set,
                    placeholders(locked.len())
                ),
                id_params(&locked),
            )
            .await?;
        }
        for row in &rows {
            audit(&mut tx, &self.outbox, by, &action.audit_entry(&table, row)).await?;
        }
        tx.commit().await?;
        Ok(locked)
    }

    /// Deletes SENT rows delivered more than `retention` ago (by `sent_at`, or
    /// `created_at` for rows without one), by primary key in batches of `batch`,
    /// pausing `pace` between batches; never a row in any other status. Each batch is
    /// one transaction with its audit row, so a run cut short leaves a record of what
    /// it deleted. `progress` hears the running total after each batch.
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
                .query(format!("SELECT id FROM {table} WHERE {old_enough} ORDER BY id LIMIT {}", batch.clamp(1, CHUNK)))
                .await?;
            let (Some(first), Some(last)) = (ids.first(), ids.last()) else { break };
            let mut tx = conn.start_transaction(TxOpts::default()).await?;
            let fence = self.fence.as_ref().map(TermFence::join).unwrap_or_default();
            tx.exec_drop(
                format!("DELETE o FROM {table} o {fence} WHERE {old_enough} AND o.id IN ({})", placeholders(ids.len())),
                id_params(&ids),
            )
            .await?;
            let rows = tx.affected_rows();
            if rows == 0 {
                // The leader's term ended, or someone else deleted them first: stop here.
                tx.rollback().await?;
                break;
            }
            let what = AuditEntry {
                action: "cleanup",
                target: format!("{table} ids {first}..={last}, SENT older than {}s", retention.as_secs()),
                old_state: RowStatus::Sent.name().to_owned(),
                new_state: "deleted".to_owned(),
                result: format!("deleted {rows} rows"),
            };
            audit(&mut tx, &self.outbox, by, &what).await?;
            tx.commit().await?;
            deleted += rows;
            batches += 1;
            progress(deleted);
            tokio::time::sleep(pace).await;
        }
        Ok(Cleanup { deleted, batches, dry_run })
    }
}

/// A row as a manual change found it: id, event_id, retry_count, last_error, msg_id.
type RowBefore = (u64, String, i64, Option<String>, Option<String>);

/// One kind of manual change: rows in status `from` get `set`, which puts them in `to`.
struct Action<'a> {
    name: &'static str,
    from: RowStatus,
    to: RowStatus,
    set: &'a str,
}

impl Action<'_> {
    /// The audit row of `row`: a FAILED row's retries and error, a SENT row's msg_id.
    fn audit_entry(&self, table: &str, row: &RowBefore) -> AuditEntry {
        let (id, event_id, retry_count, last_error, msg_id) = row;
        let old_state = match self.from {
            RowStatus::Sent => format!("{} msg_id={}", self.from.name(), msg_id.as_deref().unwrap_or("")),
            _ => format!(
                "{} retry_count={retry_count} last_error={}",
                self.from.name(),
                last_error.as_deref().unwrap_or("")
            ),
        };
        AuditEntry {
            action: self.name,
            target: format!("{table} id={id} event_id={event_id}"),
            old_state,
            new_state: self.to.name().to_owned(),
            result: format!("{}: done", self.name),
        }
    }
}

/// Most rows one statement names (well below the server's 65,535 placeholders).
const CHUNK: usize = 1_000;

fn id_params(ids: &[u64]) -> Params {
    Params::Positional(ids.iter().map(|id| Value::from(*id)).collect())
}

/// One audit row's content besides who, why and when.
pub(crate) struct AuditEntry {
    pub(crate) action: &'static str,
    pub(crate) target: String,
    pub(crate) old_state: String,
    pub(crate) new_state: String,
    pub(crate) result: String,
}

/// Writes the audit row of `what` done by `by` on `conn` (inside the caller's transaction).
pub(crate) async fn audit(
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
            truncate_utf8(&what.old_state, 255),
            truncate_utf8(&what.new_state, 255),
            truncate_utf8(&what.result, 1024),
        ),
    )
    .await
}
