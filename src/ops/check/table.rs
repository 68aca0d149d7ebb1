//! The outbox table and the relay's own tables: the columns (names and types) the
//! relay reads and writes on the primary, the columns the binlog reader maps on the
//! source (the same map the reader loads), the sweep's indexes, the partitions, the
//! migrations, and whether the primary can claim rows with SKIP LOCKED.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Pool};
use outbox_kit::OutboxTable;

use super::{one_line, partitions, Finding, Group};
use crate::config::{ClaimMethod, Config};
use crate::event::EXTRA_COLUMNS;
use crate::source::binlog::{ColumnError, ColumnMap};
use crate::store::{check_migrated, has_index, CLAIM_INDEX, KEY_ORDER_INDEX};

/// What a column must hold for the relay's statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Integer,
    Text,
    /// Text, JSON or bytes (the message body).
    Payload,
    Time,
    /// DATETIME only: a value read as UTC whatever the session's time zone.
    Datetime,
}

impl Kind {
    fn accepts(self, data_type: &str) -> bool {
        const TEXT: [&str; 6] = ["char", "varchar", "tinytext", "text", "mediumtext", "longtext"];
        const BYTES: [&str; 6] = ["binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"];
        let data_type = data_type.to_ascii_lowercase();
        let data_type = data_type.as_str();
        match self {
            Kind::Integer => ["tinyint", "smallint", "mediumint", "int", "bigint"].contains(&data_type),
            Kind::Text => TEXT.contains(&data_type),
            Kind::Payload => data_type == "json" || TEXT.contains(&data_type) || BYTES.contains(&data_type),
            Kind::Time => ["datetime", "timestamp"].contains(&data_type),
            Kind::Datetime => data_type == "datetime",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Kind::Integer => "an integer",
            Kind::Text => "text",
            Kind::Payload => "text, JSON or bytes",
            Kind::Time => "DATETIME or TIMESTAMP",
            Kind::Datetime => "DATETIME (UTC)",
        }
    }
}

/// Every outbox column the relay's statements use on the primary (see the table's
/// DDL in `store::schema`).
const COLUMNS: [(&str, Kind); 14] = [
    ("id", Kind::Integer),
    ("event_id", Kind::Text),
    ("biz_key", Kind::Text),
    ("topic", Kind::Text),
    ("payload", Kind::Payload),
    ("status", Kind::Integer),
    ("retry_count", Kind::Integer),
    ("next_retry_at", Kind::Time),
    ("lease_until", Kind::Time),
    ("owner", Kind::Text),
    ("msg_id", Kind::Text),
    ("sent_at", Kind::Time),
    ("last_error", Kind::Text),
    ("created_at", Kind::Time),
];

/// What each optional message column must hold, in `EXTRA_COLUMNS` order.
const EXTRA_KINDS: [Kind; 4] = [Kind::Text, Kind::Text, Kind::Payload, Kind::Datetime];

/// The outbox table, its indexes and the migrations on the primary, and how rows
/// are claimed there.
pub(super) async fn on_primary(pool: &Pool, config: &Config, outbox: &OutboxTable) -> Vec<Finding> {
    // Before the connection below is taken: the check's pool has one connection.
    let migrated = migrations(pool, outbox).await;
    let mut conn = match pool.get_conn().await {
        Ok(conn) => conn,
        Err(error) => {
            return vec![Finding::fail(
                Group::Table,
                "primary connection",
                one_line(error),
                "start the primary or fix primary.url",
            )]
        }
    };
    let mut findings = Vec::new();
    match columns(&mut conn, outbox).await {
        Ok(present) if present.is_empty() => findings.push(Finding::fail(
            Group::Table,
            "primary columns",
            format!("no table {} visible to the primary user", outbox.qualified()),
            "create it with `outbox-relay migrate` (see --admin-url), or fix outbox.table / outbox.schema",
        )),
        Ok(present) => {
            findings.push(judge_columns(outbox, &present));
            findings.push(indexes(&mut conn, outbox).await.unwrap_or_else(|e| unreadable("primary indexes", &e)));
            let partitions = partitions::layout(&mut conn, outbox, config.outbox.partition).await;
            findings.push(partitions.unwrap_or_else(|e| unreadable("partitions", &e)));
        }
        Err(error) => findings.push(unreadable("primary columns", &error)),
    }
    findings.push(migrated);
    findings.push(claims(&mut conn, config).await.unwrap_or_else(|e| unreadable("SKIP LOCKED", &e)));
    findings
}

/// The columns the binlog reader maps on the source, loaded as the reader loads them.
pub(super) async fn on_source(pool: &Pool, outbox: &OutboxTable) -> Finding {
    let name = "source columns";
    let loaded = match pool.get_conn().await {
        Ok(mut conn) => ColumnMap::load(&mut conn, &outbox.schema, &outbox.table).await,
        Err(error) => Err(error),
    };
    match loaded {
        Ok(Ok(map)) => {
            let optional = map.extra_names();
            let optional = if optional.is_empty() { "none".to_owned() } else { optional.join(", ") };
            let mapped = format!("{}: id, event_id, biz_key, topic, payload; optional: {optional}", outbox.qualified());
            Finding::ok(Group::Table, name, mapped)
        }
        Ok(Err(ColumnError::Missing { column, .. })) => Finding::fail(
            Group::Table,
            name,
            format!("{} has no column `{column}`", outbox.qualified()),
            "add the column on the primary (it replicates to the source), or fix outbox.table / outbox.schema",
        ),
        Ok(Err(ColumnError::NoTable { .. })) => Finding::fail(
            Group::Table,
            name,
            format!("no table {} visible to the source user", outbox.qualified()),
            "create it with `outbox-relay migrate` on the primary and let it replicate, or grant the source user SELECT on it",
        ),
        Err(error) => unreadable(name, &error),
    }
}

fn unreadable(name: &str, error: &mysql_async::Error) -> Finding {
    Finding::fail(
        Group::Table,
        name,
        format!("cannot be read: {}", one_line(error)),
        "make sure the user may read information_schema and the relay's tables, then run the check again",
    )
}

/// The outbox table's columns with their data types; empty when it does not exist.
async fn columns(conn: &mut Conn, outbox: &OutboxTable) -> Result<Vec<(String, String)>, mysql_async::Error> {
    conn.exec(
        "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
        (&outbox.schema, &outbox.table),
    )
    .await
}

/// Every column the relay uses against the (name, data type) pairs present.
fn judge_columns(outbox: &OutboxTable, present: &[(String, String)]) -> Finding {
    let name = "primary columns";
    let find = |column: &str| present.iter().find(|(name, _)| name.eq_ignore_ascii_case(column));
    let mut problems = Vec::new();
    for (column, kind) in COLUMNS {
        match find(column) {
            None => problems.push(format!("no column `{column}`")),
            Some((_, data_type)) if !kind.accepts(data_type) => {
                problems.push(format!("`{column}` is {data_type}, not {}", kind.describe()))
            }
            Some(_) => {}
        }
    }
    let mut optional = Vec::new();
    for (column, kind) in EXTRA_COLUMNS.into_iter().zip(EXTRA_KINDS) {
        match find(column) {
            Some((_, data_type)) if !kind.accepts(data_type) => {
                problems.push(format!("`{column}` is {data_type}, not {}", kind.describe()))
            }
            Some(_) => optional.push(column),
            None => {}
        }
    }
    if problems.is_empty() {
        let optional = match optional.is_empty() {
            true => "none (`outbox-relay migrate` adds tag, event_type, headers, deliver_at)".to_owned(),
            false => optional.join(", "),
        };
        return Finding::ok(
            Group::Table,
            name,
            format!(
                "{}: all {} columns the relay uses; optional message columns: {optional}",
                outbox.qualified(),
                COLUMNS.len()
            ),
        );
    }
    Finding::fail(
        Group::Table,
        name,
        format!("{}: {}", outbox.qualified(), problems.join(", ")),
        "give the table the columns and types of the CREATE TABLE of docs/deployment.md (`outbox-relay migrate` adds the relay's own columns to a classic outbox table)",
    )
}

/// The sweep's indexes: without them every claim scans (see `store::claims`).
async fn indexes(conn: &mut Conn, outbox: &OutboxTable) -> Result<Finding, mysql_async::Error> {
    let mut missing = Vec::new();
    for (index, columns) in [CLAIM_INDEX, KEY_ORDER_INDEX] {
        if !has_index(conn, outbox, index).await? {
            missing.push(format!("{index} {columns}"));
        }
    }
    let name = "primary indexes";
    if missing.is_empty() {
        return Ok(Finding::ok(Group::Table, name, format!("{}, {}", CLAIM_INDEX.0, KEY_ORDER_INDEX.0)));
    }
    Ok(Finding::warn(
        Group::Table,
        name,
        format!("missing {}: the sweep's claims scan the table's history", missing.join(", ")),
        "run `outbox-relay migrate` to add them",
    ))
}

async fn migrations(pool: &Pool, outbox: &OutboxTable) -> Finding {
    let name = "migrations";
    match check_migrated(pool, outbox).await {
        Ok(Ok(())) => Finding::ok(Group::Table, name, format!("every migration applied in `{}`", outbox.schema)),
        Ok(Err(not)) => Finding::fail(
            Group::Table,
            name,
            format!("`{}` is at migration {}, this relay needs {}", not.schema, not.found, not.needed),
            "run `outbox-relay migrate` (as a user with CREATE and ALTER, see --admin-url)",
        ),
        Err(error) => unreadable(name, &error),
    }
}

/// SKIP LOCKED lets sweepers pass each other's claimed rows; without it the sweep
/// claims optimistically, one UPDATE per row (`store::claims`).
async fn claims(conn: &mut Conn, config: &Config) -> Result<Finding, mysql_async::Error> {
    let version: Option<String> = conn.query_first("SELECT VERSION()").await?;
    let version = version.unwrap_or_default();
    let server_has = ClaimMethod::Auto.for_server(&version) == ClaimMethod::SkipLocked;
    let name = "SKIP LOCKED";
    Ok(match (config.sweep.claim, server_has) {
        (ClaimMethod::Optimistic, _) => Finding::ok(Group::Table, name, "not used: sweep.claim = \"optimistic\""),
        (_, true) => Finding::ok(Group::Table, name, format!("supported by {version}")),
        (ClaimMethod::SkipLocked, false) => Finding::fail(
            Group::Table,
            name,
            format!("sweep.claim = \"skip_locked\" but {version} has no SKIP LOCKED"),
            "set sweep.claim = \"auto\" (optimistic claims on this server), or upgrade to MariaDB 10.6+ / MySQL 8.0.1+",
        ),
        (ClaimMethod::Auto, false) => Finding::warn(
            Group::Table,
            name,
            format!("not supported by {version}: the sweep claims optimistically, one UPDATE per row"),
            "upgrade the primary to MariaDB 10.6+ / MySQL 8.0.1+ for SKIP LOCKED claims",
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::Level;

    #[test]
    fn a_missing_column_and_a_wrong_type_are_both_named() {
        let outbox = OutboxTable { schema: "app".into(), table: "o".into() };
        let mut present: Vec<(String, String)> = COLUMNS
            .iter()
            .filter(|(c, _)| *c != "topic")
            .map(|(c, _)| (c.to_string(), "varchar".to_string()))
            .collect();
        for (column, data_type) in &mut present {
            match column.as_str() {
                "id" | "status" | "retry_count" => *data_type = "bigint".into(),
                "next_retry_at" | "lease_until" | "sent_at" | "created_at" => *data_type = "datetime".into(),
                "payload" => *data_type = "int".into(),
                _ => {}
            }
        }
        let finding = judge_columns(&outbox, &present);
        assert_eq!(finding.level, Level::Fail);
        assert!(
            finding.found.contains("no column `topic`") && finding.found.contains("`payload` is int"),
            "{finding:?}"
        );
        for (column, data_type) in &mut present {
            if column == "payload" {
                *data_type = "longtext".into();
            }
        }
        present.push(("topic".into(), "varchar".into()));
        assert_eq!(judge_columns(&outbox, &present).level, Level::Ok);
    }

    #[test]
    fn column_kinds_accept_the_types_the_relay_can_read() {
        assert!(Kind::Payload.accepts("longtext"), "MariaDB's JSON is LONGTEXT");
        assert!(Kind::Payload.accepts("JSON") && Kind::Payload.accepts("blob"));
        assert!(Kind::Integer.accepts("bigint") && !Kind::Integer.accepts("varchar"));
        assert!(Kind::Text.accepts("varchar") && !Kind::Text.accepts("blob"));
        assert!(Kind::Time.accepts("datetime") && !Kind::Time.accepts("date"));
    }
}
