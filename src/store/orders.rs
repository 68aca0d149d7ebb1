//! Operators' orders to the leader, kept in its lease row: pause (publish nothing
//! until resumed, whoever leads) and hand over (the leader of a term gives the lease
//! to a standby). In the lease row because they are fleet-wide and must outlive any
//! one instance: a standby that takes over a paused fleet stays paused.

use mysql_async::prelude::Queryable;
use serde::Serialize;

use super::lease::LeaseStore;

/// Who paused the fleet, since when (UTC, the database's clock).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Paused {
    pub by: String,
    pub since: String,
}

/// What the leader of a term is ordered to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Orders {
    /// Publish nothing until resumed.
    pub paused: Option<Paused>,
    /// Give the lease to a standby.
    pub handover: bool,
}

impl LeaseStore {
    /// The orders for the leader of `term`; `None` once `term` is not the current one.
    pub(crate) async fn orders(&self, term: u64) -> Result<Option<Orders>, mysql_async::Error> {
        let row: Option<(Option<String>, Option<String>, bool)> = self
            .pool()
            .get_conn()
            .await?
            .exec_first(
                format!(
                    "SELECT paused_by, DATE_FORMAT(paused_at, '%Y-%m-%d %H:%i:%s'), COALESCE(handover_term = term, FALSE) \
                     FROM {} WHERE name = ? AND term = ?",
                    self.table()
                ),
                (self.name(), term),
            )
            .await?;
        Ok(row.map(|(by, since, handover)| Orders {
            paused: by.map(|by| Paused { by, since: since.unwrap_or_default() }),
            handover,
        }))
    }

    /// The fleet's pause, read on `conn` with the lease row locked until the caller's
    /// transaction ends (no row yet: not paused).
    pub(crate) async fn paused_for_update(
        &self,
        conn: &mut impl Queryable,
    ) -> Result<Option<Paused>, mysql_async::Error> {
        let row: Option<(Option<String>, Option<String>)> = conn
            .exec_first(
                format!(
                    "SELECT paused_by, DATE_FORMAT(paused_at, '%Y-%m-%d %H:%i:%s') FROM {} WHERE name = ? FOR UPDATE",
                    self.table()
                ),
                (self.name(),),
            )
            .await?;
        Ok(row.and_then(|(by, since)| by.map(|by| Paused { by, since: since.unwrap_or_default() })))
    }

    /// Pauses the fleet for `by`, or resumes it with `None`, on `conn` inside the
    /// caller's transaction. A fleet that never had a leader gets its row now, so a
    /// pause ordered before the first start holds.
    pub(crate) async fn set_paused(
        &self,
        conn: &mut impl Queryable,
        by: Option<&str>,
    ) -> Result<(), mysql_async::Error> {
        self.ensure_row(conn).await?;
        conn.exec_drop(
            format!(
                "UPDATE {} SET paused_by = ?, paused_at = IF(? IS NULL, NULL, UTC_TIMESTAMP(3)) WHERE name = ?",
                self.table()
            ),
            (by, by, self.name()),
        )
        .await
    }

    /// Orders the leader of `term` to hand its lease over, on `conn` inside the
    /// caller's transaction (which holds the lease row locked and checked `term`). An
    /// order given twice is the same order.
    pub(crate) async fn order_handover(&self, conn: &mut impl Queryable, term: u64) -> Result<(), mysql_async::Error> {
        conn.exec_drop(
            format!("UPDATE {} SET handover_term = term WHERE name = ? AND term = ?", self.table()),
            (self.name(), term),
        )
        .await
    }
}
