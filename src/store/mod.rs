//! SQL on the primary that the data path runs: the schema (migrations), status
//! write-backs (SENT on connections of their own), the sweep's claims and leases, the
//! database clock, the leader lease whose term fences every write, and the fleet's
//! roll call. The operator's
//! own queries (requeue, skip, cleanup, report, reconcile) live with their commands in
//! `ops`, on the helpers this module shares.

mod claims;
mod clock;
mod instances;
mod lease;
mod orders;
pub mod partitions;
mod schema;
mod sent;
mod status;

pub(crate) use claims::{AckedThrough, KeyUpTo};
pub use claims::{ClaimStore, Claimed, Cutoff, Malformed};
pub(crate) use instances::REPORT_EVERY;
pub use instances::{InstanceReport, InstanceRole, InstanceSeen, Instances};
pub use lease::{LeaseHolder, LeaseRecord, LeaseStore, TermFence, HANDOVER_GRACE};
pub use orders::{Orders, Paused};
pub use schema::{
    check_migrated, delivered_by_now, has_index, migrate, planned, MigrateError, MigrationReport, NotMigrated,
    PartitionPlan, PartitionRefused, CLAIM_INDEX, KEY_ORDER_INDEX,
};
pub use sent::{Sent, SentConn, SentStore};
pub use status::{Backlog, StatusStore};

use outbox_kit::RowStatus;

/// Status column values, for the SQL text (`status = {PENDING}`).
pub(crate) const PENDING: u8 = RowStatus::Pending.code();
pub(crate) const SENDING: u8 = RowStatus::Sending.code();
pub(crate) const SENT: u8 = RowStatus::Sent.code();
pub(crate) const FAILED: u8 = RowStatus::Failed.code();
pub(crate) const SKIPPED: u8 = RowStatus::Skipped.code();

/// Whether a read is a plain look or locks its rows until the caller's transaction
/// ends, for a change that depends on what it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadFor {
    Show,
    Update,
}

impl ReadFor {
    /// The clause that ends the `SELECT`.
    pub(crate) fn sql(self) -> &'static str {
        match self {
            ReadFor::Show => "",
            ReadFor::Update => " FOR UPDATE",
        }
    }
}

/// Which row a write-back is for: the id alone could name another row after the
/// table was truncated or recreated while the relay was behind, so every write-back
/// matches the event_id too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowKey<'a> {
    pub id: u64,
    pub event_id: &'a str,
}

/// A derived table of `rows` keys plus `columns` more values per row, to JOIN on:
/// `SELECT ? AS id, ? AS event_id[, ? AS c]... UNION ALL SELECT ?, ?[, ?]...`, written
/// for [`padded`] rows: its parameters must come from [`padded`] too.
fn keyed(rows: usize, columns: &[&str]) -> String {
    let rows = padded_len(rows);
    let first: String = ["? AS id", "? AS event_id"]
        .into_iter()
        .map(str::to_owned)
        .chain(columns.iter().map(|c| format!("? AS {c}")))
        .collect::<Vec<_>>()
        .join(", ");
    let rest = vec!["?"; 2 + columns.len()].join(", ");
    std::iter::once(format!("SELECT {first}"))
        .chain(std::iter::repeat_n(format!("SELECT {rest}"), rows.saturating_sub(1)))
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

/// `?,?,...`: `n` placeholders for an `IN (...)` list.
pub(crate) fn placeholders(n: usize) -> String {
    vec!["?"; n].join(",")
}

/// Row ids a log line names at most.
pub(crate) const IDS_LOGGED: usize = 20;

/// The row count a statement over `rows` rows is written for: the next power of two.
/// A statement is prepared once per text and connection, then cached: with a text per
/// row count, a batch of a new size prepares its own (a round trip, and two or more
/// parameter descriptions per row read back and parsed), which took a sixth of the
/// relay's instructions in a drain whose batch sizes varied.
fn padded_len(rows: usize) -> usize {
    rows.next_power_of_two()
}

/// `rows`, then its last row again up to [`padded_len`]: a JOIN matches (and an UPDATE
/// changes) a row once however often the derived table names it.
fn padded<T>(rows: &[T]) -> impl Iterator<Item = &T> {
    let extra = padded_len(rows.len()) - rows.len();
    rows.iter().chain(rows.last().into_iter().flat_map(move |last| std::iter::repeat_n(last, extra)))
}

#[cfg(test)]
mod tests {
    use super::{keyed, padded};

    #[test]
    fn a_keyed_derived_table_names_its_columns_once() {
        assert_eq!(keyed(1, &[]), "SELECT ? AS id, ? AS event_id");
        assert_eq!(keyed(2, &["msg_id"]), "SELECT ? AS id, ? AS event_id, ? AS msg_id UNION ALL SELECT ?, ?, ?");
    }

    #[test]
    fn statements_are_written_for_a_power_of_two_rows_the_last_row_repeated() {
        assert_eq!(keyed(3, &[]), keyed(4, &[]), "one text for 3 and 4 rows");
        assert_ne!(keyed(4, &[]), keyed(5, &[]));
        assert_eq!(padded(&[1, 2, 3]).copied().collect::<Vec<_>>(), [1, 2, 3, 3]);
        assert_eq!(padded(&[1, 2, 3, 4]).copied().collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(padded(&[7]).copied().collect::<Vec<_>>(), [7]);
        assert_eq!(padded::<u8>(&[]).count(), 0);
        assert_eq!(padded(&[0; 600]).count(), 1_024);
    }
}
