//! The event group being read: its outbox rows, what can still undo them, and which
//! of them may be handed on before the group ends.
//!
//! A committed InnoDB transaction reaches the binlog whole, at commit, so its rows
//! may go ahead in parts before its end event is read. Some rows read inside a
//! group can still be undone, and those are held until the group ends:
//! - an XA transaction's rows: written at XA PREPARE, decided by a later group;
//! - on MariaDB, a group that touched a non-transactional table (its GTID event lacks
//!   the transactional flag) may end in `ROLLBACK`, or contain `ROLLBACK TO` a
//!   savepoint, which undoes every row after that `SAVEPOINT`. A savepoint set before
//!   the group wrote anything is not logged at all, so any row of such a group may
//!   be undone;
//! - rows after a logged `SAVEPOINT`, on any server.
//!
//! A group whose held rows outgrow the decoder's limit is *spilled*: its rows are
//! dropped and left to the sweep, which finds them in the table once (and only if)
//! they are committed.

use std::fmt;

use super::statement::SavepointName;
use super::xa::Xid;
use crate::event::OutboxEvent;

/// How the open group can end, which decides whether its rows may go ahead.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Ending {
    /// Written at commit: rows may go ahead in parts (up to the first savepoint).
    #[default]
    Commits,
    /// May end in ROLLBACK or roll back to a savepoint: rows are held to the end.
    MayRollBack,
    /// An XA transaction: rows are held to its prepare, then until it is decided.
    Xa(Xid),
}

impl fmt::Display for Ending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ending::Commits => f.write_str("rows after a SAVEPOINT"),
            Ending::MayRollBack => f.write_str("a group that touched a non-transactional table"),
            Ending::Xa(xid) => write!(f, "XA transaction {xid}, undecided until its XA COMMIT"),
        }
    }
}

/// A savepoint and how many rows the group had when it was set.
#[derive(Debug, Clone)]
struct Savepoint {
    name: SavepointName,
    rows: usize,
}

/// The group being read.
#[derive(Debug, Default)]
pub struct OpenGroup {
    events: Vec<OutboxEvent>,
    ending: Ending,
    /// In the order they were set; each one's `rows` is at least the one before's.
    savepoints: Vec<Savepoint>,
    spilled: bool,
    /// Opened by `BEGIN`: a statement inside it (statement-logged DML) is part of it.
    begun: bool,
}

impl OpenGroup {
    /// A new group begins: what an unfinished one left is dropped (a group cut by a
    /// reconnect is read again whole).
    pub fn start(&mut self, ending: Ending) {
        *self = Self { ending, ..Self::default() };
    }

    /// `BEGIN` (or a MariaDB GTID event that opens a transaction): a new group that
    /// keeps the ending its GTID event announced, and ends only at its commit or
    /// rollback.
    pub fn begin(&mut self) {
        let ending = std::mem::take(&mut self.ending);
        self.start(ending);
        self.begun = true;
    }

    pub fn push(&mut self, events: Vec<OutboxEvent>) {
        if !self.spilled {
            self.events.extend(events);
        }
    }

    /// Rows read so far and not handed on.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Between groups (no `BEGIN` read) with nothing held: a Query event here is a
    /// statement of its own (DDL), not part of a transaction.
    pub fn is_idle(&self) -> bool {
        !self.begun
            && self.events.is_empty()
            && self.savepoints.is_empty()
            && !self.spilled
            && !matches!(self.ending, Ending::Xa(_))
    }

    /// Rows that can no longer be undone by anything later in the group.
    pub fn settled(&self) -> usize {
        match self.ending {
            Ending::Commits => self.savepoints.first().map_or(self.events.len(), |s| s.rows),
            Ending::MayRollBack | Ending::Xa(_) => 0,
        }
    }

    /// Rows that must wait for the group's end.
    pub fn held(&self) -> usize {
        self.events.len() - self.settled()
    }

    /// Takes the settled rows, to be handed on before the group ends.
    pub fn take_settled(&mut self) -> Vec<OutboxEvent> {
        let count = self.settled();
        for savepoint in &mut self.savepoints {
            savepoint.rows -= count;
        }
        self.events.drain(..count).collect()
    }

    /// `SAVEPOINT name`: one set again with the same name moves to here.
    pub fn savepoint(&mut self, name: SavepointName) {
        self.savepoints.retain(|s| s.name != name);
        self.savepoints.push(Savepoint { name, rows: self.events.len() });
    }

    /// `ROLLBACK TO name`: drops the rows after the savepoint and the savepoints set
    /// after it. A name the group never logged was set before the group wrote
    /// anything: everything the group holds is undone.
    pub fn rollback_to(&mut self, name: &SavepointName) {
        let kept = match self.savepoints.iter().position(|s| s.name == *name) {
            Some(at) => {
                self.savepoints.truncate(at + 1);
                self.savepoints[at].rows
            }
            None => {
                self.savepoints.clear();
                0
            }
        };
        self.events.truncate(kept);
    }

    /// `RELEASE SAVEPOINT name`: forgets it and the savepoints set after it.
    pub fn release(&mut self, name: &SavepointName) {
        if let Some(at) = self.savepoints.iter().position(|s| s.name == *name) {
            self.savepoints.truncate(at);
        }
    }

    /// Drops the group's rows, and any it reads later, leaving them to the sweep;
    /// returns how many were dropped.
    pub fn spill(&mut self) -> usize {
        self.spilled = true;
        self.savepoints.clear();
        std::mem::take(&mut self.events).len()
    }

    pub fn ending(&self) -> &Ending {
        &self.ending
    }

    /// The group ended: its rows, and a fresh state for the next group.
    pub fn finish(&mut self) -> Vec<OutboxEvent> {
        std::mem::take(self).events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: u64) -> OutboxEvent {
        OutboxEvent::for_test(id)
    }

    fn ids(events: &[OutboxEvent]) -> Vec<u64> {
        events.iter().map(|e| e.id).collect()
    }

    fn name(name: &str) -> SavepointName {
        SavepointName::new(name)
    }

    #[test]
    fn rollback_to_a_savepoint_drops_only_the_rows_after_it() {
        let mut group = OpenGroup::default();
        group.start(Ending::MayRollBack);
        group.push(vec![event(1)]);
        group.savepoint(name("a"));
        group.push(vec![event(2)]);
        group.savepoint(name("b"));
        group.push(vec![event(3)]);
        group.rollback_to(&name("b"));
        group.push(vec![event(4)]);
        group.rollback_to(&name("a"));
        group.push(vec![event(5)]);
        assert_eq!(ids(&group.finish()), [1, 5]);
    }

    #[test]
    fn a_savepoint_the_group_never_logged_undoes_all_its_rows() {
        let mut group = OpenGroup::default();
        group.start(Ending::MayRollBack);
        group.push(vec![event(1), event(2)]);
        group.rollback_to(&name("s0"));
        group.push(vec![event(3)]);
        assert_eq!(ids(&group.finish()), [3]);
    }

    #[test]
    fn a_released_savepoint_cannot_be_rolled_back_to() {
        let mut group = OpenGroup::default();
        group.push(vec![event(1)]);
        group.savepoint(name("a"));
        group.push(vec![event(2)]);
        group.release(&name("A"));
        assert_eq!(group.held(), 0, "nothing left that can be undone");
        assert_eq!(ids(&group.finish()), [1, 2]);
    }

    #[test]
    fn only_settled_rows_go_ahead_and_savepoints_follow_what_was_taken() {
        let mut group = OpenGroup::default();
        group.push(vec![event(1), event(2)]);
        group.savepoint(name("s"));
        group.push(vec![event(3)]);
        assert_eq!((group.settled(), group.held()), (2, 1));
        assert_eq!(ids(&group.take_settled()), [1, 2]);
        group.push(vec![event(4)]);
        group.rollback_to(&name("s"));
        assert_eq!(ids(&group.finish()), Vec::<u64>::new(), "3 and 4 were after the savepoint");

        for ending in [Ending::MayRollBack, Ending::Xa(Xid { format_id: 1, gtrid: b"x".to_vec(), bqual: vec![] })] {
            group.start(ending);
            group.push(vec![event(5)]);
            assert_eq!((group.settled(), group.held()), (0, 1), "{}", group.ending());
        }
    }

    #[test]
    fn a_spilled_group_holds_nothing_and_stays_busy() {
        let mut group = OpenGroup::default();
        group.start(Ending::MayRollBack);
        group.push(vec![event(1), event(2)]);
        assert_eq!(group.spill(), 2);
        group.push(vec![event(3)]);
        assert_eq!(group.len(), 0);
        assert!(!group.is_idle(), "a Query event inside a spilled group does not end it");
        assert!(group.finish().is_empty());
        assert!(group.is_idle(), "the next group starts fresh");
        group.push(vec![event(4)]);
        assert_eq!(group.len(), 1, "and keeps its rows");
    }
}
