//! Reading the lines of `SHOW GRANTS` into what they allow, so `check` can say which
//! privilege a user lacks without trying a single statement.
//!
//! Understood: privilege lists (static and MySQL's dynamic ones, `ALL [PRIVILEGES]`)
//! on `*.*`, `db.*` (with the `%`/`_` wildcards and `\` escapes of database patterns)
//! and `db.table`, identifiers bare or quoted, and granted roles (`GRANT role TO
//! user`), which are listed for the caller to expand. Column privileges
//! (`SELECT (a, b)`) do not cover a whole table, and routines and `PROXY` do not
//! concern the relay: those are read and left out. Anything else (a `REVOKE` of MySQL's
//! partial revokes, a shape not foreseen) is kept as unreadable, so the caller can say
//! it was not taken into account instead of guessing.

use std::collections::BTreeSet;

/// Where a grant applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// `*.*`: the whole server (the only place server privileges such as
    /// REPLICATION SLAVE can be granted).
    Server,
    /// `db.*`: a database name pattern.
    Database(String),
    /// `db.table`.
    Table { database: String, table: String },
}

/// The privileges of one grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Privileges {
    /// `ALL [PRIVILEGES]`: every privilege the scope can have.
    All,
    /// Upper-case names with single spaces (`REPLICATION SLAVE`, `BINLOG_ADMIN`).
    Listed(BTreeSet<String>),
}

/// One `GRANT privileges ON scope TO user` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub privileges: Privileges,
    pub scope: Scope,
}

/// What one line of `SHOW GRANTS` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GrantLine {
    Privileges(Grant),
    /// Roles granted to the user, quoted as `SHOW GRANTS FOR` takes them.
    Roles(Vec<String>),
    /// Nothing that concerns the relay (routines, PROXY, `SET DEFAULT ROLE`).
    Irrelevant,
    /// A line this parser does not evaluate.
    Unreadable,
}

/// Everything a user's grant lines allow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GrantSet {
    grants: Vec<Grant>,
    /// Roles granted, quoted for `SHOW GRANTS FOR`.
    pub roles: Vec<String>,
    /// Lines that were not evaluated, as given.
    pub unreadable: Vec<String>,
}

impl GrantSet {
    /// Reads every line of `SHOW GRANTS`.
    pub fn parse<'a>(lines: impl IntoIterator<Item = &'a str>) -> Self {
        let mut set = GrantSet::default();
        for line in lines {
            match parse_line(line) {
                GrantLine::Privileges(grant) => set.grants.push(grant),
                GrantLine::Roles(roles) => set.roles.extend(roles),
                GrantLine::Irrelevant => {}
                GrantLine::Unreadable => set.unreadable.push(line.to_owned()),
            }
        }
        set
    }

    /// Adds what another set (a role's) allows.
    pub fn absorb(&mut self, other: GrantSet) {
        self.grants.extend(other.grants);
        self.unreadable.extend(other.unreadable);
    }

    /// Whether a server privilege (granted `ON *.*`) is held.
    pub fn allows_on_server(&self, privilege: &str) -> bool {
        self.grants.iter().any(|g| g.scope == Scope::Server && g.privileges.include(privilege))
    }

    /// Whether `privilege` is held on `database`.`table`, by any scope that covers it.
    pub fn allows_on_table(&self, privilege: &str, database: &str, table: &str) -> bool {
        self.grants.iter().any(|grant| {
            let covers = match &grant.scope {
                Scope::Server => true,
                Scope::Database(pattern) => matches_pattern(pattern, database),
                Scope::Table { database: d, table: t } => d == database && t == table,
            };
            covers && grant.privileges.include(privilege)
        })
    }
}

impl Privileges {
    fn include(&self, privilege: &str) -> bool {
        match self {
            Privileges::All => true,
            Privileges::Listed(names) => names.contains(&normalize(privilege)),
        }
    }
}

/// Reads one line of `SHOW GRANTS`.
pub(crate) fn parse_line(line: &str) -> GrantLine {
    let Some(tokens) = tokenize(line) else {
        return GrantLine::Unreadable;
    };
    let mut tokens = tokens.into_iter().peekable();
    match tokens.next() {
        Some(Token::Word(word)) if word.eq_ignore_ascii_case("GRANT") => {}
        Some(Token::Word(word)) if word.eq_ignore_ascii_case("SET") => return GrantLine::Irrelevant,
        _ => return GrantLine::Unreadable,
    }
    // The privilege or role list runs up to ON (privileges) or TO (roles).
    let mut items: Vec<Vec<Token>> = vec![Vec::new()];
    let mut depth = 0usize;
    let ends_with = loop {
        match tokens.next() {
            None => return GrantLine::Unreadable,
            Some(Token::Word(w)) if depth == 0 && (w.eq_ignore_ascii_case("ON") || w.eq_ignore_ascii_case("TO")) => {
                break w.to_ascii_uppercase();
            }
            Some(Token::Symbol(',')) if depth == 0 => items.push(Vec::new()),
            Some(token) => {
                match token {
                    Token::Symbol('(') => depth += 1,
                    Token::Symbol(')') => depth = depth.saturating_sub(1),
                    _ => {}
                }
                if let Some(item) = items.last_mut() {
                    item.push(token);
                }
            }
        }
    };
    if ends_with == "TO" {
        return roles(&items);
    }
    let privileges = match privileges(&items) {
        PrivilegeList::Granted(privileges) => privileges,
        PrivilegeList::Nothing => return GrantLine::Irrelevant,
        PrivilegeList::Unreadable => return GrantLine::Unreadable,
    };
    let rest: Vec<Token> = tokens.collect();
    match scope(&rest) {
        Some(Target::Scope(scope)) => GrantLine::Privileges(Grant { privileges, scope }),
        Some(Target::Routine) => GrantLine::Irrelevant,
        None => GrantLine::Unreadable,
    }
}

/// `GRANT role[, role] TO user`: each role re-quoted for `SHOW GRANTS FOR`.
fn roles(items: &[Vec<Token>]) -> GrantLine {
    let quoted: Option<Vec<String>> = items
        .iter()
        .map(|item| {
            let parts: Vec<String> = item
                .iter()
                .map(|token| match token {
                    Token::Quoted(name) | Token::Word(name) => format!("`{}`", name.replace('`', "``")),
                    Token::Symbol('@') => "@".to_owned(),
                    Token::Symbol(_) => String::new(),
                })
                .collect();
            let ok = !parts.is_empty() && parts.iter().all(|p| !p.is_empty());
            ok.then(|| parts.concat())
        })
        .collect();
    quoted.map_or(GrantLine::Unreadable, GrantLine::Roles)
}

/// What a privilege list grants.
enum PrivilegeList {
    Granted(Privileges),
    /// Nothing that concerns the relay: `USAGE`, `PROXY`, only column privileges.
    Nothing,
    Unreadable,
}

fn privileges(items: &[Vec<Token>]) -> PrivilegeList {
    let mut names = BTreeSet::new();
    for item in items {
        // A column list limits the privilege to those columns: not the whole table.
        if item.contains(&Token::Symbol('(')) {
            continue;
        }
        let words: Option<Vec<&str>> = item
            .iter()
            .map(|t| match t {
                Token::Word(w) => Some(w.as_str()),
                _ => None,
            })
            .collect();
        let Some(words) = words else {
            return PrivilegeList::Unreadable;
        };
        let name = normalize(&words.join(" "));
        match name.as_str() {
            "ALL" | "ALL PRIVILEGES" => return PrivilegeList::Granted(Privileges::All),
            "USAGE" | "PROXY" | "" => {}
            _ => {
                names.insert(name);
            }
        }
    }
    if names.is_empty() {
        PrivilegeList::Nothing
    } else {
        PrivilegeList::Granted(Privileges::Listed(names))
    }
}

/// What follows `ON`.
enum Target {
    Scope(Scope),
    /// A procedure, function or package: nothing the relay calls.
    Routine,
}

fn scope(tokens: &[Token]) -> Option<Target> {
    let mut rest = tokens;
    if let [Token::Word(kind), tail @ ..] = rest {
        match kind.to_ascii_uppercase().as_str() {
            "TABLE" => rest = tail,
            "PROCEDURE" | "FUNCTION" | "PACKAGE" => return Some(Target::Routine),
            _ => {}
        }
    }
    let (database, table, to) = match rest {
        [db, Token::Symbol('.'), table, to, ..] => (name_or_star(db)?, name_or_star(table)?, to),
        _ => return None,
    };
    if !matches!(to, Token::Word(w) if w.eq_ignore_ascii_case("TO")) {
        return None;
    }
    let scope = match (database, table) {
        (Name::Star, Name::Star) => Scope::Server,
        (Name::Named(database), Name::Star) => Scope::Database(database),
        (Name::Named(database), Name::Named(table)) => Scope::Table { database, table },
        (Name::Star, Name::Named(_)) => return None,
    };
    Some(Target::Scope(scope))
}

enum Name {
    Star,
    Named(String),
}

fn name_or_star(token: &Token) -> Option<Name> {
    match token {
        Token::Symbol('*') => Some(Name::Star),
        Token::Word(name) | Token::Quoted(name) => Some(Name::Named(name.clone())),
        Token::Symbol(_) => None,
    }
}

/// Upper case, single spaces, and the newer synonyms under the names servers print.
fn normalize(privilege: &str) -> String {
    let name = privilege.split_whitespace().collect::<Vec<_>>().join(" ").to_ascii_uppercase();
    match name.as_str() {
        "REPLICATION REPLICA" => "REPLICATION SLAVE".to_owned(),
        "REPLICA MONITOR" => "SLAVE MONITOR".to_owned(),
        _ => name,
    }
}

/// A database pattern of a grant: `%` any run, `_` any one character, `\` takes the
/// next character literally.
fn matches_pattern(pattern: &str, name: &str) -> bool {
    fn here(pattern: &[char], name: &[char]) -> bool {
        match pattern {
            [] => name.is_empty(),
            ['%', rest @ ..] => (0..=name.len()).any(|skip| here(rest, &name[skip..])),
            ['_', rest @ ..] => !name.is_empty() && here(rest, &name[1..]),
            ['\\', literal, rest @ ..] => name.first() == Some(literal) && here(rest, &name[1..]),
            [literal, rest @ ..] => name.first() == Some(literal) && here(rest, &name[1..]),
        }
    }
    let (pattern, name): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    here(&pattern, &name)
}

/// A piece of a grant line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A bare word (keyword, privilege word, unquoted identifier).
    Word(String),
    /// A `` `quoted` ``, `'quoted'` or `"quoted"` name, unescaped.
    Quoted(String),
    Symbol(char),
}

/// Splits a line into tokens; `None` for an unterminated quote.
fn tokenize(line: &str) -> Option<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '`' | '\'' | '"' => {
                chars.next();
                tokens.push(Token::Quoted(quoted(&mut chars, c)?));
            }
            ',' | '.' | '(' | ')' | '*' | '@' | '=' => {
                chars.next();
                tokens.push(Token::Symbol(c));
            }
            _ => {
                let mut word = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || ",.()*@=`'\"".contains(c) {
                        break;
                    }
                    word.push(c);
                    chars.next();
                }
                tokens.push(Token::Word(word));
            }
        }
    }
    Some(tokens)
}

/// The rest of a quoted name after its opening `quote`: a doubled quote is one quote
/// character, and inside '' or "" a backslash escapes the next character.
fn quoted(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, quote: char) -> Option<String> {
    let mut text = String::new();
    loop {
        let c = chars.next()?;
        if c == quote {
            if chars.peek() == Some(&quote) {
                chars.next();
                text.push(quote);
                continue;
            }
            return Some(text);
        }
        if c == '\\' && quote != '`' {
            // Kept: in a database pattern the backslash is the pattern's own escape.
            text.push(c);
            text.push(chars.next()?);
            continue;
        }
        text.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(names: &[&str]) -> Privileges {
        Privileges::Listed(names.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn mariadb_server_privileges_with_a_password_clause() {
        let line = "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `outbox_repl`@`127.0.0.1` IDENTIFIED BY PASSWORD '*4A1B'";
        assert_eq!(
            parse_line(line),
            GrantLine::Privileges(Grant {
                privileges: listed(&["BINLOG MONITOR", "REPLICATION SLAVE"]),
                scope: Scope::Server
            })
        );
    }

    #[test]
    fn mysql_dynamic_privileges_without_spaces_after_commas() {
        let set = GrantSet::parse(["GRANT BINLOG_ADMIN,REPLICATION_SLAVE_ADMIN ON *.* TO `w`@`%`"]);
        assert!(set.allows_on_server("BINLOG_ADMIN") && set.allows_on_server("replication_slave_admin"));
        assert!(!set.allows_on_server("REPLICATION SLAVE"));
    }

    #[test]
    fn all_privileges_on_the_server_allows_everything() {
        let set = GrantSet::parse(["GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"]);
        assert!(set.allows_on_server("REPLICATION SLAVE"));
        assert!(set.allows_on_table("UPDATE", "app", "outbox_event"));
    }

    #[test]
    fn database_and_table_scopes_cover_only_their_tables() {
        let set = GrantSet::parse([
            "GRANT USAGE ON *.* TO 'w'@'%'",
            "GRANT SELECT, INSERT ON `app`.* TO 'w'@'%'",
            "GRANT UPDATE ON app.outbox_event TO 'w'@'%'",
            "GRANT ALL ON `shop`.`orders` TO 'w'@'%'",
        ]);
        assert!(set.allows_on_table("SELECT", "app", "anything"));
        assert!(set.allows_on_table("UPDATE", "app", "outbox_event"));
        assert!(!set.allows_on_table("UPDATE", "app", "outbox_relay_lease"));
        assert!(set.allows_on_table("DELETE", "shop", "orders") && !set.allows_on_table("DELETE", "shop", "items"));
        assert!(!set.allows_on_table("SELECT", "other", "outbox_event"));
        assert!(!set.allows_on_server("SELECT"), "a database grant is not a server grant");
    }

    #[test]
    fn backquotes_escape_themselves_and_may_hold_dots_and_spaces() {
        let set = GrantSet::parse(["GRANT SELECT ON `my db`.`odd``name.t` TO `u`@`%`"]);
        assert!(set.allows_on_table("SELECT", "my db", "odd`name.t"));
    }

    #[test]
    fn database_patterns_match_with_wildcards_and_escapes() {
        let set = GrantSet::parse(["GRANT SELECT ON `app\\_%`.* TO `u`@`%`", "GRANT UPDATE ON `a_b`.* TO `u`@`%`"]);
        assert!(set.allows_on_table("SELECT", "app_1", "t"));
        assert!(!set.allows_on_table("SELECT", "appx1", "t"), "the escaped _ is literal");
        assert!(set.allows_on_table("UPDATE", "axb", "t"), "an unescaped _ is any one character");
        assert!(matches_pattern("%", "") && !matches_pattern("a", "ab"));
    }

    #[test]
    fn column_privileges_do_not_cover_the_table() {
        let set = GrantSet::parse(["GRANT SELECT (id, topic), UPDATE ON `app`.`o` TO `u`@`%`"]);
        assert!(set.allows_on_table("UPDATE", "app", "o"));
        assert!(!set.allows_on_table("SELECT", "app", "o"));
    }

    #[test]
    fn roles_are_listed_quoted_for_show_grants() {
        assert_eq!(parse_line("GRANT `relay_role` TO `u`@`%`"), GrantLine::Roles(vec!["`relay_role`".into()]));
        assert_eq!(
            parse_line("GRANT `r1`@`%`,`r2`@`localhost` TO `u`@`%` WITH ADMIN OPTION"),
            GrantLine::Roles(vec!["`r1`@`%`".into(), "`r2`@`localhost`".into()])
        );
        let mut set = GrantSet::parse(["GRANT USAGE ON *.* TO `u`@`%`", "GRANT `relay_role` TO `u`@`%`"]);
        assert_eq!(set.roles, ["`relay_role`"]);
        set.absorb(GrantSet::parse(["GRANT REPLICATION SLAVE ON *.* TO `relay_role`"]));
        assert!(set.allows_on_server("REPLICATION SLAVE"));
    }

    #[test]
    fn routines_proxy_and_default_roles_are_irrelevant() {
        for line in [
            "GRANT EXECUTE ON PROCEDURE `app`.`p` TO `u`@`%`",
            "GRANT PROXY ON ''@'%' TO 'root'@'localhost' WITH GRANT OPTION",
            "SET DEFAULT ROLE `relay_role` FOR `u`@`%`",
            "GRANT USAGE ON *.* TO `u`@`%`",
        ] {
            assert_eq!(parse_line(line), GrantLine::Irrelevant, "{line}");
        }
    }

    #[test]
    fn revokes_and_unknown_shapes_are_kept_as_unreadable() {
        let set = GrantSet::parse([
            "REVOKE SELECT ON `mysql`.* FROM `u`@`%`",
            "GRANT SELECT ON `unterminated TO `u`@`%`",
            "GRANT SELECT ON t TO `u`@`%`",
        ]);
        assert_eq!(set.unreadable.len(), 3, "{set:?}");
        assert!(!set.allows_on_table("SELECT", "mysql", "user"));
    }

    #[test]
    fn newer_synonyms_count_as_the_printed_names() {
        let set = GrantSet::parse(["GRANT REPLICATION REPLICA, REPLICA MONITOR ON *.* TO `u`@`%`"]);
        assert!(set.allows_on_server("REPLICATION SLAVE") && set.allows_on_server("SLAVE MONITOR"));
    }
}
