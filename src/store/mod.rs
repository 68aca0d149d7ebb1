//! SQL on the primary: the schema (migrations), status write-back, the sweep's
//! claims and leases.

mod claims;
mod schema;
mod status;

pub use claims::{ClaimStore, Claimed, Cutoff};
pub use schema::{has_claim_index, migrate, MigrationReport, CLAIM_INDEX};
pub use status::{Sent, StatusStore};

use outbox_kit::RowStatus;

/// Status column values, for the SQL text (`status = {PENDING}`).
const PENDING: u8 = RowStatus::Pending.code();
const SENDING: u8 = RowStatus::Sending.code();
const SENT: u8 = RowStatus::Sent.code();
const FAILED: u8 = RowStatus::Failed.code();
