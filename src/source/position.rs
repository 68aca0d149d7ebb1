//! Where the binlog path stands: a point in the source's binlog stream.

use serde::{Deserialize, Serialize};

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

/// A full sweep still owed, with what it needs to run after a restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwedSweep {
    /// Why it is owed (first start, lost position), for the log.
    pub reason: String,
    /// The primary's local clock, in microseconds as `created_at` reads, just before
    /// the position to tail from was read: rows created since then (less the grace and
    /// the source replica's lag) are in the binlog stream too, and the binlog path
    /// skips those the sweep claimed. `None`: the sweep places the position by the time
    /// since its request instead.
    pub position_read_local_us: Option<i64>,
}
