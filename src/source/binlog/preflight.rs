//! Checks of the source server before tailing its binlog, and where "now" is.
//!
//! Every setting the relay depends on is checked at start with an error that names
//! the setting, its value and the fix: binlog off, STATEMENT/MIXED format, MINIMAL
//! row image, MariaDB binlog compression, missing replication privileges. A setting
//! the relay works with but that weakens what it can promise (`sync_binlog` other
//! than 1) is a warning with the fix.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::source::BinlogPosition;

/// Which server family: they differ in GTIDs, compression and status statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    MariaDb,
    MySql,
}

/// What the relay learned about the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    pub flavor: Flavor,
    pub version: String,
    /// MySQL `server_uuid`, or MariaDB `server_id@hostname:port` (MariaDB has no uuid).
    pub identity: String,
}

/// The source is not usable as configured.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error("source {address}: {setting} is {value}, the relay needs {expected}; {fix}")]
    Setting { address: String, setting: &'static str, value: String, expected: &'static str, fix: &'static str },
    #[error("source {address}: the replication user lacks a privilege ({detail}); grant REPLICATION SLAVE, REPLICATION CLIENT ON *.* and SELECT on the outbox table")]
    Privilege { address: String, detail: String },
    #[error("source {address}: {detail}")]
    Query { address: String, detail: String },
}

/// "Unknown system variable": a server older than the variable.
const UNKNOWN_SYSTEM_VARIABLE: u16 = 1193;

/// MySQL error codes for "access denied" to a statement or variable.
const ACCESS_DENIED: [u16; 3] = [1045, 1142, 1227];

/// Checks binlog settings for a relay registering as `relay_server_id`, and returns
/// the server's identity.
pub async fn check(conn: &mut Conn, address: &str, relay_server_id: u32) -> Result<ServerInfo, PreflightError> {
    let values = text_row(
        conn,
        address,
        "SELECT @@version, @@server_id, @@hostname, @@port, @@log_bin, @@binlog_format, @@binlog_row_image, @@sync_binlog",
    )
    .await?;
    let [version, server_id, hostname, port, log_bin, format, row_image, sync_binlog] = <[String; 8]>::try_from(values)
        .map_err(|_| PreflightError::Query {
            address: address.to_owned(),
            detail: "unexpected answer to SELECT @@version".into(),
        })?;
    let setting = |setting, value: &str, expected, fix| PreflightError::Setting {
        address: address.to_owned(),
        setting,
        value: value.to_owned(),
        expected,
        fix,
    };
    if !matches!(log_bin.as_str(), "1" | "ON") {
        return Err(setting(
            "log_bin",
            &log_bin,
            "ON",
            "start the server with --log-bin (binary logging) and a server_id",
        ));
    }
    if !format.eq_ignore_ascii_case("ROW") {
        return Err(setting(
            "binlog_format",
            &format,
            "ROW",
            "set binlog_format = ROW (STATEMENT and MIXED do not carry row values)",
        ));
    }
    if !row_image.eq_ignore_ascii_case("FULL") {
        return Err(setting(
            "binlog_row_image",
            &row_image,
            "FULL",
            "set binlog_row_image = FULL (MINIMAL/NOBLOB can omit outbox columns)",
        ));
    }
    if !syncs_every_commit(&sync_binlog) {
        tracing::warn!(
            address,
            sync_binlog = %sync_binlog,
            "source {address}: sync_binlog is {sync_binlog}, not 1: after a crash of the source its binlog can lack transactions the relay already published (then rolled back on the source) or that stayed committed (left to the sweep); fix: set sync_binlog = 1 on the source"
        );
    }
    if server_id == relay_server_id.to_string() {
        return Err(setting(
            "source.server_id",
            &server_id,
            "a server_id other than the source's own",
            "give source.server_id a value unique among the source's replicas and different from the source's server_id",
        ));
    }
    let flavor = if version.contains("MariaDB") { Flavor::MariaDb } else { Flavor::MySql };
    let identity = match flavor {
        Flavor::MariaDb => {
            let compress = text_row(conn, address, "SELECT @@log_bin_compress").await?;
            if let Some(value) = compress.into_iter().next().filter(|v| matches!(v.as_str(), "1" | "ON")) {
                return Err(setting(
                    "log_bin_compress",
                    &value,
                    "OFF",
                    "set log_bin_compress = OFF (compressed events cannot be decoded)",
                ));
            }
            format!("{server_id}@{hostname}:{port}")
        }
        Flavor::MySql => {
            let uuid = text_row(conn, address, "SELECT @@server_uuid").await?;
            uuid.into_iter().next().unwrap_or_else(|| format!("{server_id}@{hostname}:{port}"))
        }
    };
    check_replica_logs_updates(conn, address, flavor).await?;
    // The replication privilege is needed to read "now"; check it here, not mid-start.
    current_position(conn, flavor, address).await?;
    Ok(ServerInfo { flavor, version, identity })
}

/// A replica writes what it replicates to its own binlog only with
/// `log_slave_updates` (MySQL 8.0.26+: `log_replica_updates`); without it the relay
/// would see none of the primary's outbox rows and every one would arrive late, by
/// the sweep. A server counts as a replica when it is read-only or has a replication
/// channel configured (when the user may see that); a primary promoted from a replica
/// is neither.
async fn check_replica_logs_updates(conn: &mut Conn, address: &str, flavor: Flavor) -> Result<(), PreflightError> {
    let logs_updates = match raw_text_row(conn, "SELECT @@log_replica_updates").await {
        // MariaDB and MySQL before 8.0.26 know only the old name.
        Err(mysql_async::Error::Server(e)) if e.code == UNKNOWN_SYSTEM_VARIABLE => {
            text_row(conn, address, "SELECT @@log_slave_updates").await?
        }
        other => other.map_err(|e| classify(address, e))?,
    };
    let read_only_sql = match flavor {
        Flavor::MariaDb => "SELECT @@read_only",
        Flavor::MySql => "SELECT @@read_only OR @@super_read_only",
    };
    let read_only = text_row(conn, address, read_only_sql).await?;
    // Needs a monitoring privilege the relay does not ask for: unknown without it.
    let replicates = raw_text_row(conn, "SHOW SLAVE STATUS").await.is_ok_and(|row| !row.is_empty());
    let is_on = |values: &[String]| values.first().is_some_and(|v| matches!(v.as_str(), "1" | "ON"));
    if !is_on(&logs_updates) && (is_on(&read_only) || replicates) {
        return Err(PreflightError::Setting {
            address: address.to_owned(),
            setting: "log_slave_updates",
            value: "OFF".to_owned(),
            expected: "ON on a replica",
            fix: "set log_slave_updates = ON (MySQL: log_replica_updates = ON) on the replica and restart it, or point source.url at a server that writes what it replicates to its binlog",
        });
    }
    Ok(())
}

/// The server's current binlog end: where a relay without a checkpoint starts.
pub async fn current_position(
    conn: &mut Conn,
    flavor: Flavor,
    address: &str,
) -> Result<BinlogPosition, PreflightError> {
    let status = match raw_text_row(conn, "SHOW MASTER STATUS").await {
        // MySQL 8.4 removed SHOW MASTER STATUS (syntax error 1064 there).
        Err(mysql_async::Error::Server(e)) if e.code == 1064 => {
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

/// `sync_binlog = 1`: the binlog is on disk before a commit returns. Any other value
/// lets a crash of the source lose the binlog's tail, which the relay may have read.
fn syncs_every_commit(sync_binlog: &str) -> bool {
    sync_binlog.trim() == "1"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sync_binlog_1_is_safe() {
        assert!(syncs_every_commit("1"));
        for value in ["0", "100", ""] {
            assert!(!syncs_every_commit(value), "{value:?}");
        }
    }
}
