//! Retention by partition: every tick the leader gives the next periods a partition
//! of their own (split off `pfuture`), and, when `[cleanup]` is scheduled, drops each
//! partition whose period ended `cleanup.retention_secs` ago or longer.
//!
//! A partition that still holds a row to be delivered (PENDING, SENDING) or waiting
//! for an operator (FAILED) is never dropped: it is kept, counted in
//! `relay_outbox_partitions_held`, and named once per term in a warning with its
//! first such row, until an operator requeues or skips the row. SENT and SKIPPED rows
//! go with their partition. The check and the drop run under one LOCK TABLES (the
//! outbox, the lease and the audit table) after the lease's term is checked in it:
//! no row can change, and no other leader act, in between. The audit row follows the
//! drop (a DDL statement commits by itself); a failed audit write fails the tick and
//! is logged.

use std::collections::HashSet;
use std::time::Duration;

use chrono::NaiveDateTime;
use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::Retention;
use crate::config::PartitionPeriod;
use crate::ops::manual::{audit, AuditEntry, Operator};
use crate::store::partitions::{self, Layout, LiveRow, Partition, PERIODS_AHEAD};

/// The longest wait for the table lock a drop takes.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// What became of an expired partition.
enum Retired {
    Dropped,
    Held(LiveRow),
    /// The term ended: another instance leads now.
    NotLeader,
}

/// The partition upkeep of one term.
pub(super) struct Upkeep {
    by: Operator,
    /// Held partitions already named in a warning this term.
    warned: HashSet<String>,
}

impl Upkeep {
    pub(super) fn new(by: Operator) -> Self {
        Self { by, warned: HashSet::new() }
    }

    /// Four ticks per period, and at least as often as the retention's own pace.
    pub(super) fn every(job: &Retention, period: PartitionPeriod) -> Duration {
        let quarter = period.length().to_std().map_or(Duration::MAX, |length| length / 4);
        job.cleanup_every().min(quarter)
    }

    /// Adds the partitions ahead and, with a retention scheduled, retires the expired
    /// ones. A failure is logged; the next tick tries again.
    pub(super) async fn tick(&mut self, job: &Retention, layout: &Layout) {
        if let Err(error) = self.maintain(job, layout).await {
            tracing::warn!(%error, "outbox partition upkeep failed; the next tick tries again; fix: the primary user needs ALTER, DROP and LOCK TABLES on the outbox table's schema (`outbox-relay check` lists its grants)");
        }
    }

    async fn maintain(&mut self, job: &Retention, layout: &Layout) -> Result<(), mysql_async::Error> {
        let mut conn = job.primary.get_conn().await?;
        let now = partitions::db_now(&mut conn).await?;
        add_ahead(job, &mut conn, layout, now).await?;
        if job.cleanup.interval_ms > 0 {
            self.retire(job, &mut conn, layout, now).await?;
        }
        Ok(())
    }

    async fn retire(
        &mut self,
        job: &Retention,
        conn: &mut Conn,
        layout: &Layout,
        now: NaiveDateTime,
    ) -> Result<(), mysql_async::Error> {
        let retention = chrono::Duration::try_seconds(i64::try_from(job.cleanup.retention_secs).unwrap_or(i64::MAX))
            .unwrap_or(chrono::Duration::MAX);
        let mut held = 0;
        for partition in layout.expired(now, retention) {
            match self.drop_expired(job, conn, partition).await? {
                Retired::Dropped => {
                    job.metrics.partitions_dropped.inc();
                    tracing::info!(partition = %partition.name, created_before = %partition.until, rows_estimated = partition.rows, "expired outbox partition dropped");
                }
                Retired::Held(row) => {
                    held += 1;
                    self.warn_held(partition, &row);
                }
                Retired::NotLeader => return Ok(()),
            }
        }
        job.metrics.partitions_held.set(f64::from(held));
        Ok(())
    }

    fn warn_held(&mut self, partition: &Partition, row: &LiveRow) {
        if !self.warned.insert(partition.name.clone()) {
            return;
        }
        let status = row.status.name();
        tracing::warn!(partition = %partition.name, row_id = row.id, status, "expired outbox partition kept: row {} is {status}; fix: let it be delivered, or requeue or skip it (`outbox-relay failed list`); the partition is dropped once no such row is left", row.id);
    }

    /// Checks and drops `partition` under one table lock. A partition seen holding a
    /// live row is not locked at all; the lock waits at most [`LOCK_WAIT`] for
    /// transactions open on the tables (writes to the outbox wait behind it meanwhile).
    async fn drop_expired(
        &self,
        job: &Retention,
        conn: &mut Conn,
        partition: &Partition,
    ) -> Result<Retired, mysql_async::Error> {
        if let Some(row) = partitions::live_row(conn, &job.outbox, &partition.name).await? {
            return Ok(Retired::Held(row));
        }
        conn.query_drop(format!("SET SESSION lock_wait_timeout = {}", LOCK_WAIT.as_secs())).await?;
        let locked = conn
            .query_drop(format!(
                "LOCK TABLES {} WRITE, {} READ, `{}`.`outbox_relay_audit` WRITE",
                job.outbox.qualified(),
                job.fence.table(),
                job.outbox.schema
            ))
            .await;
        let retired = match locked {
            Ok(()) => self.drop_locked(job, conn, partition).await,
            Err(error) => Err(error),
        };
        let unlocked = conn.query_drop("UNLOCK TABLES").await;
        let reset = conn.query_drop("SET SESSION lock_wait_timeout = DEFAULT").await;
        let retired = retired?;
        unlocked?;
        reset?;
        Ok(retired)
    }

    async fn drop_locked(
        &self,
        job: &Retention,
        conn: &mut Conn,
        partition: &Partition,
    ) -> Result<Retired, mysql_async::Error> {
        let current: Option<u64> = conn.query_first(job.fence.current_sql()).await?;
        if current != Some(1) {
            return Ok(Retired::NotLeader);
        }
        if let Some(row) = partitions::live_row(conn, &job.outbox, &partition.name).await? {
            return Ok(Retired::Held(row));
        }
        partitions::drop_partition(conn, &job.outbox, &partition.name).await?;
        let what = AuditEntry {
            action: "drop partition",
            target: format!(
                "{} partition {} (created before {})",
                job.outbox.qualified(),
                partition.name,
                partition.until
            ),
            old_state: "SENT or SKIPPED rows only".to_owned(),
            new_state: "dropped".to_owned(),
            result: format!("dropped about {} rows (the server's estimate)", partition.rows),
        };
        audit(conn, &job.outbox, &self.by, &what).await?;
        Ok(Retired::Dropped)
    }
}

/// Gives the next periods a partition of their own, and says how far ahead they reach.
async fn add_ahead(
    job: &Retention,
    conn: &mut Conn,
    layout: &Layout,
    now: NaiveDateTime,
) -> Result<(), mysql_async::Error> {
    let missing = layout.missing(now, PERIODS_AHEAD);
    let mut ahead = layout.periods_ahead(now);
    if let (Some(first), Some(last)) = (missing.first(), missing.last()) {
        partitions::add(conn, &job.outbox, layout.period, &missing).await?;
        ahead = i64::from(PERIODS_AHEAD);
        tracing::info!(added = missing.len(), from = %first, through = %last, period = %layout.period, "outbox partitions added ahead");
    }
    job.metrics.partitions_ahead.set(ahead as f64);
    Ok(())
}
