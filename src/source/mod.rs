//! Where outbox events come from: the binlog path ([`binlog`], the fast path) and
//! the polling [`sweep`] (the fallback, and the whole relay in poll mode). Both hand
//! on batches of committed rows through one [`Handoff`], which bounds what is in
//! flight. The binlog path's progress is a [`BinlogPosition`].

pub mod binlog;
mod handoff;
mod position;
pub mod sweep;

pub use handoff::{Admitted, Budget, Handoff, InFlight, PipelineClosed};
pub use position::{BinlogPosition, OwedSweep};

use crate::event::OutboxEvent;

/// One batch for the pipeline: a committed source transaction, or rows the sweep claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceTx {
    /// Outbox rows in source order (binlog order, or id order for the sweep).
    pub events: Vec<OutboxEvent>,
    pub origin: Origin,
}

/// Where a [`SourceTx`] came from, which decides how its failures are retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Read from the binlog: a restart may resume at `end` once this transaction and
    /// every earlier one are acknowledged. Failed sends are retried in place.
    Binlog { end: BinlogPosition },
    /// The first events of a binlog transaction too large to hold whole: handed on
    /// before its commit event is read, which is safe because a transaction reaches
    /// the binlog only when it commits. Its end comes with its last part; a reconnect
    /// reads the transaction again whole (duplicates, never loss).
    BinlogPart,
    /// Claimed by the sweep (status SENDING, leased): one send attempt each, then the
    /// retry is booked in the table. `retry_counts[i]` is `events[i]`'s failures so far.
    Sweep { retry_counts: Vec<u32> },
    /// No events: the binlog path lost its position and goes on from another one, so
    /// nothing between will be read again (what per-queue progress points at included).
    Moved,
}

impl SourceTx {
    /// The binlog path moved past what it had not read (see [`Origin::Moved`]).
    pub fn moved() -> Self {
        Self { events: Vec::new(), origin: Origin::Moved }
    }

    /// A committed binlog transaction ending at `end`.
    pub fn binlog(events: Vec<OutboxEvent>, end: BinlogPosition) -> Self {
        Self { events, origin: Origin::Binlog { end } }
    }

    /// The binlog position after this transaction; `None` for a sweep batch.
    pub fn end(&self) -> Option<&BinlogPosition> {
        match &self.origin {
            Origin::Binlog { end } => Some(end),
            Origin::BinlogPart | Origin::Sweep { .. } | Origin::Moved => None,
        }
    }
}
