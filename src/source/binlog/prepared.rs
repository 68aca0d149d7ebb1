//! Prepared XA transactions whose decision is not in the binlog yet.
//!
//! Their outbox rows wait here, by XID, until the group with `XA COMMIT` (then they
//! are handed on as a committed transaction) or `XA ROLLBACK` (then they are dropped)
//! is read. The decision group carries no rows, so a checkpoint past a prepare would
//! lose them if the relay restarted before the decision: every position the decoder
//! reports is therefore held back at the start of the oldest undecided prepare. A
//! restart or reconnect reads from there again and holds the prepare again; the
//! transactions read after it are handed on a second time (duplicates, never loss).

use super::xa::Xid;
use crate::event::OutboxEvent;
use crate::source::BinlogPosition;

/// One prepared transaction's rows and where its group started.
#[derive(Debug)]
struct Prepared {
    xid: Xid,
    events: Vec<OutboxEvent>,
    start: BinlogPosition,
}

/// Undecided prepared transactions, oldest first.
#[derive(Debug, Default)]
pub struct PreparedXa {
    waiting: Vec<Prepared>,
}

impl PreparedXa {
    /// Holds the rows of `xid`, prepared in the group that started at `start`.
    pub fn hold(&mut self, xid: Xid, events: Vec<OutboxEvent>, start: BinlogPosition) {
        self.waiting.push(Prepared { xid, events, start });
    }

    /// `xid` was decided: its rows (empty when none were held for it).
    pub fn decide(&mut self, xid: &Xid) -> Option<Vec<OutboxEvent>> {
        let at = self.waiting.iter().position(|p| p.xid == *xid)?;
        Some(self.waiting.remove(at).events)
    }

    /// Rows held for undecided transactions.
    pub fn events(&self) -> usize {
        self.waiting.iter().map(|p| p.events.len()).sum()
    }

    /// The position to report for a group ending at `end`: `end` itself, or the start
    /// of the oldest undecided prepare (with `end`'s commit time: everything committed
    /// until then has been read).
    pub fn cap(&self, end: BinlogPosition) -> BinlogPosition {
        match self.waiting.first() {
            Some(oldest) => BinlogPosition { commit_time: end.commit_time, ..oldest.start.clone() },
            None => end,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(pos: u64, commit_time: u32) -> BinlogPosition {
        BinlogPosition {
            file: "bin.000001".into(),
            pos,
            gtid: Some(format!("0-1-{pos}")),
            commit_time: Some(commit_time),
        }
    }

    fn xid(name: &str) -> Xid {
        Xid { format_id: 1, gtrid: name.as_bytes().to_vec(), bqual: Vec::new() }
    }

    fn event(id: u64) -> OutboxEvent {
        OutboxEvent::for_test(id)
    }

    #[test]
    fn positions_stay_at_the_oldest_undecided_prepare() {
        let mut prepared = PreparedXa::default();
        assert_eq!(prepared.cap(at(500, 9)), at(500, 9), "nothing undecided");
        prepared.hold(xid("a"), vec![event(1), event(2)], at(100, 1));
        prepared.hold(xid("b"), vec![event(3)], at(200, 2));
        assert_eq!(prepared.events(), 3);
        let held = BinlogPosition { commit_time: Some(9), ..at(100, 1) };
        assert_eq!(prepared.cap(at(500, 9)), held);

        assert_eq!(prepared.decide(&xid("a")).map(|e| e.len()), Some(2));
        assert_eq!(prepared.cap(at(600, 10)), BinlogPosition { commit_time: Some(10), ..at(200, 2) });
        assert_eq!(prepared.decide(&xid("a")), None, "decided once");
        assert_eq!(prepared.decide(&xid("b")).map(|e| e.len()), Some(1));
        assert_eq!((prepared.events(), prepared.cap(at(700, 11))), (0, at(700, 11)));
    }
}
