//! MariaDB's own binlog events, which mysql_common does not know.
//!
//! With `@mariadb_slave_capability = 4` the server sends real GTID events (0xA2)
//! instead of fake BEGIN queries, so the relay can track its GTID position.
//! Compressed events (`log_bin_compress = ON`) and encrypted binlogs cannot be
//! decoded here and stop the relay with the fix named. A GTID event's flags also say
//! how its group can end: only a group flagged transactional is sure to be written
//! at commit, and an XA group carries its XID.

use super::xa::Xid;

/// `@mariadb_slave_capability` value that makes the server send GTID events.
pub const SLAVE_CAPABILITY_GTID: u8 = 4;

/// What to do with a MariaDB-specific event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Starts a transaction and carries its GTID.
    Gtid,
    /// Annotations, checkpoints, GTID lists: no rows, no boundary.
    Ignorable,
    /// Cannot be decoded; skipping it could skip outbox rows.
    Unsupported { what: &'static str, fix: &'static str },
}

/// Classifies an event type code that mysql_common does not know.
pub fn classify(code: u8) -> Kind {
    match code {
        0xA2 => Kind::Gtid,
        // ANNOTATE_ROWS, BINLOG_CHECKPOINT, GTID_LIST
        0xA0 | 0xA1 | 0xA3 => Kind::Ignorable,
        0xA4 => Kind::Unsupported {
            what: "START_ENCRYPTION (an encrypted binlog)",
            fix: "tail a replica whose binlog is not encrypted (encrypt_binlog = OFF)",
        },
        0xA5..=0xAB => Kind::Unsupported {
            what: "a MariaDB compressed event (log_bin_compress = ON)",
            fix: "set log_bin_compress = OFF on the source and restart the relay",
        },
        _ => Kind::Unsupported {
            what: "an event type the relay does not know",
            fix: "upgrade outbox-relay, or report the server version and this event type",
        },
    }
}

/// One MariaDB GTID: domain-server-sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MariaGtid {
    pub domain: u32,
    pub server: u32,
    pub seq: u64,
}

/// A GTID event: the GTID and what its flags say about the group it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GtidEvent {
    pub gtid: MariaGtid,
    /// Only transactional tables: the group was written whole at commit. Without it
    /// (a non-transactional table was touched) it may end in ROLLBACK or contain
    /// ROLLBACK TO a savepoint.
    pub transactional: bool,
    /// The group is an XA transaction's prepare: its rows wait for the decision.
    pub prepared_xa: Option<Xid>,
    /// One statement without BEGIN and COMMIT (DDL); otherwise a transaction, which
    /// ends at its XID, COMMIT or ROLLBACK.
    pub standalone: bool,
}

/// GTID event flags (MariaDB's `Gtid_log_event`).
const FL_STANDALONE: u8 = 0x01;
const FL_GROUP_COMMIT_ID: u8 = 0x02;
const FL_TRANSACTIONAL: u8 = 0x04;
const FL_PREPARED_XA: u8 = 0x40;

/// Parses a GTID event body: seq_no (u64 LE), domain_id (u32 LE), flags (u8), the
/// group commit id (u64) when flagged, then for XA groups the XID: formatID (u32 LE),
/// gtrid length (u8), bqual length (u8), gtrid and bqual.
pub fn parse_gtid(body: &[u8], server: u32) -> Option<GtidEvent> {
    let seq = u64::from_le_bytes(body.get(0..8)?.try_into().ok()?);
    let domain = u32::from_le_bytes(body.get(8..12)?.try_into().ok()?);
    let flags = *body.get(12)?;
    let xid_at = if flags & FL_GROUP_COMMIT_ID != 0 { 21 } else { 13 };
    let prepared_xa = if flags & FL_PREPARED_XA != 0 {
        let format_id = i32::from_le_bytes(body.get(xid_at..xid_at + 4)?.try_into().ok()?);
        let [gtrid_len, bqual_len] = <[u8; 2]>::try_from(body.get(xid_at + 4..xid_at + 6)?).ok()?;
        Some(Xid::from_parts(format_id, gtrid_len.into(), bqual_len.into(), body.get(xid_at + 6..)?)?)
    } else {
        None
    };
    let transactional = flags & FL_TRANSACTIONAL != 0;
    let standalone = flags & FL_STANDALONE != 0;
    Some(GtidEvent { gtid: MariaGtid { domain, server, seq }, transactional, prepared_xa, standalone })
}

/// The binlog file name from a ROTATE event. The first (fake) ROTATE of a stream can
/// carry the 4 checksum bytes after the name (mysql_async issue #189): keep the name
/// up to the end of its numeric extension (`name.000123`).
pub fn clean_binlog_name(raw: &str) -> String {
    let Some(dot) = raw.rfind('.') else {
        return raw.to_owned();
    };
    let digits = raw[dot + 1..].bytes().take_while(u8::is_ascii_digit).count();
    raw[..dot + 1 + digits].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gtid_body_parses() {
        let mut body = 17u64.to_le_bytes().to_vec();
        body.extend(3u32.to_le_bytes());
        body.push(FL_TRANSACTIONAL | 0x01);
        let event = parse_gtid(&body, 9).expect("a GTID event");
        assert_eq!(event.gtid, MariaGtid { domain: 3, server: 9, seq: 17 });
        assert!(event.transactional && event.standalone && event.prepared_xa.is_none());
        assert_eq!(parse_gtid(&body[..10], 9), None);
        body[12] = 0x08;
        assert!(!parse_gtid(&body, 9).expect("a GTID event").transactional, "a non-transactional table was touched");
    }

    #[test]
    fn an_xa_prepare_groups_gtid_carries_its_xid() {
        // As MariaDB 10.11 wrote it for XA PREPARE 'xrb' (flags, xid, then flags_extra).
        let body = [0x59, 0x07, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x4c, 1, 0, 0, 0, 3, 0, b'x', b'r', b'b', 0x01, 0xff];
        let event = parse_gtid(&body, 1).expect("a GTID event");
        assert_eq!(event.prepared_xa, Some(Xid { format_id: 1, gtrid: b"xrb".to_vec(), bqual: Vec::new() }));
        let mut with_commit_id = body[..13].to_vec();
        with_commit_id[12] |= FL_GROUP_COMMIT_ID;
        with_commit_id.extend(42u64.to_le_bytes());
        with_commit_id.extend(&body[13..]);
        assert_eq!(parse_gtid(&with_commit_id, 1).expect("a GTID event").prepared_xa, event.prepared_xa);
        assert_eq!(parse_gtid(&body[..20], 1), None, "XID cut short");
    }

    #[test]
    fn compressed_and_unknown_events_are_unsupported_never_ignored() {
        for code in [0xA4u8, 0xA5, 0xA6, 0xA9, 0xAB, 0xC0] {
            assert!(matches!(classify(code), Kind::Unsupported { .. }), "{code:#x}");
        }
        assert_eq!(classify(0xA2), Kind::Gtid);
        assert_eq!(classify(0xA0), Kind::Ignorable);
    }

    #[test]
    fn rotate_name_loses_trailing_checksum_bytes() {
        assert_eq!(clean_binlog_name("mariadb-bin.000007"), "mariadb-bin.000007");
        assert_eq!(clean_binlog_name("mariadb-bin.000007\u{1}\u{fffd}z\u{7f}"), "mariadb-bin.000007");
        assert_eq!(clean_binlog_name("binlog"), "binlog");
    }
}
