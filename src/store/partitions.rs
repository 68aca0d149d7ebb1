//! A partitioned outbox table: RANGE COLUMNS partitions on `created_at`, one per
//! period, and a last catch-all partition `pfuture` (up to MAXVALUE), so that an
//! insert never fails for want of a partition (it would fail the application's own
//! transaction). The leader keeps partitions a few periods ahead by splitting
//! `pfuture`, and retires expired periods by dropping their partition whole: no
//! row-by-row DELETE, no binlog row event per deleted row, no purge work.
//!
//! The layout is read from `information_schema.PARTITIONS` every time it is needed:
//! the table is the truth, whatever the configuration says.

use chrono::NaiveDateTime;
use mysql_async::prelude::Queryable;
use outbox_kit::{OutboxTable, RowStatus};

use super::{FAILED, PENDING, SENDING};
use crate::config::PartitionPeriod;

/// The catch-all partition that holds rows past the last period's partition.
pub const FUTURE: &str = "pfuture";

/// Periods after the current one that get their own partition ahead of time.
pub const PERIODS_AHEAD: i32 = 3;

/// Most partitions a conversion creates (MariaDB allows 8,192; each is a file).
const MOST_PARTITIONS: i32 = 1_000;

/// Statuses whose rows keep their partition: still to be delivered, or waiting for an
/// operator.
pub const LIVE_STATUSES: [u8; 3] = [PENDING, SENDING, FAILED];

/// One period's partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    pub start: NaiveDateTime,
    /// Rows created before this time (and at or after the previous partition's end).
    pub until: NaiveDateTime,
    /// The server's estimate of its rows.
    pub rows: u64,
}

/// How the outbox table is partitioned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioning {
    Unpartitioned,
    /// The relay's layout: period partitions, then `pfuture`.
    Periods(Layout),
    /// Partitioned some other way: the relay leaves it alone.
    Foreign {
        method: String,
        expression: String,
    },
}

/// The relay's partitions of a table, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub period: PartitionPeriod,
    pub partitions: Vec<Partition>,
    /// The server's estimate of the rows in `pfuture` (rows no period partition took).
    pub future_rows: u64,
}

impl Layout {
    /// Whole periods after the one `now` is in that have a partition of their own;
    /// negative when `now` itself is already past the last one.
    pub fn periods_ahead(&self, now: NaiveDateTime) -> i64 {
        let current = self.period.start_of(now);
        let Some(last) = self.partitions.last() else { return -1 };
        (last.until - current).num_seconds() / self.period.length().num_seconds() - 1
    }

    /// The starts of the periods to add so that `ahead` periods after `now`'s have a
    /// partition of their own (and every period since the last partition, so that
    /// each partition holds the period its name says).
    pub fn missing(&self, now: NaiveDateTime, ahead: i32) -> Vec<NaiveDateTime> {
        let current = self.period.start_of(now);
        let from = self.partitions.last().map_or(current, |last| last.until);
        periods(self.period, from, current + self.period.length() * (ahead + 1))
    }

    /// Partitions whose every row was created `retention` or longer before `now`,
    /// oldest first. The newest period partition is never among them: it bounds
    /// `pfuture`.
    pub fn expired(&self, now: NaiveDateTime, retention: chrono::Duration) -> Vec<&Partition> {
        let keep_last = self.partitions.len().saturating_sub(1);
        let past = |p: &&Partition| p.until.checked_add_signed(retention).is_some_and(|end| end <= now);
        self.partitions[..keep_last].iter().filter(past).collect()
    }
}

/// The starts of every period from `from` (a period start) up to `until`.
fn periods(period: PartitionPeriod, from: NaiveDateTime, until: NaiveDateTime) -> Vec<NaiveDateTime> {
    std::iter::successors(Some(from), |start| Some(*start + period.length())).take_while(|s| *s < until).collect()
}

/// A partition definition of the period starting at `start`.
fn definition(period: PartitionPeriod, start: NaiveDateTime) -> String {
    let until = start + period.length();
    format!("PARTITION {} VALUES LESS THAN ('{}')", period.partition_name(start), until.format("%Y-%m-%d %H:%M:%S"))
}

fn future_definition() -> String {
    format!("PARTITION {FUTURE} VALUES LESS THAN (MAXVALUE)")
}

/// A conversion would create more partitions than a table should have.
#[derive(Debug, thiserror::Error)]
#[error("partitioning by {period} from the oldest row ({oldest}) would make {count} partitions (at most {MOST_PARTITIONS}); fix: delete old SENT rows first (`outbox-relay cleanup`) or choose a longer period")]
pub struct TooManyPartitions {
    period: PartitionPeriod,
    oldest: NaiveDateTime,
    count: usize,
}

/// The `PARTITION BY` clause for a table whose oldest row was created at `oldest`
/// (now, for a new table): one partition per period from there through
/// [`PERIODS_AHEAD`] after `now`'s, then `pfuture`.
pub fn partition_clause(
    period: PartitionPeriod,
    oldest: NaiveDateTime,
    now: NaiveDateTime,
) -> Result<String, TooManyPartitions> {
    let current = period.start_of(now);
    let starts = periods(period, period.start_of(oldest.min(now)), current + period.length() * (PERIODS_AHEAD + 1));
    if starts.len() > MOST_PARTITIONS as usize {
        return Err(TooManyPartitions { period, oldest, count: starts.len() });
    }
    let mut parts: Vec<String> = starts.into_iter().map(|start| definition(period, start)).collect();
    parts.push(future_definition());
    Ok(format!("PARTITION BY RANGE COLUMNS(created_at) (\n  {}\n)", parts.join(",\n  ")))
}

/// The database's clock, in the session time zone `created_at` is written in.
pub async fn db_now(conn: &mut impl Queryable) -> Result<NaiveDateTime, mysql_async::Error> {
    let now: Option<String> = conn.query_first("SELECT DATE_FORMAT(NOW(), '%Y-%m-%d %H:%i:%s')").await?;
    parse_time(&now.unwrap_or_default())
}

/// The creation time of the oldest row (`None` for an empty table).
pub async fn oldest_row(
    conn: &mut impl Queryable,
    outbox: &OutboxTable,
) -> Result<Option<NaiveDateTime>, mysql_async::Error> {
    let oldest: Option<Option<String>> = conn
        .query_first(format!("SELECT DATE_FORMAT(MIN(created_at), '%Y-%m-%d %H:%i:%s') FROM {}", outbox.qualified()))
        .await?;
    oldest.flatten().map(|text| parse_time(&text)).transpose()
}

fn parse_time(text: &str) -> Result<NaiveDateTime, mysql_async::Error> {
    NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S")
        .map_err(|e| mysql_async::Error::Other(format!("the server answered {text:?} for a DATETIME: {e}").into()))
}

/// One row of `information_schema.PARTITIONS`.
type PartitionRow = (Option<String>, Option<String>, Option<String>, Option<u64>);

/// How the outbox table is partitioned now.
pub async fn read(conn: &mut impl Queryable, outbox: &OutboxTable) -> Result<Partitioning, mysql_async::Error> {
    let rows: Vec<PartitionRow> = conn
        .exec(
            "SELECT PARTITION_NAME, PARTITION_METHOD, PARTITION_EXPRESSION, TABLE_ROWS \
             FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
             ORDER BY PARTITION_ORDINAL_POSITION",
            (&outbox.schema, &outbox.table),
        )
        .await?;
    Ok(layout_of(rows))
}

fn layout_of(rows: Vec<PartitionRow>) -> Partitioning {
    let Some((Some(_), method, expression, _)) = rows.first().cloned() else { return Partitioning::Unpartitioned };
    let method = method.unwrap_or_default();
    let expression = expression.unwrap_or_default();
    let foreign = || Partitioning::Foreign { method: method.clone(), expression: expression.clone() };
    if method != "RANGE COLUMNS" || expression.trim_matches('`') != "created_at" {
        return foreign();
    }
    let (mut partitions, mut future_rows, mut period) = (Vec::new(), 0, None);
    for (name, _, _, rows) in rows {
        let name = name.unwrap_or_default();
        if name == FUTURE {
            future_rows = rows.unwrap_or_default();
            continue;
        }
        let Some((of, start)) = PartitionPeriod::of_partition(&name) else { return foreign() };
        if period.is_some_and(|p| p != of) {
            return foreign();
        }
        period = Some(of);
        partitions.push(Partition { name, start, until: start + of.length(), rows: rows.unwrap_or_default() });
    }
    match period {
        Some(period) => Partitioning::Periods(Layout { period, partitions, future_rows }),
        None => foreign(),
    }
}

/// Gives each period starting at `starts` a partition, split off `pfuture`.
pub async fn add(
    conn: &mut impl Queryable,
    outbox: &OutboxTable,
    period: PartitionPeriod,
    starts: &[NaiveDateTime],
) -> Result<(), mysql_async::Error> {
    match add_statement(outbox, period, starts) {
        Some(statement) => conn.query_drop(statement).await,
        None => Ok(()),
    }
}

/// The statement that gives each period starting at `starts` a partition (none for none).
pub fn add_statement(outbox: &OutboxTable, period: PartitionPeriod, starts: &[NaiveDateTime]) -> Option<String> {
    if starts.is_empty() {
        return None;
    }
    let mut parts: Vec<String> = starts.iter().map(|start| definition(period, *start)).collect();
    parts.push(future_definition());
    Some(format!("ALTER TABLE {} REORGANIZE PARTITION {FUTURE} INTO ({})", outbox.qualified(), parts.join(", ")))
}

/// A row that keeps its partition: the first live row in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveRow {
    pub id: u64,
    pub status: RowStatus,
}

/// The first row of `partition` still to be delivered or waiting for an operator.
pub async fn live_row(
    conn: &mut impl Queryable,
    outbox: &OutboxTable,
    partition: &str,
) -> Result<Option<LiveRow>, mysql_async::Error> {
    let statuses = LIVE_STATUSES.map(|s| s.to_string()).join(", ");
    let row: Option<(u64, u8)> = conn
        .query_first(format!(
            "SELECT id, status FROM {} PARTITION (`{partition}`) WHERE status IN ({statuses}) ORDER BY id LIMIT 1",
            outbox.qualified()
        ))
        .await?;
    Ok(row.and_then(|(id, code)| Some(LiveRow { id, status: RowStatus::from_code(code)? })))
}

/// Drops `partition` and every row in it.
pub async fn drop_partition(
    conn: &mut impl Queryable,
    outbox: &OutboxTable,
    partition: &str,
) -> Result<(), mysql_async::Error> {
    conn.query_drop(format!("ALTER TABLE {} DROP PARTITION `{partition}`", outbox.qualified())).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M").expect("a test time")
    }

    fn row(name: &str, rows: u64) -> PartitionRow {
        (Some(name.to_owned()), Some("RANGE COLUMNS".to_owned()), Some("`created_at`".to_owned()), Some(rows))
    }

    fn hourly(names: &[&str]) -> Layout {
        let mut rows: Vec<PartitionRow> = names.iter().map(|n| row(n, 5)).collect();
        rows.push(row(FUTURE, 0));
        match layout_of(rows) {
            Partitioning::Periods(layout) => layout,
            other => panic!("not the relay's layout: {other:?}"),
        }
    }

    #[test]
    fn the_relays_layout_is_read_from_its_partition_names() {
        let layout = hourly(&["p2026120610", "p2026120611"]);
        assert_eq!(layout.period, PartitionPeriod::Hourly);
        assert_eq!(layout.partitions[1].start, at("2026-12-06 11:00"));
        assert_eq!(layout.partitions[1].until, at("2026-12-06 12:00"));
        assert_eq!(layout_of(vec![(None, None, None, Some(3))]), Partitioning::Unpartitioned);
        let by_hash = vec![(Some("p0".to_owned()), Some("HASH".to_owned()), Some("`id`".to_owned()), Some(1))];
        assert!(matches!(layout_of(by_hash), Partitioning::Foreign { .. }));
        assert!(matches!(layout_of(vec![row("p2026120610", 1), row("p20261207", 1)]), Partitioning::Foreign { .. }));
    }

    #[test]
    fn missing_periods_run_from_the_last_partition_to_the_ones_ahead() {
        let layout = hourly(&["p2026120610", "p2026120611"]);
        let now = at("2026-12-06 11:30");
        assert_eq!(layout.periods_ahead(now), 0);
        assert_eq!(layout.missing(now, 2), vec![at("2026-12-06 12:00"), at("2026-12-06 13:00")]);
        assert_eq!(layout.periods_ahead(at("2026-12-06 13:10")), -2);
        assert_eq!(layout.missing(at("2026-12-06 13:10"), 0), vec![at("2026-12-06 12:00"), at("2026-12-06 13:00")]);
        assert_eq!(layout.missing(at("2026-12-06 09:10"), 1), Vec::<NaiveDateTime>::new());
    }

    #[test]
    fn only_periods_past_their_retention_expire_and_never_the_last() {
        let layout = hourly(&["p2026120608", "p2026120609", "p2026120610"]);
        let expired = |now, hours| {
            layout.expired(at(now), chrono::Duration::hours(hours)).iter().map(|p| p.name.clone()).collect::<Vec<_>>()
        };
        assert_eq!(expired("2026-12-06 11:00", 1), ["p2026120608", "p2026120609"]);
        assert_eq!(expired("2026-12-06 10:59", 1), ["p2026120608"]);
        assert_eq!(expired("2026-12-07 00:00", 0), ["p2026120608", "p2026120609"]);
    }

    #[test]
    fn a_new_tables_clause_covers_the_oldest_row_through_the_periods_ahead() {
        let clause = partition_clause(PartitionPeriod::Daily, at("2026-12-04 08:00"), at("2026-12-06 11:30"))
            .expect("a few partitions");
        assert!(clause.starts_with("PARTITION BY RANGE COLUMNS(created_at) (\n  PARTITION p20261204 VALUES LESS THAN ('2026-12-05 00:00:00'),"), "{clause}");
        assert!(clause.contains("PARTITION p20261209 VALUES LESS THAN ('2026-12-10 00:00:00'),\n  PARTITION pfuture VALUES LESS THAN (MAXVALUE)\n)"), "{clause}");
        assert_eq!(clause.matches("PARTITION p").count(), 7);
        let years = partition_clause(PartitionPeriod::Hourly, at("2025-01-01 00:00"), at("2026-12-06 11:30"));
        assert!(years.unwrap_err().to_string().contains("cleanup"));
    }
}
