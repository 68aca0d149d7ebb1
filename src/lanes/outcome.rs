//! What travels to and from the lanes: an event with its batch and retry kind on the
//! way in, and how each event ended on the way back.

use std::time::{Instant, SystemTime};

use crate::event::OutboxEvent;
use crate::store::{RowKey, Sent};

/// An event on its way to a lane, tagged with its source batch.
#[derive(Debug)]
pub struct LaneEvent {
    pub tx_seq: u64,
    pub event: OutboxEvent,
    pub attempts: Attempts,
    /// When the coordinator took it in: where its time in the relay after reading starts.
    pub routed: Instant,
    /// The queue a binlog event was routed to, whose progress its report moves; none
    /// for a swept row (the binlog does not bring it back) or a topic not on the cluster.
    pub slot: Option<QueueSlot>,
}

/// Which of the coordinator's queues an event went to (see `coordinator::replay`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSlot(pub u32);

/// How a failed send of an event is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempts {
    /// In the lane, holding the queue (binlog events).
    InPlace,
    /// Once here; further attempts are booked in the table (swept rows, which had
    /// failed `failures_before` times already).
    Once { failures_before: u32 },
}

impl Attempts {
    pub(super) fn same_kind(self, other: Self) -> bool {
        matches!((self, other), (Self::InPlace, Self::InPlace) | (Self::Once { .. }, Self::Once { .. }))
    }
}

/// How an event ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The broker answered SEND_OK: the row to mark SENT, with its message id and
    /// when the answer came.
    Sent(Sent),
    /// Durably marked FAILED in the outbox table.
    Failed,
    /// A swept row whose attempt failed for an unknown reason: durably back to
    /// PENDING with its next retry time.
    Deferred,
    /// Not sent because an earlier event of its key is FAILED and the key is held:
    /// the row is (back to) PENDING, for the sweep once an operator releases the key.
    Held,
}

/// The end of one event, sent back to the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneReport {
    pub tx_seq: u64,
    pub outcome: Outcome,
    /// The event's row id, and its queue's slot for a binlog event.
    pub id: u64,
    pub slot: Option<QueueSlot>,
}

impl LaneEvent {
    /// Which row it is, for write-backs.
    pub fn row(&self) -> RowKey<'_> {
        RowKey { id: self.event.id, event_id: &self.event.event_id }
    }

    /// The report of its `outcome`.
    pub fn report(&self, outcome: Outcome) -> LaneReport {
        LaneReport { tx_seq: self.tx_seq, outcome, id: self.event.id, slot: self.slot }
    }

    /// The report of its SEND_OK at `at` as `msg_id`; the event itself is done with.
    pub fn sent(self, msg_id: String, at: SystemTime) -> LaneReport {
        let (id, slot) = (self.event.id, self.slot);
        let sent = Sent { id, event_id: self.event.event_id, msg_id, at };
        LaneReport { tx_seq: self.tx_seq, outcome: Outcome::Sent(sent), id, slot }
    }

    /// Whether it came from the sweep (claimed, leased) rather than the binlog.
    pub fn swept(&self) -> bool {
        matches!(self.attempts, Attempts::Once { .. })
    }
}
