//! XA transactions in the binlog: the transaction's identity (XID) in each of the
//! forms the server writes it.
//!
//! MariaDB 10.5+ and MySQL 5.7.7+ write an XA transaction's rows at `XA PREPARE`,
//! before it is decided: one event group that ends with an XA_PREPARE_LOG event.
//! The decision is a later group of its own, a Query event `XA COMMIT <xid>` or
//! `XA ROLLBACK <xid>` without rows. The XID appears in binary in XA_PREPARE_LOG
//! (and in MariaDB's GTID event of an XA group) and as text (`X'6774',X'6271',7`)
//! in the statements; every form parses to the same [`Xid`], which is how a
//! decision finds the rows its prepare left waiting.

use std::fmt;

/// The `formatID` an XID has when a statement names only gtrid (and bqual).
const DEFAULT_FORMAT_ID: i64 = 1;

/// An XA transaction's identity: format id, global transaction id, branch qualifier.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Xid {
    pub format_id: i64,
    pub gtrid: Vec<u8>,
    pub bqual: Vec<u8>,
}

/// What an XA_PREPARE_LOG event says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XaPrepare {
    pub xid: Xid,
    /// MySQL writes `XA COMMIT ... ONE PHASE` as this event with the flag set: the
    /// group is then committed, not prepared.
    pub one_phase: bool,
}

impl Xid {
    /// An XID from its binary parts: `data` holds gtrid then bqual.
    pub fn from_parts(format_id: i32, gtrid_len: usize, bqual_len: usize, data: &[u8]) -> Option<Self> {
        let gtrid = data.get(..gtrid_len)?;
        let bqual = data.get(gtrid_len..gtrid_len.checked_add(bqual_len)?)?;
        Some(Self { format_id: i64::from(format_id), gtrid: gtrid.to_vec(), bqual: bqual.to_vec() })
    }

    /// Parses the XID at the start of `text` (`gtrid [, bqual [, formatID]]`, strings as
    /// `X'hex'` or `'quoted'`); returns it and the text after it.
    pub fn parse_text(text: &str) -> Option<(Self, &str)> {
        let (gtrid, mut rest) = string_literal(text.trim_start())?;
        let mut bqual = Vec::new();
        let mut format_id = DEFAULT_FORMAT_ID;
        if let Some(after) = rest.trim_start().strip_prefix(',') {
            (bqual, rest) = string_literal(after.trim_start())?;
            if let Some(after) = rest.trim_start().strip_prefix(',') {
                let after = after.trim_start();
                let digits = after.find(|c: char| !c.is_ascii_digit()).unwrap_or(after.len());
                format_id = after[..digits].parse().ok()?;
                rest = &after[digits..];
            }
        }
        Some((Self { format_id, gtrid, bqual }, rest))
    }
}

impl XaPrepare {
    /// Parses an XA_PREPARE_LOG event body: one_phase (1 byte), formatID, gtrid length
    /// and bqual length (4 bytes each, little-endian), then gtrid and bqual.
    pub fn parse(body: &[u8]) -> Option<Self> {
        let word = |at: usize| body.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
        let one_phase = *body.first()? != 0;
        let format_id = i32::from_le_bytes(body.get(1..5)?.try_into().ok()?);
        let gtrid_len = usize::try_from(word(5)?).ok()?;
        let bqual_len = usize::try_from(word(9)?).ok()?;
        let xid = Xid::from_parts(format_id, gtrid_len, bqual_len, body.get(13..)?)?;
        Some(Self { xid, one_phase })
    }
}

/// As the server writes it in statements: `X'6774',X'6271',7`.
impl fmt::Display for Xid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
        write!(f, "X'{}',X'{}',{}", hex(&self.gtrid), hex(&self.bqual), self.format_id)
    }
}

/// A string literal at the start of `text`: `X'hex'` or `'text'` (with `''` for a quote).
fn string_literal(text: &str) -> Option<(Vec<u8>, &str)> {
    if let Some(hex) = text.strip_prefix("X'").or_else(|| text.strip_prefix("x'")) {
        let end = hex.find('\'')?;
        let digits = &hex.as_bytes()[..end];
        if digits.len() % 2 != 0 {
            return None;
        }
        let bytes = digits
            .chunks(2)
            .map(|pair| std::str::from_utf8(pair).ok().and_then(|p| u8::from_str_radix(p, 16).ok()))
            .collect::<Option<Vec<u8>>>()?;
        return Some((bytes, &hex[end + 1..]));
    }
    let mut chars = text.strip_prefix('\'')?.char_indices().peekable();
    let mut value = String::new();
    while let Some((at, c)) = chars.next() {
        match c {
            '\'' if chars.peek().is_some_and(|(_, next)| *next == '\'') => {
                chars.next();
                value.push('\'');
            }
            '\'' => return Some((value.into_bytes(), &text[at + 2..])),
            other => value.push(other),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xid(gtrid: &str, bqual: &str, format_id: i64) -> Xid {
        Xid { format_id, gtrid: gtrid.as_bytes().to_vec(), bqual: bqual.as_bytes().to_vec() }
    }

    #[test]
    fn the_servers_text_form_parses_and_prints_back() {
        let (parsed, rest) = Xid::parse_text("X'6774',X'6271',7 ONE PHASE").expect("an XID");
        assert_eq!(parsed, xid("gt", "bq", 7));
        assert_eq!(rest.trim(), "ONE PHASE");
        assert_eq!(parsed.to_string(), "X'6774',X'6271',7");
    }

    #[test]
    fn quoted_and_short_forms_default_bqual_and_format_id() {
        assert_eq!(Xid::parse_text("'xa-c'").map(|(x, _)| x), Some(xid("xa-c", "", 1)));
        assert_eq!(Xid::parse_text("'it''s', 'b'").map(|(x, _)| x), Some(xid("it's", "b", 1)));
        assert_eq!(Xid::parse_text("X'78612d63',X'',1").map(|(x, _)| x), Some(xid("xa-c", "", 1)));
    }

    #[test]
    fn broken_text_is_refused() {
        for text in ["", "X'7", "X'7g'", "'open", "X'61',X'62',", "xa-c"] {
            assert_eq!(Xid::parse_text(text), None, "{text:?}");
        }
    }

    #[test]
    fn xa_prepare_log_body_parses() {
        // As MariaDB 10.11 wrote it for XA PREPARE 'xrb'.
        let body = [0, 1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, b'x', b'r', b'b'];
        assert_eq!(XaPrepare::parse(&body), Some(XaPrepare { xid: xid("xrb", "", 1), one_phase: false }));
        let mut one_phase = body;
        one_phase[0] = 1;
        assert!(XaPrepare::parse(&one_phase).is_some_and(|p| p.one_phase));
        assert_eq!(XaPrepare::parse(&body[..15]), None, "gtrid cut short");
    }
}
