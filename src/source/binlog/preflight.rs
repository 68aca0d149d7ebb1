//! Checks of the source server before tailing its binlog, and where "now" is.
//!
//! Every setting the relay depends on is read at start and judged by
//! [`settings::verdicts`](super::settings::verdicts), the same verdicts
//! `outbox-relay check` prints: every setting that makes the relay refuse (binlog
//! off, STATEMENT/MIXED format, MINIMAL row image, MariaDB binlog compression, a
//! replica that does not log what it replicates, a MySQL replica whose parallel
//! appliers commit out of the primary's order, a clashing server_id, binlogs purged
//! sooner than `source.max_downtime_secs`) is named in one error with its fix, and
//! every setting that only weakens what the relay can promise (`sync_binlog` other
//! than 1, ...) is logged as a warning with its fix. Then the replication privilege
//! is checked by reading the current position.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::settings::{verdicts, Expected, SourceFacts, VARIABLES};
use crate::config::SourceConfig;
use crate::findings::{Finding, Level};
use crate::said_once;
use crate::server::{Flavor, ServerInfo};
use crate::source::BinlogPosition;

/// The source is not usable as configured.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error("source {address}: {setting} is {value}, the relay needs {expected}; {fix}")]
    Setting { address: String, setting: &'static str, value: String, expected: &'static str, fix: &'static str },
    #[error("source {address}: {}", list(failed))]
    Settings { address: String, failed: Vec<Finding> },
    #[error("source {address}: the replication user lacks a privilege ({detail}); grant REPLICATION SLAVE, REPLICATION CLIENT ON *.* and SELECT on the outbox table")]
    Privilege { address: String, detail: String },
    #[error("source {address}: {detail}")]
    Query { address: String, detail: String },
}

/// Every failed setting in one line, so one restart shows all there is to fix.
fn list(failed: &[Finding]) -> String {
    let count = match failed.len() {
        1 => String::new(),
        n => format!("{n} settings stop the relay: "),
    };
    count + &failed.iter().map(ToString::to_string).collect::<Vec<_>>().join("; and ")
}

/// MySQL error codes for "access denied" to a statement or variable.
const ACCESS_DENIED: [u16; 3] = [1045, 1142, 1227];

/// Checks the source's settings for a relay configured with `source`, and returns
/// the server's identity. Every FAIL is in the one error; warnings are logged.
pub async fn check(conn: &mut Conn, address: &str, source: &SourceConfig) -> Result<ServerInfo, PreflightError> {
    let facts = read_facts(conn, address).await?;
    let mut failed = Vec::new();
    for finding in verdicts(&facts, &Expected::of(source)) {
        match finding.level {
            Level::Ok => {}
            Level::Warn if said_once::first_time(format!("source {address}: {finding}")) => {
                tracing::warn!(address, setting = %finding.name, "source {address}: {finding}");
            }
            Level::Warn => {}
            Level::Fail => failed.push(finding),
        }
    }
    if !failed.is_empty() {
        return Err(PreflightError::Settings { address: address.to_owned(), failed });
    }
    // The replication privilege is needed to read "now"; check it here, not mid-start.
    current_position(conn, facts.flavor, address).await?;
    Ok(facts.server_info())
}

/// "You have an error in your SQL syntax": a server without the statement.
pub(super) const SYNTAX_ERROR: u16 = 1064;

/// Reads the source's global settings and whether it replicates from another server.
pub async fn read_facts(conn: &mut Conn, address: &str) -> Result<SourceFacts, PreflightError> {
    let names = VARIABLES.iter().map(|name| format!("'{name}'")).collect::<Vec<_>>().join(", ");
    let rows: Vec<mysql_async::Row> = conn
        .query(format!("SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})"))
        .await
        .map_err(|e| classify(address, e))?;
    let variables = rows.into_iter().filter_map(|row| {
        let mut values = row.unwrap_raw().into_iter().map(value_text);
        Some((values.next()?, values.next()?))
    });
    // Needs a monitoring privilege the relay does not ask for: unknown without it.
    // MySQL 8.4 knows only the new name (8.0.22+, MariaDB 10.5+); older servers the old.
    let status = match raw_text_row(conn, "SHOW REPLICA STATUS").await {
        Err(mysql_async::Error::Server(e)) if e.code == SYNTAX_ERROR => raw_text_row(conn, "SHOW SLAVE STATUS").await,
        other => other,
    };
    let replicates = status.ok().map(|row| !row.is_empty());
    Ok(SourceFacts::new(variables, replicates))
}

/// The server's current binlog end: where a relay without a checkpoint starts.
pub async fn current_position(
    conn: &mut Conn,
    flavor: Flavor,
    address: &str,
) -> Result<BinlogPosition, PreflightError> {
    let status = match raw_text_row(conn, "SHOW MASTER STATUS").await {
        // MySQL 8.4 removed SHOW MASTER STATUS (a syntax error there).
        Err(mysql_async::Error::Server(e)) if e.code == SYNTAX_ERROR => {
            text_row(conn, address, "SHOW BINARY LOG STATUS").await?
        }
        other => other.map_err(|e| classify(address, e))?,
    };
    let (file, pos) = match status.as_slice() {
        [file, pos, ..] => (file.clone(), pos.parse::<u64>().ok()),
        _ => (String::new(), None),
    };
    let pos = pos.ok_or_else(|| PreflightError::Setting {
        address: address.to_owned(),
        setting: "log_bin",
        value: "OFF (SHOW MASTER STATUS is empty)".into(),
        expected: "ON",
        fix: "enable binary logging on the source",
    })?;
    let gtid = match flavor {
        Flavor::MariaDb => {
            text_row(conn, address, "SELECT @@gtid_binlog_pos").await?.into_iter().next().filter(|g| !g.is_empty())
        }
        // Executed_Gtid_Set, read in the same row as the file and position (empty
        // with gtid_mode OFF).
        Flavor::MySql => status.get(4).filter(|g| !g.trim().is_empty()).map(|g| g.replace(['\n', ' '], "")),
    };
    Ok(BinlogPosition { file, pos, gtid, commit_time: None })
}

/// The first row of `sql` as text values (NULL as ""), or empty when there is no row.
/// Read as text on purpose: typed conversion of an unexpected column panics.
async fn text_row(conn: &mut Conn, address: &str, sql: &str) -> Result<Vec<String>, PreflightError> {
    raw_text_row(conn, sql).await.map_err(|e| classify(address, e))
}

async fn raw_text_row(conn: &mut Conn, sql: &str) -> Result<Vec<String>, mysql_async::Error> {
    let row: Option<mysql_async::Row> = conn.query_first(sql).await?;
    Ok(row.map(|row| row.unwrap_raw().into_iter().map(value_text).collect()).unwrap_or_default())
}

fn value_text(value: Option<mysql_async::Value>) -> String {
    match value {
        None | Some(mysql_async::Value::NULL) => String::new(),
        Some(mysql_async::Value::Bytes(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Some(other) => other.as_sql(true).trim_matches('\'').to_owned(),
    }
}

fn classify(address: &str, error: mysql_async::Error) -> PreflightError {
    match &error {
        mysql_async::Error::Server(e) if ACCESS_DENIED.contains(&e.code) => {
            PreflightError::Privilege { address: address.to_owned(), detail: e.message.clone() }
        }
        _ => PreflightError::Query { address: address.to_owned(), detail: error.to_string() },
    }
}
