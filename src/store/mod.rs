//! SQL on the primary: the schema (migrations), status write-back, the sweep's
//! claims and leases, the leader lease whose term fences every write, and the
//! operator's audited manual actions (requeue, skip, cleanup), status report and
//! read-only reconciliation against a consumer's dedup table; and the queue that
//! carries SENT write-backs to their writer.

mod claims;
mod clock;
mod lease;
mod manual;
mod reconcile;
mod report;
mod schema;
mod status;
mod write_back;

pub use claims::{ClaimStore, Claimed, Cutoff, Malformed};
pub use lease::{LeaseHolder, LeaseStore, TermFence};
pub(crate) use manual::{audit, AuditEntry};
pub use manual::{Change, Cleanup, FailedFilter, FailedRow, Manual, Operator, Target};
pub use reconcile::{
    DedupTable, Differences, DifferencesFound, Progress, Reconcile, Side, UtcTime, Window, WindowError,
};
pub use report::{status_report, LeaderReport, PositionReport, StatusReport};
pub use schema::{check_migrated, has_index, migrate, MigrationReport, NotMigrated, CLAIM_INDEX, KEY_ORDER_INDEX};
pub use status::{Backlog, Sent, StatusStore};
pub use write_back::{Flushed, WriteBack, WriteBacks, WriterGone};

use outbox_kit::RowStatus;

/// Status column values, for the SQL text (`status = {PENDING}`).
const PENDING: u8 = RowStatus::Pending.code();
const SENDING: u8 = RowStatus::Sending.code();
const SENT: u8 = RowStatus::Sent.code();
const FAILED: u8 = RowStatus::Failed.code();
const SKIPPED: u8 = RowStatus::Skipped.code();

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
/// `SELECT ? AS id, ? AS event_id[, ? AS c]... UNION ALL SELECT ?, ?[, ?]...`.
fn keyed(rows: usize, columns: &[&str]) -> String {
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

#[cfg(test)]
mod tests {
    use super::keyed;

    #[test]
    fn a_keyed_derived_table_names_its_columns_once() {
        assert_eq!(keyed(1, &[]), "SELECT ? AS id, ? AS event_id");
        assert_eq!(keyed(2, &["msg_id"]), "SELECT ? AS id, ? AS event_id, ? AS msg_id UNION ALL SELECT ?, ?, ?");
    }
}
