//! `reconcile`: which events the relay delivered that the consumer never recorded as
//! handled, and which events the consumer recorded that the outbox never had, in a
//! window of time. It only reads, on both databases, and holds at most one chunk of
//! rows at a time besides the differences it found: the outbox's SENT rows are walked
//! by primary key and the consumer kit's dedup rows by `(created_at, event_id)`, in
//! chunks of [`CHUNK`], and each chunk's event_ids are looked up on the other side
//! with one `IN (...)`.
//!
//! The window is given in UTC. A DATETIME carries no zone: it holds what the writing
//! session's clock said, which for the `NOW(3)` defaults and the relay's write-backs
//! is the session time zone. So each bound is converted on each database with
//! `CONVERT_TZ(bound, '+00:00', @@session.time_zone)` and the columns are compared as
//! stored, which keeps their indexes usable.
//! A dedup row of any status (PROCESSED or REJECTED) counts as handled.
//!
//! The leader also reconciles by itself, hour by hour, into a report table and
//! metrics (`hourly`).

use std::collections::HashSet;
use std::fmt;

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Pool, Value};
use serde::{Serialize, Serializer};

pub mod hourly;

use outbox_kit::OutboxTable;

use crate::config::DbUrl;
pub use crate::config::DedupTable;
use crate::db::DbError;
use crate::store::{delivered_by_now, SENT};

/// Rows read per statement, and event_ids looked up per `IN (...)`.
const CHUNK: usize = 5_000;

/// A point in time in UTC, as an operator types it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct UtcTime(NaiveDateTime);

impl UtcTime {
    /// RFC 3339 (`2024-05-01T10:00:00Z`, `2024-05-01T12:00:00+02:00`), or
    /// `YYYY-MM-DD[ HH:MM:SS[.fff]]` taken as UTC.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Ok(time) = DateTime::parse_from_rfc3339(text) {
            return Ok(Self(time.with_timezone(&Utc).naive_utc()));
        }
        let naive = ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"]
            .iter()
            .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
            .or_else(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().map(|d| d.and_time(NaiveTime::MIN)));
        naive.map(Self).ok_or_else(|| {
            format!("{text:?}: give RFC 3339 (2024-05-01T10:00:00Z) or YYYY-MM-DD[ HH:MM:SS], read as UTC")
        })
    }

    /// The time as a DATETIME literal, for a statement parameter.
    pub(crate) fn sql(self) -> String {
        self.0.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
    }
}

impl fmt::Display for UtcTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.format("%Y-%m-%dT%H:%M:%S%.3fZ"))
    }
}

impl Serialize for UtcTime {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// `[since, until)`, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    since: UtcTime,
    until: UtcTime,
}

/// A window whose start is not before its end: it holds nothing.
#[derive(Debug, thiserror::Error)]
#[error("--since {since} is not before --until {until}: give a window whose start comes first")]
pub struct WindowError {
    since: UtcTime,
    until: UtcTime,
}

impl Window {
    pub fn new(since: UtcTime, until: UtcTime) -> Result<Self, WindowError> {
        if since < until {
            Ok(Self { since, until })
        } else {
            Err(WindowError { since, until })
        }
    }

    /// The first instant in the window.
    pub fn since(&self) -> UtcTime {
        self.since
    }

    /// The first instant after it.
    pub fn until(&self) -> UtcTime {
        self.until
    }
}

/// One database the comparison reads, named as its errors should name it.
#[derive(Clone, Copy)]
pub struct Side<'a> {
    /// `primary`, or `consumer` for the database given by `--consumer-db`.
    pub role: &'static str,
    pub pool: &'a Pool,
    pub url: &'a DbUrl,
}

impl Side<'_> {
    fn failed(&self, error: mysql_async::Error) -> DbError {
        DbError::query(self.role, self.url, error)
    }

    async fn conn(&self) -> Result<Conn, DbError> {
        self.pool.get_conn().await.map_err(|e| self.failed(e))
    }
}

/// How far a run has read: rows so far on each side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub outbox_rows: u64,
    pub dedup_rows: u64,
}

/// What a run found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Differences {
    pub since: UtcTime,
    pub until: UtcTime,
    /// SENT outbox rows in the window (by `sent_at`, or `created_at` without one).
    pub sent_checked: u64,
    /// Dedup rows in the window (by their `created_at`).
    pub processed_checked: u64,
    /// SENT in the outbox, no dedup row: in outbox id order.
    pub sent_not_processed: Vec<String>,
    /// A dedup row whose event_id no outbox row has: in dedup `created_at` order.
    pub processed_unknown: Vec<String>,
}

/// The run found differences: the command's outcome, with the exit code of its class.
#[derive(Debug, thiserror::Error)]
#[error("reconcile found {sent_not_processed} events SENT but never processed and {processed_unknown} processed but unknown to the outbox between {since} and {until}; for the first check the consumer group's lag and its dead-letter queue, for the second the other producers of the topic and whether `cleanup` already deleted those rows (keep the window within the retention)")]
pub struct DifferencesFound {
    pub sent_not_processed: usize,
    pub processed_unknown: usize,
    since: UtcTime,
    until: UtcTime,
}

impl Differences {
    /// `Err` naming the counts when anything differs.
    pub fn verdict(&self) -> Result<(), DifferencesFound> {
        if self.sent_not_processed.is_empty() && self.processed_unknown.is_empty() {
            return Ok(());
        }
        Err(DifferencesFound {
            sent_not_processed: self.sent_not_processed.len(),
            processed_unknown: self.processed_unknown.len(),
            since: self.since,
            until: self.until,
        })
    }
}

/// The two tables to compare and the databases they are in (possibly the same).
pub struct Reconcile<'a> {
    pub primary: Side<'a>,
    pub outbox: &'a OutboxTable,
    pub consumer: Side<'a>,
    pub dedup: &'a DedupTable,
}

impl Reconcile<'_> {
    /// Compares the window; `progress` hears the running counts after each chunk.
    pub async fn run(&self, window: &Window, mut progress: impl FnMut(Progress)) -> Result<Differences, DbError> {
        let mut primary = self.primary.conn().await?;
        let mut consumer = self.consumer.conn().await?;
        let outbox_window = local_bounds(&mut primary, window).await.map_err(|e| self.primary.failed(e))?;
        let dedup_window = local_bounds(&mut consumer, window).await.map_err(|e| self.consumer.failed(e))?;
        let mut counts = Progress::default();
        let mut found = Differences {
            since: window.since,
            until: window.until,
            sent_checked: 0,
            processed_checked: 0,
            sent_not_processed: Vec::new(),
            processed_unknown: Vec::new(),
        };

        let (outbox, dedup) = (self.outbox.qualified(), self.dedup.qualified());
        // Timed events the broker still holds cannot have reached the consumer yet.
        let delivered = delivered_by_now(&mut primary, self.outbox).await.map_err(|e| self.primary.failed(e))?;
        let mut after_id = 0u64;
        loop {
            let rows: Vec<(u64, String, bool)> = primary
                .exec(
                    format!(
                        "SELECT id, event_id, COALESCE(sent_at, created_at) >= ? AND COALESCE(sent_at, created_at) < ? \
                         FROM {outbox} WHERE status = {SENT} AND id > ?{delivered} ORDER BY id LIMIT {CHUNK}"
                    ),
                    (&outbox_window.0, &outbox_window.1, after_id),
                )
                .await
                .map_err(|e| self.primary.failed(e))?;
            let Some(&(last_id, _, _)) = rows.last() else { break };
            let full = rows.len() == CHUNK;
            after_id = last_id;
            counts.outbox_rows += rows.len() as u64;
            let in_window: Vec<String> = rows.into_iter().filter(|r| r.2).map(|r| r.1).collect();
            found.sent_checked += in_window.len() as u64;
            let handled = present(&mut consumer, &dedup, &in_window).await.map_err(|e| self.consumer.failed(e))?;
            found.sent_not_processed.extend(in_window.into_iter().filter(|id| !handled.contains(id)));
            progress(counts);
            if !full {
                break;
            }
        }

        let mut after: Option<(String, String)> = None;
        loop {
            let (range, params): (&str, Vec<Value>) = match &after {
                None => (
                    "created_at >= ? AND created_at < ?",
                    vec![dedup_window.0.as_str().into(), dedup_window.1.as_str().into()],
                ),
                Some((at, id)) => (
                    "created_at < ? AND (created_at > ? OR (created_at = ? AND event_id > ?))",
                    vec![dedup_window.1.as_str().into(), at.as_str().into(), at.as_str().into(), id.as_str().into()],
                ),
            };
            let rows: Vec<(String, String)> = consumer
                .exec(
                    format!(
                        "SELECT event_id, CAST(created_at AS CHAR) FROM {dedup} WHERE {range} \
                         ORDER BY created_at, event_id LIMIT {CHUNK}"
                    ),
                    Params::Positional(params),
                )
                .await
                .map_err(|e| self.consumer.failed(e))?;
            let full = rows.len() == CHUNK;
            let Some((last_id, last_at)) = rows.last().cloned() else { break };
            after = Some((last_at, last_id));
            counts.dedup_rows += rows.len() as u64;
            found.processed_checked += rows.len() as u64;
            let ids: Vec<String> = rows.into_iter().map(|r| r.0).collect();
            let known = present(&mut primary, &outbox, &ids).await.map_err(|e| self.primary.failed(e))?;
            found.processed_unknown.extend(ids.into_iter().filter(|id| !known.contains(id)));
            progress(counts);
            if !full {
                break;
            }
        }
        Ok(found)
    }
}

/// The window's bounds in the session time zone of `conn`, as DATETIME literals.
pub(crate) async fn local_bounds(conn: &mut Conn, window: &Window) -> Result<(String, String), mysql_async::Error> {
    let (since, until) = (window.since.sql(), window.until.sql());
    let local: Option<(Option<String>, Option<String>)> = conn
        .exec_first(
            "SELECT CAST(CONVERT_TZ(?, '+00:00', @@session.time_zone) AS CHAR), \
             CAST(CONVERT_TZ(?, '+00:00', @@session.time_zone) AS CHAR)",
            (&since, &until),
        )
        .await?;
    let (local_since, local_until) = local.unwrap_or_default();
    Ok((local_since.unwrap_or(since), local_until.unwrap_or(until)))
}

/// Those of `event_ids` that have a row in `table`.
async fn present(conn: &mut Conn, table: &str, event_ids: &[String]) -> Result<HashSet<String>, mysql_async::Error> {
    let mut found = HashSet::with_capacity(event_ids.len());
    for chunk in event_ids.chunks(CHUNK) {
        let sql = format!("SELECT event_id FROM {table} WHERE event_id IN ({})", vec!["?"; chunk.len()].join(","));
        let params = Params::Positional(chunk.iter().map(|id| Value::from(id.as_str())).collect());
        found.extend(conn.exec::<String, _, _>(sql, params).await?);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_as_utc_in_each_accepted_form() {
        let noon = UtcTime::parse("2024-05-01T12:00:00Z").expect("rfc 3339");
        assert_eq!(UtcTime::parse("2024-05-01T14:00:00+02:00"), Ok(noon), "an offset is converted");
        assert_eq!(UtcTime::parse("2024-05-01 12:00:00"), Ok(noon));
        assert_eq!(UtcTime::parse("2024-05-01").map(UtcTime::sql).as_deref(), Ok("2024-05-01 00:00:00.000"));
        assert_eq!(noon.to_string(), "2024-05-01T12:00:00.000Z");
        assert!(UtcTime::parse("-1h").is_err() && UtcTime::parse("yesterday").is_err());
    }

    #[test]
    fn a_window_must_start_before_it_ends() {
        let (a, b) = (UtcTime::parse("2024-05-01").expect("a"), UtcTime::parse("2024-05-02").expect("b"));
        assert!(Window::new(a, b).is_ok());
        assert!(Window::new(b, a).is_err() && Window::new(a, a).is_err());
    }
}
