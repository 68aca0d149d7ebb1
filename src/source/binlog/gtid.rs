//! The GTID position after the last transaction read, stored with the checkpoint.
//!
//! MariaDB: one `domain-server-seq` per replication domain, the format of
//! `@@gtid_binlog_pos` and `@slave_connect_state`. MySQL: the executed GTID set
//! (`uuid:1-100:105,uuid2:1-7`, the format of `@@gtid_executed`), grown by each
//! transaction's GTID, which `COM_BINLOG_DUMP_GTID` resumes from. MySQL 8.4 adds
//! tagged GTIDs (`uuid:tag:7`): a tag names a sequence of its own beside the
//! untagged one of the same uuid, written after it (`uuid:1-5:batch:1-3`). Either way the
//! position means the same on every server of the replication topology, so the relay
//! can resume on another replica or the primary.

use std::collections::BTreeMap;
use std::fmt;

use mysql_async::{GnoInterval, Sid};
use mysql_common::packets::Tag;

use super::mariadb::MariaGtid;

/// Room for a rendered state without growing: a few MariaDB domains, or a MySQL
/// uuid with some intervals.
const RENDERED_CAPACITY: usize = 64;

/// A MySQL server uuid.
type Uuid = [u8; 16];

/// A MySQL transaction source: a uuid and a tag, empty when untagged.
type Tsid = (Uuid, String);

/// GTID state as transactions are read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GtidState {
    mariadb: BTreeMap<u32, (u32, u64)>,
    /// Per transaction source, the executed transaction numbers as sorted,
    /// disjoint, half-open intervals `[start, end)`.
    mysql: BTreeMap<Tsid, Vec<(u64, u64)>>,
}

impl GtidState {
    /// Parses a MariaDB GTID list (`0-1-100,1-2-7`) or a MySQL GTID set
    /// (`uuid:1-5:7:tag:1-3,uuid:1-3`); what it cannot read is left out; empty gives
    /// the empty state.
    pub fn parse(text: &str) -> Self {
        let mut state = Self::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let numbers: Vec<&str> = part.split('-').collect();
            match numbers.as_slice() {
                [d, s, n] if [d, s, n].iter().all(|x| x.bytes().all(|b| b.is_ascii_digit())) => {
                    if let (Ok(d), Ok(s), Ok(n)) = (d.parse(), s.parse(), n.parse()) {
                        state.mariadb.insert(d, (s, n));
                    }
                }
                _ => state.parse_mysql(part),
            }
        }
        state
    }

    /// One `uuid:interval[:interval...][:tag:interval...]` of a MySQL set (inclusive
    /// `a-b` or single `a`); a tag applies to the intervals after it.
    fn parse_mysql(&mut self, part: &str) {
        let mut pieces = part.split(':').map(str::trim);
        let Some(uuid) = pieces.next().and_then(|u| uuid::Uuid::parse_str(u).ok()) else { return };
        let mut tag = String::new();
        for piece in pieces {
            if piece.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
                tag = piece.to_ascii_lowercase();
                continue;
            }
            let bounds: Option<(u64, u64)> = match piece.split_once('-') {
                Some((a, b)) => a.trim().parse().ok().zip(b.trim().parse().ok()),
                None => piece.parse().ok().map(|a| (a, a)),
            };
            if let Some((first, last)) = bounds.filter(|(a, b)| a <= b) {
                self.add_mysql((*uuid.as_bytes(), tag.clone()), first, last + 1);
            }
        }
    }

    pub fn set_mariadb(&mut self, gtid: MariaGtid) {
        self.mariadb.insert(gtid.domain, (gtid.server, gtid.seq));
    }

    /// Adds the MySQL transaction `sid:tag:gno` (`tag` empty when untagged) to the
    /// executed set. Without a set to start from (a position saved by file and
    /// number only) nothing is tracked: the transactions seen since would make a set
    /// that claims the history before them unexecuted, and a resume from it would
    /// send all of it again.
    pub fn set_mysql(&mut self, sid: Uuid, tag: &str, gno: u64) {
        if self.is_mysql() {
            self.add_mysql((sid, tag.to_ascii_lowercase()), gno, gno + 1);
        }
    }

    /// Adds `[start, end)` of `tsid`, merging touching and overlapping intervals.
    fn add_mysql(&mut self, tsid: Tsid, start: u64, end: u64) {
        let intervals = self.mysql.entry(tsid).or_default();
        intervals.push((start, end));
        intervals.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(intervals.len());
        for &(s, e) in intervals.iter() {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        *intervals = merged;
    }

    /// Whether this state includes every transaction `other` names: MariaDB, each of
    /// `other`'s domains at the same or a later sequence number; MySQL, every
    /// transaction of `other`'s set. States of different families never cover each other.
    pub fn covers(&self, other: &GtidState) -> bool {
        if self.is_mariadb() && other.mysql.is_empty() {
            return other
                .mariadb
                .iter()
                .all(|(domain, (_, seq))| self.mariadb.get(domain).is_some_and(|(_, mine)| mine >= seq));
        }
        self.is_mysql()
            && other.mariadb.is_empty()
            && other.mysql.iter().all(|(tsid, theirs)| {
                let mine = self.mysql.get(tsid).map(Vec::as_slice).unwrap_or_default();
                theirs.iter().all(|&(s, e)| mine.iter().any(|&(ms, me)| ms <= s && e <= me))
            })
    }

    /// Whether this is a MariaDB GTID position a reader can connect with.
    pub fn is_mariadb(&self) -> bool {
        !self.mariadb.is_empty()
    }

    /// Whether this is a MySQL executed set a reader can connect with.
    pub fn is_mysql(&self) -> bool {
        !self.mysql.is_empty()
    }

    /// The MySQL set as `COM_BINLOG_DUMP_GTID` takes it. A tag read from a set or an
    /// event always was a valid one; one that is not is left out, like any part of
    /// a set that cannot be read.
    pub fn mysql_sids(&self) -> Vec<Sid<'static>> {
        self.mysql
            .iter()
            .filter_map(|((uuid, tag), intervals)| {
                let sid =
                    Sid::new(*uuid).with_intervals(intervals.iter().map(|&(s, e)| GnoInterval::new(s, e)).collect());
                if tag.is_empty() {
                    return Some(sid);
                }
                Tag::new(tag.clone()).ok().map(|tag| sid.with_tag(tag))
            })
            .collect()
    }

    /// The state as text, or `None` when the server has no GTIDs. Rendered for every
    /// transaction read, so it is written into one string without parts to join.
    pub fn render(&self) -> Option<String> {
        if self.mariadb.is_empty() && self.mysql.is_empty() {
            return None;
        }
        let mut text = String::with_capacity(RENDERED_CAPACITY);
        // Writing to a String cannot fail.
        let _ = if self.is_mariadb() { self.write_mariadb(&mut text) } else { self.write_mysql(&mut text) };
        Some(text)
    }

    fn write_mariadb(&self, out: &mut impl fmt::Write) -> fmt::Result {
        for (i, (domain, (server, seq))) in self.mariadb.iter().enumerate() {
            let separator = if i == 0 { "" } else { "," };
            write!(out, "{separator}{domain}-{server}-{seq}")?;
        }
        Ok(())
    }

    /// Sorted by uuid, then tag (the untagged one first): one text per uuid.
    fn write_mysql(&self, out: &mut impl fmt::Write) -> fmt::Result {
        let mut last_uuid = None;
        for ((uuid, tag), intervals) in &self.mysql {
            if last_uuid != Some(uuid) {
                let separator = if last_uuid.is_none() { "" } else { "," };
                write!(out, "{separator}{}", uuid::Uuid::from_bytes(*uuid).hyphenated())?;
                last_uuid = Some(uuid);
            }
            if !tag.is_empty() {
                write!(out, ":{tag}")?;
            }
            for &(s, e) in intervals {
                if e == s + 1 {
                    write!(out, ":{s}")?;
                } else {
                    write!(out, ":{s}-{}", e - 1)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SID: [u8; 16] =
        [0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42, 0x95, 0x62];

    #[test]
    fn mariadb_state_round_trips_and_updates_per_domain() {
        let mut state = GtidState::parse("0-1-100,1-2-7");
        state.set_mariadb(MariaGtid { domain: 0, server: 1, seq: 101 });
        assert_eq!(state.render().as_deref(), Some("0-1-101,1-2-7"));
        assert_eq!(GtidState::parse("").render(), None);
    }

    #[test]
    fn a_state_covers_another_when_every_domain_is_at_least_as_far() {
        let later = GtidState::parse("0-1-100,1-2-7");
        assert!(later.covers(&GtidState::parse("0-1-99,1-2-7")));
        assert!(later.covers(&GtidState::parse("0-3-100")), "the server id of a GTID does not order it");
        assert!(!later.covers(&GtidState::parse("0-1-101")));
        assert!(!later.covers(&GtidState::parse("2-1-1")), "a domain it has not seen");
        assert!(!later.covers(&GtidState::parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1")), "another family");
    }

    #[test]
    fn a_mysql_set_grows_by_each_transaction_and_renders_like_gtid_executed() {
        let mut unknown_start = GtidState::default();
        unknown_start.set_mysql(SID, "", 6);
        assert_eq!(unknown_start.render(), None, "no set to grow: nothing is claimed");
        let mut state =
            GtidState::parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7,\n 00000000-0000-0000-0000-000000000001:1-3");
        assert_eq!(
            state.render().as_deref(),
            Some("00000000-0000-0000-0000-000000000001:1-3,3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7"),
            "sorted by uuid, separate intervals apart"
        );
        state.set_mysql(SID, "", 6);
        state.set_mysql(SID, "", 8);
        assert_eq!(
            state.render().as_deref(),
            Some("00000000-0000-0000-0000-000000000001:1-3,3e11fa47-71ca-11e1-9e33-c80aa9429562:1-8")
        );
        let sids = state.mysql_sids();
        assert_eq!(sids.len(), 2);
        assert_eq!(
            sids[1].intervals().iter().map(|i| (i.start(), i.end())).collect::<Vec<_>>(),
            [(1, 9)],
            "half-open on the wire"
        );
    }

    #[test]
    fn a_mysql_set_covers_another_when_it_holds_each_of_its_transactions() {
        let executed = GtidState::parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100");
        assert!(executed.covers(&GtidState::parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-40:50")));
        assert!(!executed.covers(&GtidState::parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-101")));
        assert!(!executed.covers(&GtidState::parse("00000000-0000-0000-0000-000000000001:1")));
        assert!(!executed.covers(&GtidState::parse("0-1-5")), "another family");
    }

    #[test]
    fn tagged_gtids_are_sequences_of_their_own_written_after_the_untagged_one() {
        let mut state = GtidState::parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:Batch:1-2");
        state.set_mysql(SID, "batch", 3);
        state.set_mysql(SID, "audit", 1);
        state.set_mysql(SID, "", 6);
        let text = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-6:audit:1:batch:1-3";
        assert_eq!(state.render().as_deref(), Some(text));
        assert_eq!(GtidState::parse(text), state, "round trip");
        assert!(state.covers(&GtidState::parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:batch:2")));
        assert!(!state.covers(&GtidState::parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:other:1")));
        let tags: Vec<Option<String>> =
            state.mysql_sids().iter().map(|sid| sid.tag().map(|t| t.as_str().to_owned())).collect();
        assert_eq!(tags, [None, Some("audit".to_owned()), Some("batch".to_owned())]);
    }
}
