//! Where outbox events come from: the binlog path (the fast path) and, later, the
//! polling sweep (the fallback). Both hand on committed transactions of typed events.

pub mod binlog;

use crate::checkpoint::BinlogPosition;
use crate::event::OutboxEvent;

/// One committed source transaction: its outbox INSERTs, in binlog order, and the
/// position right after its commit (where a restart may resume once it is acked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceTx {
    pub events: Vec<OutboxEvent>,
    pub end: BinlogPosition,
}
