//! MariaDB's own binlog events, which mysql_common does not know.
//!
//! With `@mariadb_slave_capability = 4` the server sends real GTID events (0xA2)
//! instead of fake BEGIN queries, so the relay can track its GTID position.
//! Compressed events (`log_bin_compress = ON`) and encrypted binlogs cannot be
//! decoded here and stop the relay with the fix named.

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

/// Parses a GTID event body: seq_no (u64 LE), domain_id (u32 LE), flags.
pub fn parse_gtid(body: &[u8], server: u32) -> Option<MariaGtid> {
    let seq = u64::from_le_bytes(body.get(0..8)?.try_into().ok()?);
    let domain = u32::from_le_bytes(body.get(8..12)?.try_into().ok()?);
    Some(MariaGtid { domain, server, seq })
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
        body.push(1);
        assert_eq!(parse_gtid(&body, 9), Some(MariaGtid { domain: 3, server: 9, seq: 17 }));
        assert_eq!(parse_gtid(&body[..10], 9), None);
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
