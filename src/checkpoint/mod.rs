//! The relay's durable position: where in the source's binlog it may resume, and the
//! pinned queue counts and layouts that routing depends on.
//!
//! Written only to a transaction boundary whose events, and all earlier ones, are
//! acknowledged (see `ack`), in one synced RocksDB write: a crash resumes at or
//! before the first unacknowledged event (duplicates, never loss).

pub(crate) mod mirror;
mod store;
mod writer;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::rocketmq::QueueLayout;
use crate::source::binlog::GtidState;
use crate::source::{BinlogPosition, OwedSweep};

pub use mirror::{Mirror, PositionReport};
pub use store::{CheckpointError, CheckpointStore};
pub(crate) use writer::{CheckpointWriter, WriterStopped};

/// Per topic, per queue index: the id of the queue's last finished binlog event past
/// the checkpoint position.
pub type QueueMarks = BTreeMap<String, BTreeMap<u32, u64>>;

/// Everything the relay persists, in one record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub position: BinlogPosition,
    /// Which server the position belongs to (MySQL server_uuid, or MariaDB server_id@host).
    pub server_identity: String,
    /// Pinned queue count per topic; routing must never change under a running fleet.
    pub queue_counts: BTreeMap<String, u32>,
    /// Pinned queue layout per topic once it was first used: which broker and queue id
    /// each routing index is, so a start while a broker is down knows its queues.
    /// Checkpoints written before layouts were pinned have none.
    #[serde(default)]
    pub queue_layouts: BTreeMap<String, QueueLayout>,
    /// The highest outbox row id among the events acknowledged up to `position`
    /// (binlog and swept alike). Unsent rows at or below it will not be read from the
    /// binlog again, so a new pipeline holds their keys until the sweep has sent them
    /// in order. `None` when unknown (a checkpoint set by hand or written by an older
    /// relay): then every unsent row counts.
    #[serde(default)]
    pub acked_through: Option<u64>,
    /// A full sweep that must run before the binlog path tails from `position` (a
    /// first start or a lost position saved the position before sweeping): a start
    /// that finds it runs the sweep first, so one cut short by a crash, a stop, a
    /// pause or a lost lease is never skipped. Cleared with the first acknowledged
    /// binlog transaction after the sweep.
    #[serde(default)]
    pub owed_sweep: Option<OwedSweep>,
    /// Per topic and queue index, the id of the last binlog event past `position` the
    /// queue finished (sent, or failed for good), every earlier one of the queue
    /// finished too: a pipeline that reads the binlog again from `position` skips
    /// each queue's events through its mark, so a queue that kept sending while
    /// another held the checkpoint back does not send its events twice. Valid only
    /// for the binlog of `server_identity`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub queue_marks: QueueMarks,
}

impl Checkpoint {
    /// A checkpoint at `position` of server `server_identity` with the pins given and
    /// nothing known past it: what was acknowledged through is unknown, no sweep is
    /// owed and no queue has progress beyond it.
    pub fn at(
        position: BinlogPosition,
        server_identity: String,
        queue_counts: BTreeMap<String, u32>,
        queue_layouts: BTreeMap<String, QueueLayout>,
    ) -> Self {
        Self {
            position,
            server_identity,
            queue_counts,
            queue_layouts,
            acked_through: None,
            owed_sweep: None,
            queue_marks: QueueMarks::new(),
        }
    }

    /// Whether this checkpoint is at least as far as `other`: by GTID where both have
    /// one of the same family (which holds across servers), else by file and position
    /// of the same server; checkpoints of different servers without GTIDs never are.
    pub(crate) fn is_at_least(&self, other: &Checkpoint) -> bool {
        let gtids =
            (self.position.gtid.as_deref().map(GtidState::parse), other.position.gtid.as_deref().map(GtidState::parse));
        if let (Some(mine), Some(theirs)) = &gtids {
            if (mine.is_mariadb() && theirs.is_mariadb()) || (mine.is_mysql() && theirs.is_mysql()) {
                return mine.covers(theirs);
            }
        }
        self.server_identity == other.server_identity
            && (&self.position.file, self.position.pos) >= (&other.position.file, other.position.pos)
    }
}
