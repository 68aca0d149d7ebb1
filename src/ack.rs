//! The ack tracker: the unbroken acknowledged prefix of source transactions.
//!
//! Lanes acknowledge events out of order (queue 3 may finish before queue 1). The
//! checkpoint may only move to the end of a transaction when that transaction and
//! every earlier one are fully acknowledged (SEND_OK, or durably FAILED): otherwise a
//! crash would resume past an event that never reached the broker (invariant I3).
//! Sweep batches have no position (`end` is `None`): they hold the watermark back
//! like any other transaction but never move it.

use std::collections::VecDeque;

/// Tracks transactions in source order; `P` is the position a transaction ends at.
#[derive(Debug)]
pub struct AckTracker<P> {
    /// Sequence number of `pending[0]`.
    first_seq: u64,
    pending: VecDeque<Pending<P>>,
}

#[derive(Debug)]
struct Pending<P> {
    remaining: usize,
    /// In-flight permits the transaction holds, given back when it leaves the tracker.
    permits: usize,
    end: Option<P>,
}

/// What a call to [`AckTracker::advance`] released.
#[derive(Debug, PartialEq, Eq)]
pub struct Advance<P> {
    /// Newest end in the part of the acknowledged prefix released by this call.
    pub end: Option<P>,
    /// Permits held by the transactions that left the tracker.
    pub permits: usize,
}

impl<P> AckTracker<P> {
    /// A tracker whose first registered transaction will get sequence `first_seq`.
    pub fn new(first_seq: u64) -> Self {
        Self { first_seq, pending: VecDeque::new() }
    }

    /// Registers the next transaction (it gets the next sequence number, returned)
    /// with `events` unacknowledged events and `permits` in-flight permits, ending at
    /// `end` (`None`: the transaction has no position of its own).
    pub fn register(&mut self, events: usize, permits: usize, end: Option<P>) -> u64 {
        let seq = self.first_seq + self.pending.len() as u64;
        self.pending.push_back(Pending { remaining: events, permits, end });
        seq
    }

    /// Acknowledges one event of transaction `seq`. Unknown or already complete
    /// sequence numbers are a bug in the caller and are ignored with a debug assert.
    pub fn ack(&mut self, seq: u64) {
        let index = seq.checked_sub(self.first_seq).and_then(|i| usize::try_from(i).ok());
        match index.and_then(|i| self.pending.get_mut(i)) {
            Some(tx) if tx.remaining > 0 => tx.remaining -= 1,
            _ => debug_assert!(false, "ack for unknown or complete transaction {seq}"),
        }
    }

    /// Pops the fully acknowledged prefix: the newest end among its transactions (if
    /// any has one) and the permits its transactions held.
    pub fn advance(&mut self) -> Advance<P> {
        let mut released = Advance { end: None, permits: 0 };
        while self.pending.front().is_some_and(|tx| tx.remaining == 0) {
            if let Some(tx) = self.pending.pop_front() {
                released.end = tx.end.or(released.end);
                released.permits += tx.permits;
                self.first_seq += 1;
            }
        }
        released
    }

    /// Transactions registered but not yet in the acknowledged prefix.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{AckTracker, Advance};

    #[test]
    fn watermark_waits_for_the_oldest_transaction() {
        let mut t = AckTracker::new(0);
        let a = t.register(2, 2, Some("a"));
        let b = t.register(1, 1, Some("b"));
        let c = t.register(1, 1, Some("c"));
        t.ack(c);
        t.ack(b);
        assert_eq!(t.advance().end, None, "a is not acknowledged yet");
        t.ack(a);
        assert_eq!(t.advance().end, None, "a has one event left");
        t.ack(a);
        assert_eq!(t.advance(), Advance { end: Some("c"), permits: 4 }, "a, b and c are all done: jump to c's end");
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn out_of_order_acks_across_lanes_only_release_the_unbroken_prefix() {
        let mut t = AckTracker::new(100);
        let seqs: Vec<u64> = (0..5).map(|i| t.register(1, 1, Some(i))).collect();
        assert_eq!(seqs, [100, 101, 102, 103, 104]);
        for seq in [104, 102, 100] {
            t.ack(seq);
        }
        assert_eq!(t.advance().end, Some(0));
        t.ack(101);
        assert_eq!(t.advance().end, Some(2));
        t.ack(103);
        assert_eq!(t.advance(), Advance { end: Some(4), permits: 2 }, "103 and 104 leave together");
        assert_eq!(t.advance(), Advance { end: None, permits: 0 });
    }

    #[test]
    fn transactions_without_outbox_events_complete_at_once() {
        let mut t = AckTracker::new(0);
        let a = t.register(1, 1, Some("a"));
        t.register(0, 0, Some("b"));
        assert_eq!(t.advance(), Advance { end: None, permits: 0 });
        t.ack(a);
        assert_eq!(t.advance().end, Some("b"));
    }

    #[test]
    fn sweep_batches_hold_the_watermark_back_but_never_move_it() {
        let mut t = AckTracker::new(0);
        let a = t.register(1, 1, Some("a"));
        let swept = t.register(2, 2, None);
        t.ack(a);
        assert_eq!(t.advance(), Advance { end: Some("a"), permits: 1 });
        t.register(0, 0, Some("b"));
        assert_eq!(t.advance().end, None, "b waits for the sweep batch before it");
        t.ack(swept);
        t.ack(swept);
        assert_eq!(t.advance(), Advance { end: Some("b"), permits: 2 });
        t.register(1, 1, None);
        t.ack(3);
        assert_eq!(t.advance(), Advance { end: None, permits: 1 }, "a sweep batch alone releases permits only");
    }

    #[test]
    fn an_empty_transaction_first_advances_immediately() {
        let mut t = AckTracker::new(0);
        t.register(0, 0, Some("x"));
        assert_eq!(t.advance().end, Some("x"));
    }
}
