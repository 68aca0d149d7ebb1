//! The leader lease in `outbox_relay_lease` on the primary, and the fence that makes
//! every write of the relay conditional on its term.
//!
//! One row per fleet: `(name, holder, term, lease_until)`. Taking the lease is one
//! conditional UPDATE that succeeds only when the lease has run out, and that
//! increments `term`; renewing succeeds only while the same term still holds an
//! unexpired lease. Only the database's clock (`NOW(3)`) decides expiry, so clocks of
//! the relay hosts never matter.
//!
//! A [`TermFence`] joins the lease row into a write: the write changes rows only while
//! its term is still the current one. A leader that was paused or cut off and
//! resumes after another took over therefore writes nothing, whatever it still
//! believes about itself.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Pool;

use super::ReadFor;

/// How long the leader that handed its lease over (an operator's order) leaves it to
/// the standbys; after that it may take it back (a fleet without a standby resumes by
/// itself).
pub const HANDOVER_GRACE: Duration = Duration::from_secs(10);

/// Name of the lease table (in the outbox table's schema).
const LEASE_TABLE: &str = "outbox_relay_lease";

/// A lease term: the fencing token of one leadership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermFence {
    /// `` `schema`.`outbox_relay_lease` ``.
    table: String,
    /// The lease name; checked by the configuration to be a safe SQL literal.
    name: String,
    term: u64,
}

impl TermFence {
    /// The term this fence holds writes to.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// An inner join that keeps a statement's rows only while `term` is current:
    /// `JOIN lease f ON f.name = '...' AND f.term = N`.
    pub(crate) fn join(&self) -> String {
        format!(
            "JOIN {} relay_fence ON relay_fence.name = '{}' AND relay_fence.term = {}",
            self.table, self.name, self.term
        )
    }

    /// The lease table, for a LOCK TABLES that must cover it.
    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// A `SELECT` of 1 while `term` is current, of 0 after it ended.
    pub(crate) fn current_sql(&self) -> String {
        format!("SELECT COUNT(*) FROM {} WHERE name = '{}' AND term = {}", self.table, self.name, self.term)
    }

    /// A `FROM ... WHERE` that yields one row only while `term` is current, for
    /// `INSERT ... SELECT`. It reads the lease row with a shared lock whatever the
    /// session's isolation level (READ COMMITTED alone would read it unlocked): a
    /// transaction that ends the term holds the row, so the write waits for it and
    /// then finds the term gone.
    pub(crate) fn select_from(&self) -> String {
        format!("FROM {} WHERE name = '{}' AND term = {} LOCK IN SHARE MODE", self.table, self.name, self.term)
    }
}

/// Who holds a lease now, as the table says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    pub holder: String,
    pub term: u64,
    /// Milliseconds the lease still runs (negative: expired that long ago).
    pub remaining_ms: i64,
}

/// The lease row of one fleet.
#[derive(Clone)]
pub struct LeaseStore {
    pool: Pool,
    table: String,
    name: String,
}

impl LeaseStore {
    pub fn new(pool: Pool, schema: &str, name: &str) -> Self {
        Self { pool, table: format!("`{schema}`.`{LEASE_TABLE}`"), name: name.to_owned() }
    }

    /// The fence of `term`.
    pub fn fence(&self, term: u64) -> TermFence {
        TermFence { table: self.table.clone(), name: self.name.clone(), term }
    }

    /// A fence no lease row ever has (terms count from 0 up, in a signed column), for
    /// stores made before a term is won: their writes change nothing.
    pub fn unheld(&self) -> TermFence {
        self.fence(u64::MAX)
    }

    /// Takes the lease for `holder` if it has run out (or never existed); the new term.
    /// A plain read comes first, so standbys trying while the lease is held take no
    /// lock on the row the leader renews and fences its writes with.
    pub async fn acquire(&self, holder: &str, lease: Duration) -> Result<Option<u64>, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let expired: Option<bool> = conn
            .exec_first(format!("SELECT lease_until < NOW(3) FROM {} WHERE name = ?", self.table), (&self.name,))
            .await?;
        match expired {
            Some(false) => return Ok(None),
            Some(true) => {}
            None => self.ensure_row(&mut conn).await?,
        }
        // The instance that just handed the lease over leaves it to the others a while.
        conn.exec_drop(
            format!(
                "UPDATE {} SET holder = ?, term = LAST_INSERT_ID(term + 1), lease_until = NOW(3) + INTERVAL ? MICROSECOND \
                 WHERE name = ? AND lease_until < NOW(3) \
                 AND (handover_term IS NULL OR handover_term <> term OR holder <> ? \
                      OR lease_until < NOW(3) - INTERVAL ? MICROSECOND)",
                self.table
            ),
            (holder, crate::time::micros(lease), &self.name, holder, crate::time::micros(HANDOVER_GRACE)),
        )
        .await?;
        Ok((conn.affected_rows() == 1).then(|| conn.last_insert_id()).flatten())
    }

    /// Creates the fleet's lease row, run out, if it has none.
    pub(crate) async fn ensure_row(&self, conn: &mut impl Queryable) -> Result<(), mysql_async::Error> {
        conn.exec_drop(
            format!(
                "INSERT IGNORE INTO {} (name, holder, term, lease_until) VALUES (?, '', 0, '1970-01-02')",
                self.table
            ),
            (&self.name,),
        )
        .await
    }

    pub(super) fn pool(&self) -> &Pool {
        &self.pool
    }

    pub(super) fn table(&self) -> &str {
        &self.table
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Extends the lease of `term` by `lease` from now; `false` when it is not ours
    /// any more or had already run out.
    pub async fn renew(&self, term: u64, lease: Duration) -> Result<bool, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "UPDATE {} SET lease_until = NOW(3) + INTERVAL ? MICROSECOND \
                 WHERE name = ? AND term = ? AND lease_until >= NOW(3)",
                self.table
            ),
            (crate::time::micros(lease), &self.name, term),
        )
        .await?;
        Ok(conn.affected_rows() == 1)
    }

    /// Ends the lease of `term` now, so a standby takes over at its next try.
    pub async fn release(&self, term: u64) -> Result<bool, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "UPDATE {} SET lease_until = NOW(3) - INTERVAL 1 SECOND WHERE name = ? AND term = ? AND lease_until >= NOW(3)",
                self.table
            ),
            (&self.name, term),
        )
        .await?;
        Ok(conn.affected_rows() == 1)
    }

    /// The current holder, if the row exists.
    pub async fn holder(&self) -> Result<Option<LeaseHolder>, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        self.read_holder(&mut conn, ReadFor::Show).await
    }

    /// The current holder, read on `conn` inside the caller's transaction with the row
    /// locked until it ends (a standby's take-over waits for it).
    pub(crate) async fn holder_for_update(
        &self,
        conn: &mut impl Queryable,
    ) -> Result<Option<LeaseHolder>, mysql_async::Error> {
        self.read_holder(conn, ReadFor::Update).await
    }

    async fn read_holder(
        &self,
        conn: &mut impl Queryable,
        read_for: ReadFor,
    ) -> Result<Option<LeaseHolder>, mysql_async::Error> {
        let row: Option<(String, u64, i64)> = conn
            .exec_first(
                format!(
                    "SELECT holder, term, TIMESTAMPDIFF(MICROSECOND, NOW(3), lease_until) DIV 1000 FROM {} WHERE name = ?{}",
                    self.table,
                    read_for.sql()
                ),
                (&self.name,),
            )
            .await?;
        Ok(row.map(|(holder, term, remaining_ms)| LeaseHolder { holder, term, remaining_ms }))
    }

    /// Ends the current term on `conn`, inside the caller's transaction: the term goes
    /// up by one and the lease runs out, so no write fenced by an earlier term changes
    /// anything any more, its leader loses the next renewal and steps down, and the
    /// next instance to take the lease starts a term after this one.
    pub(crate) async fn end_term(&self, conn: &mut impl Queryable) -> Result<(), mysql_async::Error> {
        conn.exec_drop(
            format!(
                "UPDATE {} SET term = term + 1, lease_until = LEAST(lease_until, NOW(3) - INTERVAL 1 SECOND) WHERE name = ?",
                self.table
            ),
            (&self.name,),
        )
        .await
    }
}
