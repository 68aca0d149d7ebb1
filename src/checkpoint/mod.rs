//! The relay's durable position: where in the source's binlog it may resume, and the
//! pinned queue counts that routing depends on.
//!
//! Written only to a transaction boundary whose events, and all earlier ones, are
//! acknowledged (see `ack`), in one synced RocksDB write: a crash resumes at or
//! before the first unacknowledged event (duplicates, never loss).

mod store;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use store::{CheckpointError, CheckpointStore};

/// A point in the source's binlog stream: the start of the next event to read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BinlogPosition {
    pub file: String,
    pub pos: u64,
    /// GTID state after the last transaction before `pos`, when the server has GTIDs
    /// (MariaDB `domain-server-seq` list, or a MySQL GTID set).
    pub gtid: Option<String>,
    /// Unix seconds, on the source's clock, of the commit that ends before `pos` (the
    /// binlog event header's timestamp), or of the heartbeat that showed the stream
    /// idle there. The sweep leaves rows newer than this (minus `sweep.grace_ms`) to
    /// the binlog path.
    #[serde(default)]
    pub commit_time: Option<u32>,
}

/// Everything the relay persists, in one record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub position: BinlogPosition,
    /// Which server the position belongs to (MySQL server_uuid, or MariaDB server_id@host).
    pub server_identity: String,
    /// Pinned queue count per topic; routing must never change under a running fleet.
    pub queue_counts: BTreeMap<String, u32>,
}
