//! Claiming PENDING rows for the sweep, with leases, so a sweeper that dies in the
//! middle of sending never leaves rows stuck.
//!
//! A claim turns rows PENDING -> SENDING with `owner` and `lease_until` so no other
//! sweeper takes them while they are being sent. Two ways, chosen from the server
//! version or by `sweep.claim`:
//! - `SELECT ... ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED` then `UPDATE` in one
//!   READ COMMITTED transaction (MySQL 8.0+, MariaDB 10.6+): sweepers skip each
//!   other's locked rows instead of waiting or double-claiming;
//! - optimistic, for older servers: read candidates, then per row
//!   `UPDATE ... WHERE id = ? AND status = 0`; the row is ours when one row changed.
//!
//! Every claim keeps each key's order: a row is not claimed while an earlier row of
//! its key waits for a retry, is claimed by another relay, or (under the hold policy)
//! is FAILED. A crashed sweeper's rows come back when their lease passes
//! ([`ClaimStore::reclaim_expired`]), and so do SENDING rows that never had a lease.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use mysql_async::prelude::Queryable;
use mysql_async::{IsolationLevel, Params, Pool, Row, TxOpts, Value};

use outbox_kit::{truncate_utf8, OutboxTable};

use super::status::key_params;
use super::{
    has_index, keyed, placeholders, RowKey, TermFence, CLAIM_INDEX, FAILED, KEY_ORDER_INDEX, PENDING, SENDING,
};
use crate::config::{ClaimMethod, FailedKeyPolicy};
use crate::event::{local_micros, Extras, OutboxEvent, EXTRA_COLUMNS};

/// What a claim reads of each row, before the optional message columns.
const SELECTED_COLUMNS: &str = "id, event_id, biz_key, topic, payload, retry_count, created_at";
/// `last_error` column width.
const LAST_ERROR_MAX: usize = 1024;
/// Deadlock and lock wait timeout: a row another sweeper is claiming at the same moment.
const LOCK_CONFLICTS: [u16; 2] = [1213, 1205];

/// Rows one claim took, in id order, each with its failures so far.
#[derive(Debug, Default)]
pub struct Claimed {
    pub events: Vec<OutboxEvent>,
    /// `retry_counts[i]` is `events[i]`'s `retry_count`.
    pub retry_counts: Vec<u32>,
    /// Claimed rows that cannot be read as events (a value of the wrong type or out of
    /// range): they can never be sent and are failed alone.
    pub malformed: Vec<Malformed>,
}

/// A claimed row that cannot be read as an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    pub id: u64,
    pub reason: String,
}

/// Which rows a claim may take, by `created_at` (see `sweep::watermark`) or by id.
#[derive(Debug, Clone, PartialEq)]
pub enum Cutoff {
    /// Every due PENDING row.
    Everything,
    /// Rows created before this instant (Unix seconds, database clock).
    Before(f64),
    /// Rows up to this id: every row committed before the table's newest id was read.
    /// Unlike a time, it does not depend on the clock each writer's session read.
    UpTo(u64),
    /// Rows created more than this long before the database's current time.
    OlderThan(Duration),
    /// These rows only (read earlier, see [`ClaimStore::visible`]).
    Listed(Vec<u64>),
    /// The rows of these keys up to each one's id: what held keys left behind.
    Behind(Vec<KeyUpTo>),
    /// No row.
    Nothing,
}

impl Cutoff {
    /// The SQL condition on the columns of table `alias` (`""` for the unqualified
    /// table, `"e."` for an alias), and its parameters.
    fn condition(&self, alias: &str) -> (String, Vec<Value>) {
        match self {
            Cutoff::Everything => (String::new(), Vec::new()),
            Cutoff::Before(unix) => {
                (format!(" AND {alias}created_at < FROM_UNIXTIME(?)"), vec![Value::from(format!("{unix:.3}"))])
            }
            Cutoff::UpTo(id) => (format!(" AND {alias}id <= ?"), vec![Value::from(*id)]),
            Cutoff::OlderThan(age) => (
                format!(" AND {alias}created_at < NOW(3) - INTERVAL ? MICROSECOND"),
                vec![Value::from(crate::time::micros(*age))],
            ),
            Cutoff::Listed(ids) if ids.is_empty() => (" AND FALSE".into(), Vec::new()),
            Cutoff::Listed(ids) => (
                format!(" AND {alias}id IN ({})", placeholders(ids.len())),
                ids.iter().map(|id| Value::from(*id)).collect(),
            ),
            Cutoff::Behind(keys) if keys.is_empty() => (" AND FALSE".into(), Vec::new()),
            Cutoff::Behind(keys) => {
                let one = format!("({alias}topic = ? AND {alias}biz_key = ? AND {alias}id <= ?)");
                let params = keys
                    .iter()
                    .flat_map(|k| [Value::from(&k.topic), Value::from(&k.biz_key), Value::from(k.up_to)])
                    .collect();
                (format!(" AND ({})", vec![one; keys.len()].join(" OR ")), params)
            }
            Cutoff::Nothing => (" AND FALSE".into(), Vec::new()),
        }
    }
}

/// The highest outbox row id a checkpoint acknowledged through: unsent rows at or
/// below it will not be read from the binlog again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckedThrough(pub u64);

/// A business key of a topic and the highest row id of it that a claim may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyUpTo {
    pub topic: String,
    pub biz_key: String,
    pub up_to: u64,
}

/// Claims, leases and retry bookkeeping of one relay process (its `owner` name).
#[derive(Clone)]
pub struct ClaimStore {
    pool: Pool,
    outbox: OutboxTable,
    owner: String,
    lease: Duration,
    method: ClaimMethod,
    policy: FailedKeyPolicy,
    /// `FORCE INDEX (idx_claim)` when the table has it: the optimizer otherwise picks
    /// the primary key for `ORDER BY id LIMIT n` and walks every SENT row first.
    index_hint: String,
    /// The select list: [`SELECTED_COLUMNS`], then each of `EXTRA_COLUMNS` the table
    /// has (NULL for one it has not).
    selected: String,
    /// Every claim and every change to a claimed row holds only while this term is current.
    fence: TermFence,
}

impl ClaimStore {
    /// Claims for `outbox` as `owner`, resolving `method` against the primary's
    /// version and using the sweep's index when the table has it.
    pub async fn open(
        pool: Pool,
        outbox: OutboxTable,
        owner: String,
        lease: Duration,
        method: ClaimMethod,
        policy: FailedKeyPolicy,
        fence: TermFence,
    ) -> Result<Self, mysql_async::Error> {
        let mut conn = pool.get_conn().await?;
        let version: Option<String> = conn.query_first("SELECT VERSION()").await?;
        let method = method.for_server(&version.unwrap_or_default());
        if !has_index(&mut conn, &outbox, KEY_ORDER_INDEX.0).await? {
            tracing::warn!(table = %outbox.qualified(), "the outbox table has no {} index: each claimed row's key-order check scans the key's history; run `outbox-relay migrate` to add it", KEY_ORDER_INDEX.0);
        }
        let index_hint = if has_index(&mut conn, &outbox, CLAIM_INDEX.0).await? {
            format!("FORCE INDEX (`{}`)", CLAIM_INDEX.0)
        } else {
            tracing::warn!(table = %outbox.qualified(), "the outbox table has no {} index: each sweep claim scans from the first row; run `outbox-relay migrate` to add it", CLAIM_INDEX.0);
            String::new()
        };
        let columns: Vec<String> = conn
            .exec(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
                (&outbox.schema, &outbox.table),
            )
            .await?;
        drop(conn);
        let selected = selected_columns(&columns);
        Ok(Self { pool, outbox, owner, lease, method, policy, index_hint, selected, fence })
    }

    /// The same claims, made under `fence` (a new leader term) and owned by this
    /// process in that term: claims left from an earlier term of the same process
    /// (which a deposed leader may not release) are then another owner's, and come
    /// back when their lease ends like any other.
    pub fn under(&self, fence: TermFence) -> Self {
        let base = self.owner.split_once("/term-").map_or(self.owner.as_str(), |(base, _)| base);
        Self { owner: format!("{base}/term-{}", fence.term()), fence, ..self.clone() }
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    pub fn method(&self) -> ClaimMethod {
        self.method
    }

    /// Claims up to `limit` due PENDING rows within `cutoff`, in id order, as one batch.
    pub async fn claim(&self, limit: usize, cutoff: &Cutoff) -> Result<Claimed, mysql_async::Error> {
        let (condition, mut params) = cutoff.condition("");
        let (guard, guard_params) = self.key_guard(cutoff);
        let select = format!(
            "SELECT {} FROM {} o {} \
             WHERE status = {PENDING} AND {due}{condition}{guard} ORDER BY id LIMIT {limit}",
            self.selected,
            self.outbox.qualified(),
            self.index_hint,
            due = due(""),
        );
        params.extend(guard_params);
        let params = Params::Positional(params);
        let rows = match self.method {
            ClaimMethod::Optimistic => self.claim_optimistic(&select, params).await?,
            ClaimMethod::SkipLocked | ClaimMethod::Auto => self.claim_locked(&select, params).await?,
        };
        let mut claimed = Claimed::default();
        for (id, row) in rows {
            match to_event(id, row) {
                Ok((event, retry_count)) => {
                    claimed.events.push(event);
                    claimed.retry_counts.push(retry_count);
                }
                Err(malformed) => claimed.malformed.push(malformed),
            }
        }
        Ok(claimed)
    }

    /// The condition that keeps each key in order: no earlier row of the key may be
    /// PENDING outside what this claim may take (waiting for a retry, or not within
    /// `cutoff`), claimed by another relay, or (hold policy) FAILED. With its parameters.
    fn key_guard(&self, cutoff: &Cutoff) -> (String, Vec<Value>) {
        let failed = match self.policy {
            FailedKeyPolicy::Hold => format!(" OR e.status = {FAILED}"),
            FailedKeyPolicy::Continue => String::new(),
        };
        let (in_scope, mut params) = cutoff.condition("e.");
        params.push(Value::from(&self.owner));
        let guard = format!(
            " AND NOT EXISTS (SELECT 1 FROM {} e WHERE e.biz_key = o.biz_key AND e.topic = o.topic AND e.id < o.id \
             AND ((e.status = {PENDING} AND NOT ({due}{in_scope})) \
             OR (e.status = {SENDING} AND NOT (e.owner <=> ?)){failed}))",
            self.outbox.qualified(),
            due = due("e."),
        );
        (guard, params)
    }

    /// The ids of up to `limit` due PENDING rows within `cutoff`, in id order, and the
    /// database's time right after they were read: every one of them was committed
    /// before that time.
    pub async fn visible(&self, limit: usize, cutoff: &Cutoff) -> Result<(f64, Vec<u64>), mysql_async::Error> {
        let (condition, params) = cutoff.condition("");
        let select = format!(
            "SELECT id FROM {} {} WHERE status = {PENDING} AND {due}{condition} ORDER BY id LIMIT {limit}",
            self.outbox.qualified(),
            self.index_hint,
            due = due(""),
        );
        let ids = self.pool.get_conn().await?.exec(select, Params::Positional(params)).await?;
        Ok((self.now().await?, ids))
    }

    /// Every key the table says is held, with its highest row still waiting (the rows
    /// left behind it are PENDING): a key with a FAILED row (hold policy), or with a
    /// PENDING row waiting for its booked retry (both policies). A new pipeline also
    /// holds, with `from_start`, every key with a row that the binlog path will not
    /// read again and that is not sent: a SENDING row (claimed by a relay that is gone)
    /// or an unsent row at or below the id its checkpoint acknowledged through, so
    /// none of its new events overtakes them. One statement, whatever the count.
    pub async fn held_keys(&self, from_start: Option<AckedThrough>) -> Result<Vec<KeyUpTo>, mysql_async::Error> {
        let (holding, waiting) = match self.policy {
            FailedKeyPolicy::Hold => (format!("status = {FAILED} OR "), format!("{PENDING}, {SENDING}, {FAILED}")),
            FailedKeyPolicy::Continue => (String::new(), format!("{PENDING}, {SENDING}")),
        };
        let (behind, params) = match from_start {
            Some(AckedThrough(id)) => {
                (format!(" OR status = {SENDING} OR (status = {PENDING} AND id <= ?)"), vec![Value::from(id)])
            }
            None => (String::new(), Vec::new()),
        };
        let table = self.outbox.qualified();
        let sql = format!(
            "SELECT o.topic, o.biz_key, MAX(o.id) FROM {table} o \
             JOIN (SELECT DISTINCT topic, biz_key FROM {table} \
                   WHERE {holding}(status = {PENDING} AND {booked}){behind}) h \
             ON o.topic = h.topic AND o.biz_key = h.biz_key \
             WHERE o.status IN ({waiting}) GROUP BY o.topic, o.biz_key",
            booked = retry_booked("")
        );
        let rows: Vec<(String, String, u64)> =
            self.pool.get_conn().await?.exec(sql, Params::Positional(params)).await?;
        Ok(rows.into_iter().map(|(topic, biz_key, up_to)| KeyUpTo { topic, biz_key, up_to }).collect())
    }

    /// The newest row's id (0 for an empty table).
    pub async fn newest_id(&self) -> Result<u64, mysql_async::Error> {
        let sql = format!("SELECT MAX(id) FROM {}", self.outbox.qualified());
        Ok(self.pool.get_conn().await?.query_first::<Option<u64>, _>(sql).await?.flatten().unwrap_or(0))
    }

    /// The id of the newest manual action on the schema's tables (requeue, skip,
    /// cleanup, position set): a change means held keys may be free now.
    pub async fn last_manual_action(&self) -> Result<Option<u64>, mysql_async::Error> {
        let sql = format!("SELECT MAX(id) FROM `{}`.`outbox_relay_audit`", self.outbox.schema);
        Ok(self.pool.get_conn().await?.query_first::<Option<u64>, _>(sql).await?.flatten())
    }

    /// Which of `keys` still have a row at or below their `up_to` that is not sent yet
    /// (PENDING or SENDING): one statement for all of them.
    pub async fn keys_waiting(&self, keys: &[KeyUpTo]) -> Result<HashSet<(String, String)>, mysql_async::Error> {
        if keys.is_empty() {
            return Ok(HashSet::new());
        }
        let (condition, params) = Cutoff::Behind(keys.to_vec()).condition("");
        let sql = format!(
            "SELECT DISTINCT topic, biz_key FROM {} WHERE status IN ({PENDING}, {SENDING}){condition}",
            self.outbox.qualified()
        );
        let rows: Vec<(String, String)> = self.pool.get_conn().await?.exec(sql, Params::Positional(params)).await?;
        Ok(rows.into_iter().collect())
    }

    async fn claim_locked(&self, select: &str, params: Params) -> Result<Vec<(u64, Row)>, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let mut options = TxOpts::default();
        // READ COMMITTED: rows the scan rejects are unlocked at once, not held to commit.
        options.with_isolation_level(IsolationLevel::ReadCommitted);
        let mut tx = conn.start_transaction(options).await?;
        // What is committed and due, unlocked: a row another statement holds locked right
        // now is skipped by SKIP LOCKED, and its key's later rows must not overtake it.
        let visible: Vec<Row> = tx.exec(select.replacen(&self.selected, "id, biz_key", 1), params.clone()).await?;
        let visible = visible.iter().map(|row| id_and_key(row, 1)).collect::<Result<Vec<_>, _>>()?;
        let locked: Vec<Row> = tx.exec(format!("{select} FOR UPDATE SKIP LOCKED"), params).await?;
        let keys = locked.iter().map(|row| id_and_key(row, BIZ_KEY_COLUMN)).collect::<Result<Vec<_>, _>>()?;
        let keep = in_key_order(&keys, &visible);
        let rows: Vec<(u64, Row)> =
            keys.iter().zip(locked).zip(keep).filter_map(|(((id, _), row), keep)| keep.then_some((*id, row))).collect();
        if !rows.is_empty() {
            let ids: Vec<u64> = rows.iter().map(|(id, _)| *id).collect();
            let sql = format!(
                "UPDATE {} o {} SET o.status = {SENDING}, o.owner = ?, o.lease_until = NOW(3) + INTERVAL ? MICROSECOND \
                 WHERE o.id IN ({})",
                self.outbox.qualified(),
                self.fence.join(),
                placeholders(ids.len())
            );
            let mut params = vec![Value::from(&self.owner), Value::from(crate::time::micros(self.lease))];
            params.extend(ids.into_iter().map(Value::from));
            tx.exec_drop(sql, Params::Positional(params)).await?;
            if tx.affected_rows() == 0 {
                // Our term is over: nothing was claimed, so nothing may be sent.
                tx.rollback().await?;
                return Ok(Vec::new());
            }
        }
        tx.commit().await?;
        Ok(rows)
    }

    async fn claim_optimistic(&self, select: &str, params: Params) -> Result<Vec<(u64, Row)>, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let candidates: Vec<Row> = conn.exec(select, params).await?;
        let sql = format!(
            "UPDATE {} o {} SET o.status = {SENDING}, o.owner = ?, o.lease_until = NOW(3) + INTERVAL ? MICROSECOND \
             WHERE o.id = ? AND o.status = {PENDING} AND {due}",
            self.outbox.qualified(),
            self.fence.join(),
            due = due("o."),
        );
        let mut claimed = Vec::with_capacity(candidates.len());
        for row in candidates {
            let id = row_id(&row)?;
            match conn.exec_drop(&sql, (&self.owner, crate::time::micros(self.lease), id)).await {
                Ok(()) if conn.affected_rows() == 1 => claimed.push((id, row)),
                Ok(()) => {}
                // Another sweeper is taking this row right now: it is theirs.
                Err(mysql_async::Error::Server(e)) if LOCK_CONFLICTS.contains(&e.code) => {}
                // What is claimed so far goes out; the rest waits for the next sweep.
                Err(error) if !claimed.is_empty() => {
                    tracing::warn!(%error, claimed = claimed.len(), "sweep: optimistic claim interrupted");
                    break;
                }
                Err(error) => return Err(error),
            }
        }
        Ok(claimed)
    }

    /// Other relays' SENDING rows whose lease has passed go back to PENDING (their
    /// sweeper died or stalled; a stalled one may still send them: a duplicate, never a
    /// loss); SENDING rows without a lease (set by hand, or by a relay that crashed
    /// between claim and send in a table without leases) get one, so they come back
    /// one lease later. Our own claims are in our pipeline and are never taken here.
    /// Returns how many rows went back.
    pub async fn reclaim_expired(&self) -> Result<u64, mysql_async::Error> {
        let table = self.outbox.qualified();
        let fence = self.fence.join();
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "UPDATE {table} o {fence} SET o.lease_until = NOW(3) + INTERVAL ? MICROSECOND \
                 WHERE o.status = {SENDING} AND o.lease_until IS NULL"
            ),
            (crate::time::micros(self.lease),),
        )
        .await?;
        conn.exec_drop(
            format!(
                "UPDATE {table} o {fence} SET o.status = {PENDING}, o.owner = NULL, o.lease_until = NULL \
                 WHERE o.status = {SENDING} AND o.lease_until < NOW(3) AND NOT (o.owner <=> ?)"
            ),
            (&self.owner,),
        )
        .await?;
        Ok(conn.affected_rows())
    }

    /// Our claims of `rows` go back to PENDING as they were (no retry counted).
    pub async fn release(&self, rows: &[RowKey<'_>]) -> Result<u64, mysql_async::Error> {
        self.update_own(rows, &format!("o.status = {PENDING}, o.owner = NULL, o.lease_until = NULL"), Vec::new()).await
    }

    /// Our SENDING rows go back to PENDING (at shutdown: whatever was not reported).
    pub async fn release_own(&self) -> Result<u64, mysql_async::Error> {
        let sql = format!(
            "UPDATE {} o {} SET o.status = {PENDING}, o.owner = NULL, o.lease_until = NULL \
             WHERE o.status = {SENDING} AND o.owner = ?",
            self.outbox.qualified(),
            self.fence.join()
        );
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(sql, (&self.owner,)).await?;
        Ok(conn.affected_rows())
    }

    /// Our claimed rows among `ids` back to PENDING: their SENT write-back did not
    /// land, so the sweep publishes them again (a duplicate at most). Rows that are
    /// not ours (SENT, PENDING, another owner's) are left alone.
    pub async fn release_ids(&self, ids: &[u64]) -> Result<u64, mysql_async::Error> {
        if ids.is_empty() {
            return Ok(0);
        }
        let sql = format!(
            "UPDATE {} o {} SET o.status = {PENDING}, o.owner = NULL, o.lease_until = NULL \
             WHERE o.status = {SENDING} AND o.owner = ? AND o.id IN ({})",
            self.outbox.qualified(),
            self.fence.join(),
            placeholders(ids.len())
        );
        let params: Vec<Value> =
            std::iter::once(Value::from(&self.owner)).chain(ids.iter().map(|&id| Value::from(id))).collect();
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(sql, Params::Positional(params)).await?;
        Ok(conn.affected_rows())
    }

    /// Books a failed attempt of our claimed rows: back to PENDING, `retry_count + 1`,
    /// due again after `delay`, `last_error` = `reason`. Rows no longer ours are left alone.
    pub async fn reschedule(
        &self,
        rows: &[RowKey<'_>],
        delay: Duration,
        reason: &str,
    ) -> Result<u64, mysql_async::Error> {
        let set = format!(
            "o.status = {PENDING}, o.retry_count = o.retry_count + 1, o.next_retry_at = NOW(3) + INTERVAL ? MICROSECOND, \
             o.last_error = ?, o.owner = NULL, o.lease_until = NULL"
        );
        let values = vec![Value::from(crate::time::micros(delay)), Value::from(truncate_utf8(reason, LAST_ERROR_MAX))];
        self.update_own(rows, &set, values).await
    }

    /// `UPDATE ... SET {set}` (columns of `o`, with `values`) on those of `rows` we
    /// still hold as SENDING.
    async fn update_own(&self, rows: &[RowKey<'_>], set: &str, values: Vec<Value>) -> Result<u64, mysql_async::Error> {
        if rows.is_empty() {
            return Ok(0);
        }
        let sql = format!(
            "UPDATE {} o JOIN ({}) v ON o.id = v.id AND o.event_id = v.event_id {} SET {set} \
             WHERE o.status = {SENDING} AND o.owner = ?",
            self.outbox.qualified(),
            keyed(rows.len(), &[]),
            self.fence.join()
        );
        let mut params = key_params(rows);
        params.extend(values);
        params.push(Value::from(&self.owner));
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(sql, Params::Positional(params)).await?;
        Ok(conn.affected_rows())
    }

    /// The database's local time in microseconds, read as `created_at` is (as if it
    /// were UTC); `None` if it answered no date.
    pub async fn local_now_us(&self) -> Result<Option<i64>, mysql_async::Error> {
        super::clock::local_now_us(&mut self.pool.get_conn().await?).await
    }

    /// The database's current time, Unix seconds.
    pub async fn now(&self) -> Result<f64, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let now: Option<String> = conn.query_first("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) AS CHAR)").await?;
        let now = now.unwrap_or_default();
        now.parse().map_err(|_| unreadable("the database's time (UNIX_TIMESTAMP(NOW(3)))", &now))
    }
}

/// The select list for a table with `columns`: the optional message columns it lacks
/// are read as NULL, so every claimed row has the same shape.
fn selected_columns(columns: &[String]) -> String {
    let extras = EXTRA_COLUMNS.map(|name| match columns.iter().any(|c| c.eq_ignore_ascii_case(name)) {
        true => format!("`{name}`"),
        false => "NULL".to_owned(),
    });
    format!("{SELECTED_COLUMNS}, {}", extras.join(", "))
}

/// Where `biz_key` is among the [`SELECTED_COLUMNS`].
const BIZ_KEY_COLUMN: usize = 2;

/// The id (first column) of a row read for a claim; a row without a readable id stops
/// the claim: it could be neither claimed nor failed by its id.
/// Whether a PENDING row of table `alias` may be sent now: one never tried is due
/// whatever its `next_retry_at` says (the column's default is the writing session's
/// clock, which a time zone change or a client's own zone can put hours ahead); a
/// row the relay booked a retry for is due at the time it booked, on its own clock.
fn due(alias: &str) -> String {
    format!("({alias}retry_count = 0 OR {alias}next_retry_at <= NOW(3))")
}

/// Whether a PENDING row of table `alias` waits for a retry the relay booked.
fn retry_booked(alias: &str) -> String {
    format!("({alias}retry_count > 0 AND {alias}next_retry_at > NOW(3))")
}

fn row_id(row: &Row) -> Result<u64, mysql_async::Error> {
    match row.get_opt::<u64, _>(0) {
        Some(Ok(id)) => Ok(id),
        other => Err(unreadable("a row's id", &format!("{other:?}"))),
    }
}

/// A row's id and its business key's bytes (column `key`), for the key-order check.
fn id_and_key(row: &Row, key: usize) -> Result<(u64, Vec<u8>), mysql_async::Error> {
    match row.get_opt::<Vec<u8>, _>(key) {
        Some(Ok(biz_key)) => Ok((row_id(row)?, biz_key)),
        other => Err(unreadable("a row's biz_key", &format!("{other:?}"))),
    }
}

/// A value the primary answered that the relay cannot read: the sweep skips its pass
/// and reports it rather than go on with a made-up value.
#[derive(Debug, thiserror::Error)]
#[error("the primary answered {what} with a value the relay cannot read: {value}")]
struct Unreadable {
    what: &'static str,
    value: String,
}

fn unreadable(what: &'static str, value: &str) -> mysql_async::Error {
    mysql_async::Error::Other(Box::new(Unreadable { what, value: value.to_owned() }))
}

/// The event in a claimed row (whose `id` was read already), or why it cannot be read.
fn to_event(id: u64, row: Row) -> Result<(OutboxEvent, u32), Malformed> {
    type Columns = (u64, String, String, String, Vec<u8>, u32, Value, Value, Value, Value, Value);
    let (_, event_id, biz_key, topic, payload, retry_count, created_at, tag, event_type, headers, deliver_at) =
        mysql_async::from_row_opt::<Columns>(row)
            .map_err(|e| Malformed { id, reason: format!("the row cannot be read as an outbox event: {e}") })?;
    let event = OutboxEvent {
        id,
        event_id,
        biz_key,
        topic,
        payload: Bytes::from(payload),
        created_local_us: local_micros(&created_at),
        extras: Extras::from_values([tag, event_type, headers, deliver_at]).boxed(),
    };
    Ok((event, retry_count))
}

/// Which `locked` (id, biz_key) rows a claim may take: none of a key after a `visible`
/// row of that key that was not locked (another statement holds it), so the key's
/// rows still leave in id order.
pub fn in_key_order<K: std::hash::Hash + Eq>(locked: &[(u64, K)], visible: &[(u64, K)]) -> Vec<bool> {
    let taken: HashSet<u64> = locked.iter().map(|(id, _)| *id).collect();
    let mut first_skipped: HashMap<&K, u64> = HashMap::new();
    for (id, key) in visible.iter().filter(|(id, _)| !taken.contains(id)) {
        first_skipped.entry(key).or_insert(*id);
    }
    locked.iter().map(|(id, key)| first_skipped.get(key).is_none_or(|skipped| id < skipped)).collect()
}

#[cfg(test)]
mod tests {
    use super::{in_key_order, selected_columns};

    #[test]
    fn the_optional_columns_a_table_lacks_are_read_as_null() {
        let columns: Vec<String> = ["id", "event_id", "Tag", "deliver_at"].iter().map(|c| c.to_string()).collect();
        assert_eq!(
            selected_columns(&columns),
            "id, event_id, biz_key, topic, payload, retry_count, created_at, `tag`, NULL, NULL, `deliver_at`"
        );
    }

    #[test]
    fn a_key_whose_earlier_row_is_locked_elsewhere_waits_for_it() {
        let rows = |list: &[(u64, &str)]| list.iter().map(|(id, k)| (*id, (*k).to_owned())).collect::<Vec<_>>();
        let visible = rows(&[(1, "a"), (2, "b"), (3, "a"), (4, "c"), (5, "b")]);
        let locked = rows(&[(1, "a"), (3, "a"), (4, "c"), (5, "b")]);
        assert_eq!(in_key_order(&locked, &visible), [true, true, true, false], "b's row 2 was skipped: 5 waits");
        assert_eq!(in_key_order(&locked[..2], &visible[..1]), [true, true], "rows newer than the read are fine");
    }
}
