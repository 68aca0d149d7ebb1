//! The ack tracker: the unbroken acknowledged prefix of source transactions.
//!
//! Lanes acknowledge events out of order (queue 3 may finish before queue 1). The
//! checkpoint may only move to the end of a transaction when that transaction and
//! every earlier one are fully acknowledged (SEND_OK, or durably FAILED): otherwise a
//! crash would resume past an event that never reached the broker.
//! Sweep batches have no position (`end` is `None`): they hold the watermark back
//! like any other transaction but never move it. Each transaction may hold a value
//! (`H`, its share of the in-flight budget) that is dropped when it leaves the
//! tracker, so whatever it holds is given back exactly then.

use std::collections::VecDeque;

/// Tracks transactions in source order; `P` is the position a transaction ends at,
/// `H` what it holds until it leaves the tracker.
#[derive(Debug)]
pub struct AckTracker<P, H = ()> {
    /// Sequence number of `pending[0]`.
    first_seq: u64,
    pending: VecDeque<Pending<P, H>>,
}

#[derive(Debug)]
struct Pending<P, H> {
    remaining: usize,
    /// Dropped when the transaction leaves the tracker.
    _hold: H,
    end: Option<P>,
}

impl<P, H> AckTracker<P, H> {
    /// A tracker whose first registered transaction will get sequence `first_seq`.
    pub fn new(first_seq: u64) -> Self {
        Self { first_seq, pending: VecDeque::new() }
    }

    /// Registers the next transaction (it gets the next sequence number, returned)
    /// with `events` unacknowledged events, holding `hold` until it leaves, ending at
    /// `end` (`None`: the transaction has no position of its own).
    pub fn register(&mut self, events: usize, hold: H, end: Option<P>) -> u64 {
        let seq = self.next_seq();
        self.pending.push_back(Pending { remaining: events, _hold: hold, end });
        seq
    }

    /// The sequence number the next registered transaction gets.
    pub fn next_seq(&self) -> u64 {
        self.first_seq + self.pending.len() as u64
    }

    /// The sequence number of the oldest transaction not in the acknowledged prefix
    /// (the next one to register when every one is).
    pub fn first_pending(&self) -> u64 {
        self.first_seq
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

    /// Pops the fully acknowledged prefix (dropping what its transactions held) and
    /// returns the newest end among its transactions, if any has one.
    #[cfg(test)]
    pub fn advance(&mut self) -> Option<P> {
        let mut newest = None;
        self.advance_each(|end| newest = Some(end));
        newest
    }

    /// Pops the fully acknowledged prefix (dropping what its transactions held),
    /// handing each end among its transactions to `each`, oldest first.
    pub fn advance_each(&mut self, mut each: impl FnMut(P)) {
        while self.pending.front().is_some_and(|tx| tx.remaining == 0) {
            if let Some(tx) = self.pending.pop_front() {
                if let Some(end) = tx.end {
                    each(end);
                }
                self.first_seq += 1;
            }
        }
    }

    /// Transactions registered but not yet in the acknowledged prefix.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::AckTracker;

    #[test]
    fn watermark_waits_for_the_oldest_transaction() {
        let mut t = AckTracker::new(0);
        let a = t.register(2, (), Some("a"));
        let b = t.register(1, (), Some("b"));
        let c = t.register(1, (), Some("c"));
        t.ack(c);
        t.ack(b);
        assert_eq!(t.advance(), None, "a is not acknowledged yet");
        t.ack(a);
        assert_eq!(t.advance(), None, "a has one event left");
        t.ack(a);
        assert_eq!(t.advance(), Some("c"), "a, b and c are all done: jump to c's end");
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn out_of_order_acks_across_lanes_only_release_the_unbroken_prefix() {
        let mut t = AckTracker::new(100);
        let seqs: Vec<u64> = (0..5).map(|i| t.register(1, (), Some(i))).collect();
        assert_eq!(seqs, [100, 101, 102, 103, 104]);
        for seq in [104, 102, 100] {
            t.ack(seq);
        }
        assert_eq!(t.advance(), Some(0));
        t.ack(101);
        assert_eq!(t.advance(), Some(2));
        t.ack(103);
        assert_eq!(t.advance(), Some(4), "103 and 104 leave together");
        assert_eq!(t.advance(), None);
    }

    #[test]
    fn every_end_of_the_acknowledged_prefix_is_handed_on_in_order() {
        let mut t = AckTracker::new(0);
        let a = t.register(1, (), Some("a"));
        t.register(0, (), None);
        let c = t.register(1, (), Some("c"));
        let d = t.register(1, (), Some("d"));
        t.ack(c);
        t.ack(a);
        let mut ends = Vec::new();
        t.advance_each(|end| ends.push(end));
        assert_eq!(ends, ["a", "c"], "d is not acknowledged: it stays");
        t.ack(d);
        assert_eq!(t.advance(), Some("d"));
    }

    #[test]
    fn transactions_without_outbox_events_complete_at_once() {
        let mut t = AckTracker::new(0);
        let a = t.register(1, (), Some("a"));
        t.register(0, (), Some("b"));
        assert_eq!(t.advance(), None);
        t.ack(a);
        assert_eq!(t.advance(), Some("b"));
    }

    #[test]
    fn sweep_batches_hold_the_watermark_back_but_never_move_it() {
        let mut t = AckTracker::new(0);
        let a = t.register(1, (), Some("a"));
        let swept = t.register(2, (), None);
        t.ack(a);
        assert_eq!(t.advance(), Some("a"));
        t.register(0, (), Some("b"));
        assert_eq!(t.advance(), None, "b waits for the sweep batch before it");
        t.ack(swept);
        t.ack(swept);
        assert_eq!(t.advance(), Some("b"));
        t.register(1, (), None);
        t.ack(3);
        assert_eq!(t.advance(), None, "a sweep batch alone never moves the end");
    }

    #[test]
    fn an_empty_transaction_first_advances_immediately() {
        let mut t = AckTracker::new(0);
        t.register(0, (), Some("x"));
        assert_eq!(t.advance(), Some("x"));
    }

    #[test]
    fn what_a_transaction_holds_is_dropped_when_it_leaves_the_tracker() {
        let budget = Arc::new(());
        let mut t: AckTracker<&str, Arc<()>> = AckTracker::new(0);
        let a = t.register(1, Arc::clone(&budget), Some("a"));
        let b = t.register(1, Arc::clone(&budget), Some("b"));
        t.ack(b);
        assert_eq!(t.advance(), None);
        assert_eq!(Arc::strong_count(&budget), 3, "both still held: b waits for a");
        t.ack(a);
        assert_eq!(t.advance(), Some("b"));
        assert_eq!(Arc::strong_count(&budget), 1, "both given back");
    }
}
