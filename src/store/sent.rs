//! SENT write-backs on connections the SENT writer holds, each executing one prepared
//! statement per batch size by its handle.
//!
//! The writer runs the same few statements all day, one per power-of-two row count.
//! Handed a statement's text, the driver parses all of it for named parameters (some
//! 25 KB for a full batch) and looks it up by that text on every execution, and each
//! connection of a pool prepares each size once more (reading back four parameter
//! descriptions per row). A held connection prepares a size once and then executes it
//! by handle. The connections come from a small pool of their own: held out of the
//! shared pool, they would leave the lease keeper, the sweep and the checkpoint mirror
//! without one when `primary.pool_max` is small. A connection is used for a lifetime
//! after it is taken (the pools' own, in the relay) and replaced at the first write
//! after that (the pool closes it, as it is older than that), so a primary moved
//! behind the same name is reached, as through the shared pool. A held statement
//! stays open while the driver's statement cache holds it: at most 11 sizes, fewer
//! than the cache's 32 unless a URL sets `stmt_cache_size` lower, in which case an
//! evicted one fails its write once and is prepared again on the next attempt.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Pool, Statement, Value};

use outbox_kit::OutboxTable;

use super::{keyed, padded, padded_len, placeholders, TermFence, SENT, SKIPPED};

/// One row to mark SENT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub id: u64,
    pub event_id: String,
    pub msg_id: String,
    /// When the broker answered SEND_OK (stored as `sent_at`, so it measures delivery,
    /// not how long the batched write-back took).
    pub at: SystemTime,
}

/// Where SENT write-backs go, by one leader term: each changes rows only while that
/// term is current.
#[derive(Clone)]
pub struct SentStore {
    /// The write-back connections' own pool.
    pool: Pool,
    statement: Arc<SentStatement>,
    /// How long a connection is used after it is taken.
    lifetime: Duration,
}

/// A connection held for write-backs, with the statements it has prepared.
pub struct SentConn {
    conn: Conn,
    taken: Instant,
    statement: Arc<SentStatement>,
    /// Prepared statements by the row count they are written for.
    prepared: HashMap<usize, Statement>,
}

/// What the SENT UPDATE's text is made of, fixed for a term.
struct SentStatement {
    outbox: OutboxTable,
    fence: TermFence,
}

impl SentStore {
    /// Write-backs on connections from `pool`, which should be the writer's own, each
    /// used for `lifetime` after it is taken.
    pub fn new(pool: Pool, outbox: OutboxTable, fence: TermFence, lifetime: Duration) -> Self {
        Self { pool, statement: Arc::new(SentStatement { outbox, fence }), lifetime }
    }

    /// `held` while it was taken less than the lifetime ago; else a connection taken
    /// from the pool after `held` is given back to it (a pool whose connections are all
    /// held has room for no other).
    pub async fn hold(&self, held: Option<SentConn>) -> Result<SentConn, mysql_async::Error> {
        if let Some(conn) = held.filter(|conn| conn.taken.elapsed() < self.lifetime) {
            return Ok(conn);
        }
        Ok(SentConn {
            conn: self.pool.get_conn().await?,
            taken: Instant::now(),
            statement: Arc::clone(&self.statement),
            prepared: HashMap::new(),
        })
    }
}

impl SentConn {
    /// Which of `ids` are neither SENT nor SKIPPED now: after a write-back that changed
    /// fewer rows than it was given, the rows it really missed (the others were SENT
    /// already: an event published again after a restart or a takeover). Asked on this
    /// connection: the writer's pool has none to spare while its writes hold theirs.
    pub async fn unsent(&mut self, ids: &[u64]) -> Result<Vec<u64>, mysql_async::Error> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT id FROM {} WHERE status NOT IN ({SENT}, {SKIPPED}) AND id IN ({}) ORDER BY id",
            self.statement.outbox.qualified(),
            placeholders(ids.len())
        );
        let params: Vec<Value> = ids.iter().map(|&id| Value::from(id)).collect();
        self.conn.exec(sql, Params::Positional(params)).await
    }

    /// Marks `rows` SENT with their msg_id in one statement; returns rows changed.
    pub async fn mark_sent(&mut self, rows: &[Sent]) -> Result<u64, mysql_async::Error> {
        if rows.is_empty() {
            return Ok(0);
        }
        let statement = self.prepared_for(padded_len(rows.len())).await?;
        let params: Vec<Value> = padded(rows)
            .flat_map(|r| {
                [
                    Value::from(r.id),
                    Value::from(r.event_id.as_str()),
                    Value::from(r.msg_id.as_str()),
                    Value::from(rounded_millis(r.at)),
                ]
            })
            .collect();
        self.conn.exec_drop(&statement, Params::Positional(params)).await?;
        Ok(self.conn.affected_rows())
    }

    /// The statement for `rows` rows, prepared on this connection at its first use.
    async fn prepared_for(&mut self, rows: usize) -> Result<Statement, mysql_async::Error> {
        if let Some(statement) = self.prepared.get(&rows) {
            return Ok(statement.clone());
        }
        let statement = self.conn.prep(self.statement.text(rows)).await?;
        self.prepared.insert(rows, statement.clone());
        Ok(statement)
    }
}

impl SentStatement {
    /// The UPDATE for `rows` rows (a [`padded_len`]).
    fn text(&self, rows: usize) -> String {
        format!(
            "UPDATE {} o JOIN ({}) v ON o.id = v.id AND o.event_id = v.event_id {} \
             SET o.status = {SENT}, o.msg_id = v.msg_id, o.sent_at = FROM_UNIXTIME(v.sent_at * 0.001), o.owner = NULL, \
             o.lease_until = NULL WHERE o.status NOT IN ({SENT}, {SKIPPED})",
            self.outbox.qualified(),
            keyed(rows, &["msg_id", "sent_at"]),
            self.fence.join()
        )
    }
}

/// Milliseconds since the epoch, rounded to the nearest (the column's precision). The
/// SQL multiplies by the decimal 0.001, which is exact whatever the server's division
/// settings, unlike a double.
fn rounded_millis(at: SystemTime) -> u64 {
    crate::time::unix_micros(at).saturating_add(500) / 1000
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn sent_at_is_rounded_to_the_nearest_millisecond() {
        let at = |micros| UNIX_EPOCH + Duration::from_micros(micros);
        assert_eq!(rounded_millis(at(1_796_121_005_123_499)), 1_796_121_005_123);
        assert_eq!(rounded_millis(at(1_796_121_005_123_500)), 1_796_121_005_124);
        assert_eq!(rounded_millis(at(1_796_121_005_999_700)), 1_796_121_006_000);
    }
}
