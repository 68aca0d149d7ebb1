//! The GTID position after the last transaction read, stored with the checkpoint.
//!
//! MariaDB: one `domain-server-seq` per replication domain, the format of
//! `@@gtid_binlog_pos` and `@slave_connect_state`. MySQL: the last transaction's
//! `uuid:gno`, kept for operators (the relay resumes MySQL by file and position).

use std::collections::BTreeMap;

use super::mariadb::MariaGtid;

/// GTID state as transactions are read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GtidState {
    mariadb: BTreeMap<u32, (u32, u64)>,
    mysql_last: Option<String>,
}

impl GtidState {
    /// Parses a MariaDB GTID list (`0-1-100,1-2-7`) or a MySQL GTID; empty gives the empty state.
    pub fn parse(text: &str) -> Self {
        let mut state = Self::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let numbers: Vec<&str> = part.split('-').collect();
            match numbers.as_slice() {
                [d, s, n] => {
                    if let (Ok(d), Ok(s), Ok(n)) = (d.parse(), s.parse(), n.parse()) {
                        state.mariadb.insert(d, (s, n));
                    }
                }
                _ => state.mysql_last = Some(part.to_owned()),
            }
        }
        state
    }

    pub fn set_mariadb(&mut self, gtid: MariaGtid) {
        self.mariadb.insert(gtid.domain, (gtid.server, gtid.seq));
    }

    pub fn set_mysql(&mut self, sid: [u8; 16], gno: u64) {
        let hex: String = sid.iter().map(|b| format!("{b:02x}")).collect();
        let uuid = format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32]);
        self.mysql_last = Some(format!("{uuid}:{gno}"));
    }

    /// Whether this state includes every transaction `other` names: for MariaDB, each
    /// of `other`'s domains at the same or a later sequence number. MySQL states keep
    /// only the last GTID and cannot be compared.
    pub fn covers(&self, other: &GtidState) -> bool {
        !self.mariadb.is_empty()
            && other.mysql_last.is_none()
            && other
                .mariadb
                .iter()
                .all(|(domain, (_, seq))| self.mariadb.get(domain).is_some_and(|(_, mine)| mine >= seq))
    }

    /// Whether this is a MariaDB GTID position a reader can connect with.
    pub fn is_mariadb(&self) -> bool {
        !self.mariadb.is_empty()
    }

    /// The state as text, or `None` when the server has no GTIDs.
    pub fn render(&self) -> Option<String> {
        if !self.mariadb.is_empty() {
            let parts: Vec<String> = self.mariadb.iter().map(|(d, (s, n))| format!("{d}-{s}-{n}")).collect();
            return Some(parts.join(","));
        }
        self.mysql_last.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(!GtidState::parse("uuid:5").covers(&GtidState::parse("uuid:4")), "MySQL: not comparable");
    }

    #[test]
    fn mysql_gtid_renders_as_uuid_and_number() {
        let mut state = GtidState::default();
        state.set_mysql(
            [0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42, 0x95, 0x62],
            23,
        );
        assert_eq!(state.render().as_deref(), Some("3e11fa47-71ca-11e1-9e33-c80aa9429562:23"));
    }
}
