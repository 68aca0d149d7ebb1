//! The relay's durable position: where in the source's binlog it may resume, and the
//! pinned queue counts that routing depends on.
//!
//! Written only to a transaction boundary whose events, and all earlier ones, are
//! acknowledged (see `ack`), in one synced RocksDB write: a crash resumes at or
//! before the first unacknowledged event (duplicates, never loss).

mod mirror;
mod store;
mod writer;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::source::BinlogPosition;

pub use mirror::Mirror;
pub use store::{CheckpointError, CheckpointStore};
pub(crate) use writer::{CheckpointWriter, WriterStopped};

/// Everything the relay persists, in one record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub position: BinlogPosition,
    /// Which server the position belongs to (MySQL server_uuid, or MariaDB server_id@host).
    pub server_identity: String,
    /// Pinned queue count per topic; routing must never change under a running fleet.
    pub queue_counts: BTreeMap<String, u32>,
}
