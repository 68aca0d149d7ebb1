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
