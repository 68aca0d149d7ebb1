//! Where the relay of one outbox table stands, read from the primary alone, for
//! `outbox-relay status`: who holds the leader lease, the mirrored checkpoint, rows
//! per status, the oldest unsent row's age and the keys held behind FAILED rows.
//! Every time is the database's own clock.

use mysql_async::prelude::Queryable;
use mysql_async::Pool;
use serde::Serialize;

use outbox_kit::OutboxTable;

pub use crate::checkpoint::PositionReport;
use crate::store::{LeaseHolder, LeaseStore, StatusStore, FAILED};

/// The leader as the lease table shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaderReport {
    pub holder: String,
    pub term: u64,
    /// Milliseconds the lease still runs; negative: it ran out (no leader now).
    pub lease_remaining_ms: i64,
}

impl LeaderReport {
    /// The report of the lease row `lease`; `None` when no instance has held it yet.
    pub fn of(lease: LeaseHolder) -> Option<Self> {
        (!lease.holder.is_empty()).then(|| Self {
            holder: lease.holder,
            term: lease.term,
            lease_remaining_ms: lease.remaining_ms,
        })
    }
}

/// Everything `status` shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusReport {
    pub table: String,
    pub leader: Option<LeaderReport>,
    pub position: Option<PositionReport>,
    /// Rows per status name (PENDING, SENDING, SENT, FAILED, SKIPPED).
    pub rows: Vec<(String, u64)>,
    /// Rows waiting to be sent (PENDING, and SENDING past its lease).
    pub waiting: u64,
    pub oldest_waiting_seconds: f64,
    /// Business keys with a FAILED event (held under `failed_key_policy = "hold"`).
    pub failed_keys: u64,
}

/// Reads the report of `outbox`, whose fleet's lease is `lease`.
pub async fn status_report(
    pool: &Pool,
    outbox: &OutboxTable,
    lease: &LeaseStore,
) -> Result<StatusReport, mysql_async::Error> {
    let table = outbox.qualified();
    let leader = lease.holder().await?.and_then(LeaderReport::of);
    let mut conn = pool.get_conn().await?;
    let position: Option<(String, u64, Option<String>, Option<String>, u64, String)> = conn
        .exec_first(
            format!(
                "SELECT binlog_file, binlog_pos, gtid, server_uuid, term, CAST(updated_at AS CHAR) \
                 FROM `{}`.`outbox_relay_checkpoint` WHERE source_id = ?",
                outbox.schema
            ),
            (format!("{}.{}", outbox.schema, outbox.table),),
        )
        .await?;
    let failed_keys: Option<u64> =
        conn.query_first(format!("SELECT COUNT(DISTINCT topic, biz_key) FROM {table} WHERE status = {FAILED}")).await?;
    let status = StatusStore::new(pool.clone(), outbox.clone(), lease.unheld());
    let counts = status.row_counts(true).await?;
    let backlog = status.backlog().await?;
    Ok(StatusReport {
        table,
        leader,
        position: position.map(|(file, pos, gtid, server, term, updated_at)| PositionReport {
            file,
            pos,
            gtid,
            server,
            term,
            updated_at,
        }),
        rows: counts.into_iter().filter(|(_, n)| *n > 0).map(|(status, n)| (status.name().to_owned(), n)).collect(),
        waiting: backlog.waiting,
        oldest_waiting_seconds: backlog.oldest_waiting_secs,
        failed_keys: failed_keys.unwrap_or_default(),
    })
}
