//! The outbox table's partitions: none, the relay's (with how far ahead they reach),
//! or a layout the relay does not maintain; judged against `outbox.partition`.

use mysql_async::Conn;
use outbox_kit::OutboxTable;

use super::{Finding, Group};
use crate::config::PartitionPeriod;
use crate::store::partitions::{db_now, read, Layout, Partitioning, FUTURE};

/// Fewer periods ahead than this and rows will soon land in the catch-all partition.
const ENOUGH_AHEAD: i64 = 2;

const NAME: &str = "partitions";

pub(super) async fn layout(
    conn: &mut Conn,
    outbox: &OutboxTable,
    expected: Option<PartitionPeriod>,
) -> Result<Finding, mysql_async::Error> {
    let partitioning = read(conn, outbox).await?;
    let now = db_now(conn).await?;
    Ok(judge(&partitioning, expected, now))
}

fn judge(partitioning: &Partitioning, expected: Option<PartitionPeriod>, now: chrono::NaiveDateTime) -> Finding {
    match (partitioning, expected) {
        (Partitioning::Unpartitioned, None) => {
            Finding::ok(Group::Table, NAME, "not partitioned: retention deletes rows (see [cleanup])")
        }
        (Partitioning::Unpartitioned, Some(period)) => Finding::warn(
            Group::Table,
            NAME,
            format!("outbox.partition = {period} but the table is not partitioned"),
            format!("convert it: `outbox-relay migrate --partition {period} --convert` (docs/operations.md), or unset outbox.partition"),
        ),
        (Partitioning::Foreign { method, expression }, _) => Finding::warn(
            Group::Table,
            NAME,
            format!("partitioned by {method}({expression}): the relay neither adds nor drops partitions"),
            "keep it so by hand, or re-create the table with `outbox-relay migrate --partition daily`",
        ),
        (Partitioning::Periods(layout), Some(period)) if layout.period != period => Finding::warn(
            Group::Table,
            NAME,
            format!("partitioned {} but outbox.partition = {period}", layout.period),
            format!("set outbox.partition = \"{}\"", layout.period),
        ),
        (Partitioning::Periods(layout), None) => Finding::warn(
            Group::Table,
            NAME,
            format!("partitioned {} but outbox.partition is not set", layout.period),
            format!("set outbox.partition = \"{}\", so that `check` also judges the grants the leader's partition upkeep needs", layout.period),
        ),
        (Partitioning::Periods(layout), Some(_)) => judge_layout(layout, now),
    }
}

fn judge_layout(layout: &Layout, now: chrono::NaiveDateTime) -> Finding {
    let ahead = layout.periods_ahead(now);
    let (first, last) = match (layout.partitions.first(), layout.partitions.last()) {
        (Some(first), Some(last)) => (first.name.as_str(), last.name.as_str()),
        _ => ("none", "none"),
    };
    let summary = format!(
        "{}: {} partitions {first}..{last}, {ahead} periods ahead of now, about {} rows in {FUTURE}",
        layout.period,
        layout.partitions.len(),
        layout.future_rows
    );
    if ahead >= ENOUGH_AHEAD {
        return Finding::ok(Group::Table, NAME, summary);
    }
    Finding::warn(
        Group::Table,
        NAME,
        format!("{summary}: the next {ENOUGH_AHEAD} periods have no partition of their own, so their rows land in {FUTURE}"),
        format!("the leader adds them on its own unless it cannot (grant the primary user ALTER); or run `outbox-relay migrate --partition {}`", layout.period),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::Level;
    use crate::store::partitions::Partition;

    fn at(text: &str) -> chrono::NaiveDateTime {
        chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M").expect("a test time")
    }

    fn daily(days: &[&str]) -> Partitioning {
        let partitions = days
            .iter()
            .map(|day| {
                let start = at(&format!("{day} 00:00"));
                let name = PartitionPeriod::Daily.partition_name(start);
                Partition { name, start, until: start + chrono::Duration::days(1), rows: 0 }
            })
            .collect();
        Partitioning::Periods(Layout { period: PartitionPeriod::Daily, partitions, future_rows: 7 })
    }

    #[test]
    fn fewer_than_two_periods_ahead_is_a_warning_with_the_fix() {
        let layout = daily(&["2026-12-06", "2026-12-07", "2026-12-08"]);
        let ok = judge(&layout, Some(PartitionPeriod::Daily), at("2026-12-06 10:00"));
        assert_eq!(ok.level, Level::Ok, "{ok:?}");
        assert!(ok.found.contains("2 periods ahead"), "{ok:?}");
        let short = judge(&layout, Some(PartitionPeriod::Daily), at("2026-12-07 10:00"));
        assert_eq!(short.level, Level::Warn);
        assert!(short.found.contains("land in pfuture"), "{short:?}");
    }

    #[test]
    fn a_layout_other_than_the_configured_one_is_named_with_the_fix() {
        let unpartitioned = judge(&Partitioning::Unpartitioned, Some(PartitionPeriod::Hourly), at("2026-12-06 10:00"));
        assert_eq!(unpartitioned.level, Level::Warn);
        assert!(unpartitioned.fix.as_deref().is_some_and(|fix| fix.contains("--partition hourly --convert")));
        let other = judge(&daily(&["2026-12-06"]), Some(PartitionPeriod::Hourly), at("2026-12-06 10:00"));
        assert!(other.fix.as_deref().is_some_and(|fix| fix.contains("\"daily\"")), "{other:?}");
        let plain = judge(&Partitioning::Unpartitioned, None, at("2026-12-06 10:00"));
        assert_eq!(plain.level, Level::Ok);
        let unset = judge(&daily(&["2026-12-06"]), None, at("2026-12-06 10:00"));
        assert!(unset.fix.as_deref().is_some_and(|fix| fix.contains("outbox.partition = \"daily\"")), "{unset:?}");
    }
}
