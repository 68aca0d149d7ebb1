//! SQL on the primary: the schema (migrations), status write-back and the checkpoint mirror.

mod checkpoint_mirror;
mod schema;
mod status;

pub use checkpoint_mirror::CheckpointMirror;
pub use schema::{migrate, MigrationReport, OutboxTable};
pub use status::{Sent, StatusStore};
