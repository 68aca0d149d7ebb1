//! The leader lease in `outbox_relay_lease` on the primary, and the fence that makes
//! every write of the relay conditional on its term.
//!
//! One row per fleet: `(name, holder, term, lease_until)`. No clock's reading decides
//! who leads, neither a relay host's wall clock nor the primary's (its time zone, a
//! DST change, an NTP step or a failover to a primary whose clock is elsewhere must
//! not shorten a term): a taker watches the row and takes it only once it has seen
//! the same record unchanged for a whole lease on its own monotonic clock (the way a
//! Kubernetes lease is observed), or at once when its leader released it. Each
//! renewal writes a new `lease_until` (the primary's now plus the lease: a record
//! version a person can read, compared only for equality); taking is one
//! conditional UPDATE on the record observed, and increments `term`; renewing
//! succeeds while the term is still the row's. An operator's forced term end only
//! bumps `term`: the old leader's next renewal fails and it stops, and takers start
//! watching the changed record, a whole lease, before one takes it.
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
/// the standbys, on its own clock; after that it may take it back (a fleet without a
/// standby resumes by itself).
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

/// `lease_until` of a lease no one holds: released by its leader, or never taken.
const RELEASED: &str = "1970-01-02 00:00:00.000";

/// The lease row as a taker observed it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    pub holder: String,
    pub term: u64,
    /// `lease_until` as text: the record's version, never read as a time.
    stamp: String,
    /// Released by its leader (or never taken): free to take at once.
    pub released: bool,
    /// An operator ordered this term's leader to hand the lease over.
    pub handed_over: bool,
}

impl LeaseRecord {
    /// A record as read: `stamp` is `lease_until` as text.
    pub fn new(holder: String, term: u64, stamp: String, released: bool) -> Self {
        Self { holder, term, stamp, released, handed_over: false }
    }

    /// The same record, whose term an operator ordered handed over.
    pub fn handed_over(self) -> Self {
        Self { handed_over: true, ..self }
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

    /// The lease row as a taker sees it (created, released, if the fleet has none).
    pub async fn observe(&self) -> Result<LeaseRecord, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let sql = format!(
            "SELECT holder, term, CAST(lease_until AS CHAR), lease_until = '{RELEASED}', handover_term <=> term \
             FROM {} WHERE name = ?",
            self.table
        );
        type Row = (String, u64, String, bool, bool);
        let mut row: Option<Row> = conn.exec_first(&sql, (&self.name,)).await?;
        if row.is_none() {
            self.ensure_row(&mut conn).await?;
            row = conn.exec_first(&sql, (&self.name,)).await?;
        }
        let (holder, term, stamp, released, handed_over) = row.unwrap_or_default();
        let record = LeaseRecord::new(holder, term, stamp, released);
        Ok(if handed_over { record.handed_over() } else { record })
    }

    /// Takes the lease for `holder` if the row is still the record `seen` (which the
    /// caller saw released, or unchanged for a whole lease); the new term, or `None`
    /// when the row changed meanwhile.
    pub async fn take(
        &self,
        holder: &str,
        lease: Duration,
        seen: &LeaseRecord,
    ) -> Result<Option<u64>, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "UPDATE {} SET holder = ?, term = LAST_INSERT_ID(term + 1), lease_until = NOW(3) + INTERVAL ? MICROSECOND \
                 WHERE name = ? AND holder = ? AND term = ? AND CAST(lease_until AS CHAR) = ?",
                self.table
            ),
            (holder, crate::time::micros(lease), &self.name, &seen.holder, seen.term, &seen.stamp),
        )
        .await?;
        Ok((conn.affected_rows() == 1).then(|| conn.last_insert_id()).flatten())
    }

    /// Creates the fleet's lease row, run out, if it has none.
    pub(crate) async fn ensure_row(&self, conn: &mut impl Queryable) -> Result<(), mysql_async::Error> {
        conn.exec_drop(
            format!(
                "INSERT IGNORE INTO {} (name, holder, term, lease_until) VALUES (?, '', 0, '{RELEASED}')",
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

    /// Renews the lease of `term` (a new record, which every taker must watch for a
    /// whole lease again); `false` when the term is not the row's any more or was
    /// released.
    pub async fn renew(&self, term: u64, lease: Duration) -> Result<bool, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "UPDATE {} SET lease_until = NOW(3) + INTERVAL ? MICROSECOND \
                 WHERE name = ? AND term = ? AND lease_until <> '{RELEASED}'",
                self.table
            ),
            (crate::time::micros(lease), &self.name, term),
        )
        .await?;
        Ok(conn.affected_rows() == 1)
    }

    /// Releases the lease of `term` (its leader has stopped publishing), so a standby
    /// takes over at its next try.
    pub async fn release(&self, term: u64) -> Result<bool, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "UPDATE {} SET lease_until = '{RELEASED}' WHERE name = ? AND term = ? AND lease_until <> '{RELEASED}'",
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
    /// up by one, so no write fenced by an earlier term changes anything any more and
    /// its leader's next renewal fails (it stops then, at the latest at its own
    /// deadline). The lease is not shortened: a taker takes the changed record only
    /// after watching it a whole lease, when the old leader has surely stopped.
    pub(crate) async fn end_term(&self, conn: &mut impl Queryable) -> Result<(), mysql_async::Error> {
        conn.exec_drop(format!("UPDATE {} SET term = term + 1 WHERE name = ?", self.table), (&self.name,)).await
    }
}
