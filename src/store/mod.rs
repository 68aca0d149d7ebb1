//! SQL on the primary: the schema (migrations), status write-back, the sweep's
//! claims and leases, and the checkpoint mirror.

mod checkpoint_mirror;
mod claims;
mod schema;
mod status;

pub use checkpoint_mirror::CheckpointMirror;
pub use claims::{ClaimMethod, ClaimStore, Cutoff};
pub use schema::{has_claim_index, migrate, MigrationReport, OutboxTable, CLAIM_INDEX};
pub use status::{Sent, StatusStore};
