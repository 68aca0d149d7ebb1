//! One outcome of a check of the relay's environment: the source's settings, the
//! users' grants, the tables, the broker. The relay's start judges the source by the
//! same findings `outbox-relay check` prints, so these types sit below both.

use serde::Serialize;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    /// The relay runs, but something is weaker or slower than it could be.
    Warn,
    /// The relay cannot run (or would stop) until this is fixed.
    Fail,
}

impl Level {
    /// The word in the human report.
    pub fn label(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        }
    }
}

/// What a check looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Group {
    /// The source server's binlog settings (and whether it answers).
    Source,
    /// What the source and primary users may do.
    Grants,
    /// The outbox table and the relay's own tables (and whether the primary answers).
    Table,
    /// The NameServer, the broker and the configured topics.
    Broker,
}

impl Group {
    pub fn label(self) -> &'static str {
        match self {
            Group::Source => "source",
            Group::Grants => "grants",
            Group::Table => "table",
            Group::Broker => "broker",
        }
    }
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub group: Group,
    /// The check, e.g. the setting's name.
    pub name: String,
    pub level: Level,
    /// What was found (the value, what is missing).
    pub found: String,
    /// What to do; `None` when ok.
    pub fix: Option<String>,
}

impl Finding {
    pub fn ok(group: Group, name: impl Into<String>, found: impl Into<String>) -> Self {
        Self { group, name: name.into(), level: Level::Ok, found: found.into(), fix: None }
    }

    pub fn warn(group: Group, name: impl Into<String>, found: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { group, name: name.into(), level: Level::Warn, found: found.into(), fix: Some(fix.into()) }
    }

    pub fn fail(group: Group, name: impl Into<String>, found: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { group, name: name.into(), level: Level::Fail, found: found.into(), fix: Some(fix.into()) }
    }
}

/// "`name` is `found`; fix: `fix`", as the relay logs a warning or refuses to start.
impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is {}", self.name, self.found)?;
        match &self.fix {
            Some(fix) => write!(f, "; fix: {fix}"),
            None => Ok(()),
        }
    }
}
