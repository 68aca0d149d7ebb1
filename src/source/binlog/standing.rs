//! What the source server says about where things stand, for the lag metrics: how
//! far its own replication is behind, how much binlog lies after a position, and how
//! long it keeps binlog files. Read with the replication user's monitoring
//! privileges (REPLICATION CLIENT; SLAVE MONITOR on MariaDB 10.5+).

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};

use super::preflight::SYNTAX_ERROR;
use super::settings::expiry_from;

/// "Unknown system variable": a server without the variable.
const UNKNOWN_SYSTEM_VARIABLE: u16 = 1193;

/// The source's own replication, as SHOW REPLICA STATUS tells it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Replication {
    /// The source is not a replica: it is as current as the primary.
    NotAReplica,
    /// Seconds_Behind_Master.
    Behind(f64),
    /// A replication thread is stopped: how far behind is unknown, and growing.
    Stopped,
}

/// How the source's own replication stands.
pub async fn replication(conn: &mut Conn) -> Result<Replication, mysql_async::Error> {
    let row: Option<Row> = match conn.query_first("SHOW REPLICA STATUS").await {
        // MariaDB before 10.5.1 and MySQL before 8.0.22 know only the old name.
        Err(mysql_async::Error::Server(e)) if e.code == SYNTAX_ERROR => conn.query_first("SHOW SLAVE STATUS").await?,
        other => other?,
    };
    let Some(row) = row else { return Ok(Replication::NotAReplica) };
    let behind = ["Seconds_Behind_Master", "Seconds_Behind_Source"]
        .into_iter()
        .find_map(|column| row.get_opt::<Option<String>, _>(column).and_then(Result::ok))
        .flatten()
        .and_then(|secs| secs.parse::<f64>().ok());
    Ok(behind.map_or(Replication::Stopped, Replication::Behind))
}

/// Bytes of binlog from `file:pos` to the end of the source's binlog; `None` when
/// `file` is not among the source's binlog files.
pub async fn bytes_after(conn: &mut Conn, file: &str, pos: u64) -> Result<Option<u64>, mysql_async::Error> {
    let files: Vec<Row> = conn.query("SHOW BINARY LOGS").await?;
    let sizes: Vec<(String, u64)> =
        files.into_iter().filter_map(|row| Some((row.get_opt(0)?.ok()?, row.get_opt(1)?.ok()?))).collect();
    Ok(bytes_after_in(&sizes, file, pos))
}

/// [`bytes_after`] over (file name, size) in binlog order.
fn bytes_after_in(sizes: &[(String, u64)], file: &str, pos: u64) -> Option<u64> {
    let at = sizes.iter().position(|(name, _)| name == file)?;
    let rest: u64 = sizes[at + 1..].iter().map(|(_, size)| size).sum();
    Some(sizes[at].1.saturating_sub(pos) + rest)
}

/// Seconds the source keeps a binlog file before purging it (0: never).
pub async fn expire_seconds(conn: &mut Conn) -> Result<u64, mysql_async::Error> {
    let seconds = variable(conn, "binlog_expire_logs_seconds").await?;
    let days = variable(conn, "expire_logs_days").await?;
    let expiry = expiry_from(&seconds, &days).map_err(|unreadable| mysql_async::Error::Other(unreadable.into()))?;
    Ok(expiry.unwrap_or(0))
}

/// A global variable as text; empty on a server without it.
async fn variable(conn: &mut Conn, name: &str) -> Result<String, mysql_async::Error> {
    match conn.query_first::<Option<String>, _>(format!("SELECT @@GLOBAL.{name}")).await {
        Err(mysql_async::Error::Server(e)) if e.code == UNKNOWN_SYSTEM_VARIABLE => Ok(String::new()),
        other => Ok(other?.flatten().unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_after_count_the_rest_of_the_file_and_every_later_one() {
        let sizes = vec![("b.000001".to_owned(), 1_000), ("b.000002".to_owned(), 500), ("b.000003".to_owned(), 300)];
        assert_eq!(bytes_after_in(&sizes, "b.000002", 200), Some(300 + 300));
        assert_eq!(bytes_after_in(&sizes, "b.000003", 300), Some(0));
        assert_eq!(bytes_after_in(&sizes, "b.000009", 4), None, "not on the server");
    }
}
