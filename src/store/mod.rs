//! SQL on the primary: the schema (migrations) and, later, claim / mark / requeue / cleanup.

mod schema;
mod status;

pub use schema::{migrate, MigrationReport, OutboxTable};
pub use status::{Sent, StatusStore};
