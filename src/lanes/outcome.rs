//! What travels to and from the lanes: an event with its batch and retry kind on the
//! way in, and how each event ended on the way back.

use std::time::SystemTime;

use crate::event::OutboxEvent;

/// An event on its way to a lane, tagged with its source batch.
#[derive(Debug)]
pub struct LaneEvent {
    pub tx_seq: u64,
    pub event: OutboxEvent,
    pub attempts: Attempts,
}

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
    /// The broker answered SEND_OK at `at`; `msg_id` is the message's id.
    Sent { msg_id: String, at: SystemTime },
    /// Durably marked FAILED in the outbox table.
    Failed,
    /// A swept row whose attempt failed: durably back to PENDING with its next retry time.
    Deferred,
}

/// The end of one event, sent back to the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneReport {
    pub tx_seq: u64,
    pub id: u64,
    pub outcome: Outcome,
}

/// One event a lane is responsible for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub tx_seq: u64,
    /// The outbox row's id.
    pub id: u64,
    pub attempts: Attempts,
}

impl Target {
    pub fn of(event: &LaneEvent) -> Self {
        Self { tx_seq: event.tx_seq, id: event.event.id, attempts: event.attempts }
    }
}
