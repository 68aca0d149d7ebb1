//! What a Query event's statement means to the decoder.
//!
//! In ROW format the Query events that matter are transaction control: where a group
//! starts and ends, savepoints inside it, and XA statements. The server writes them
//! in a fixed form (`SAVEPOINT \`s\``, `ROLLBACK TO \`s\``, `XA COMMIT X'..',X'..',1`),
//! but the parser also takes the forms a person would type. Everything else is
//! [`Statement::Other`] (DDL and other self-committing statements).

use super::xa::Xid;

/// A Query event's statement, as far as transactions are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statement {
    Begin,
    Commit,
    /// The whole group is rolled back (a group that touched a non-transactional table).
    Rollback,
    Savepoint(SavepointName),
    /// Undoes what the group wrote after the savepoint; the savepoint stays.
    RollbackTo(SavepointName),
    Release(SavepointName),
    Xa(XaStatement),
    Other,
}

/// An XA statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XaStatement {
    /// Starts an XA group (MySQL writes it; MariaDB flags its GTID event instead).
    Start(Xid),
    /// Inside the group, before its prepare.
    End,
    Prepare(Xid),
    /// With `one_phase` the group itself commits; otherwise it decides a prepared one.
    Commit {
        xid: Xid,
        one_phase: bool,
    },
    Rollback(Xid),
}

/// A savepoint's name; names compare without regard to case, as on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavepointName(String);

impl SavepointName {
    pub fn new(name: &str) -> Self {
        Self(name.to_lowercase())
    }
}

/// A transaction-control statement the relay cannot read; skipping it could
/// publish rolled-back rows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read the transaction statement `{statement}`")]
pub struct UnreadableStatement {
    pub statement: String,
}

impl Statement {
    pub fn parse(query: &str) -> Result<Self, UnreadableStatement> {
        let unreadable = || UnreadableStatement { statement: query.trim().chars().take(200).collect() };
        let mut words = Words(query.trim());
        let parsed = match words.keyword().as_str() {
            "BEGIN" => Some(Statement::Begin),
            "COMMIT" => Some(Statement::Commit),
            "SAVEPOINT" => words.name().map(Statement::Savepoint),
            "RELEASE" => {
                words.skip("SAVEPOINT");
                words.name().map(Statement::Release)
            }
            "ROLLBACK" => {
                words.skip("WORK");
                if words.skip("TO") {
                    words.skip("SAVEPOINT");
                    words.name().map(Statement::RollbackTo)
                } else {
                    Some(Statement::Rollback)
                }
            }
            "XA" => xa(&mut words).map(Statement::Xa),
            _ => Some(Statement::Other),
        };
        parsed.ok_or_else(unreadable)
    }
}

fn xa(words: &mut Words<'_>) -> Option<XaStatement> {
    let verb = words.keyword();
    match verb.as_str() {
        "END" => Some(XaStatement::End),
        "START" | "BEGIN" => words.xid().map(|(xid, _)| XaStatement::Start(xid)),
        "PREPARE" => words.xid().map(|(xid, _)| XaStatement::Prepare(xid)),
        "ROLLBACK" => words.xid().map(|(xid, _)| XaStatement::Rollback(xid)),
        "COMMIT" => words.xid().map(|(xid, rest)| {
            let one_phase = rest.split_whitespace().map(str::to_ascii_uppercase).eq(["ONE", "PHASE"]);
            XaStatement::Commit { xid, one_phase }
        }),
        _ => None,
    }
}

/// The rest of a statement, read a word at a time.
struct Words<'a>(&'a str);

impl<'a> Words<'a> {
    /// The next word, upper-cased (empty at the end).
    fn keyword(&mut self) -> String {
        let text = self.0.trim_start();
        let end = text.find(|c: char| !c.is_ascii_alphanumeric() && c != '_').unwrap_or(text.len());
        self.0 = &text[end..];
        text[..end].to_ascii_uppercase()
    }

    /// Skips the next word if it is `keyword`; says whether it did.
    fn skip(&mut self, keyword: &str) -> bool {
        let mut ahead = Words(self.0);
        let matched = ahead.keyword() == keyword;
        if matched {
            self.0 = ahead.0;
        }
        matched
    }

    /// An identifier: `quoted` (a doubled backtick is one) or a bare word.
    fn name(&mut self) -> Option<SavepointName> {
        let text = self.0.trim_start();
        let Some(quoted) = text.strip_prefix('`') else {
            let word = self.keyword();
            return (!word.is_empty()).then(|| SavepointName::new(&word));
        };
        let mut name = String::new();
        let mut chars = quoted.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            match c {
                '`' if chars.peek().is_some_and(|(_, next)| *next == '`') => {
                    chars.next();
                    name.push('`');
                }
                '`' => {
                    self.0 = &quoted[at + 1..];
                    return Some(SavepointName::new(&name));
                }
                other => name.push(other),
            }
        }
        None
    }

    /// The XID that follows, and the text after it.
    fn xid(&mut self) -> Option<(Xid, &'a str)> {
        Xid::parse_text(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(query: &str) -> Statement {
        Statement::parse(query).unwrap_or_else(|e| panic!("{e}"))
    }

    fn name(name: &str) -> SavepointName {
        SavepointName::new(name)
    }

    #[test]
    fn transaction_boundaries() {
        assert_eq!(parse("BEGIN"), Statement::Begin);
        assert_eq!(parse("COMMIT"), Statement::Commit);
        assert_eq!(parse("ROLLBACK"), Statement::Rollback);
        assert_eq!(parse("rollback work"), Statement::Rollback);
        assert_eq!(parse("ALTER TABLE outbox ADD COLUMN x INT"), Statement::Other);
    }

    #[test]
    fn savepoints_as_the_server_writes_them_and_as_typed() {
        assert_eq!(parse("SAVEPOINT `s`"), Statement::Savepoint(name("s")));
        assert_eq!(parse("ROLLBACK TO `s`"), Statement::RollbackTo(name("S")));
        assert_eq!(parse("ROLLBACK WORK TO SAVEPOINT Sp_1"), Statement::RollbackTo(name("sp_1")));
        assert_eq!(parse("RELEASE SAVEPOINT `a``b`"), Statement::Release(name("a`b")));
        assert!(Statement::parse("SAVEPOINT `open").is_err());
        assert!(Statement::parse("ROLLBACK TO").is_err());
    }

    #[test]
    fn xa_statements_carry_their_xid() {
        let xid = Xid { format_id: 1, gtrid: b"xa-c".to_vec(), bqual: Vec::new() };
        assert_eq!(parse("XA END X'78612d63',X'',1"), Statement::Xa(XaStatement::End));
        assert_eq!(parse("XA START X'78612d63',X'',1"), Statement::Xa(XaStatement::Start(xid.clone())));
        assert_eq!(parse("XA PREPARE X'78612d63',X'',1"), Statement::Xa(XaStatement::Prepare(xid.clone())));
        assert_eq!(
            parse("XA COMMIT X'78612d63',X'',1"),
            Statement::Xa(XaStatement::Commit { xid: xid.clone(), one_phase: false })
        );
        assert_eq!(
            parse("xa commit 'xa-c' one phase"),
            Statement::Xa(XaStatement::Commit { xid: xid.clone(), one_phase: true })
        );
        assert_eq!(parse("XA ROLLBACK X'78612d63',X'',1"), Statement::Xa(XaStatement::Rollback(xid)));
        assert!(Statement::parse("XA COMMIT").is_err(), "an XA decision without a readable XID");
        assert!(Statement::parse("XA FORGET 'x'").is_err(), "an XA statement the relay does not know");
    }
}
