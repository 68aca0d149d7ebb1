//! The outbox table and the relay's own tables, created by `outbox-relay migrate`.
//!
//! The relay's own tables are numbered migrations recorded in
//! `outbox_relay_migrations`, so running `migrate` again is a no-op. The outbox table
//! (whose name is configurable, so one schema may hold several) is created when
//! absent; one that already exists in the classic outbox shape (without `owner`, `msg_id`,
//! `sent_at`, `last_error`, `idx_claim`) gets what is missing added, because teams
//! adopt the relay on tables they already have.
//! The DDL runs on MariaDB 10.6+ and MySQL 8.0+ (both have SKIP LOCKED).

use mysql_async::prelude::Queryable;
use mysql_async::Pool;
use outbox_kit::OutboxTable;

/// What `migrate` did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MigrationReport {
    pub outbox_created: bool,
    pub applied: Vec<&'static str>,
    /// Columns and indexes added to an existing outbox table.
    pub added: Vec<&'static str>,
}

/// The outbox table: the classic outbox columns plus `owner`, `msg_id`, `sent_at`, `last_error`.
const OUTBOX_DDL: &str = "CREATE TABLE IF NOT EXISTS {outbox} (
  id            BIGINT PRIMARY KEY AUTO_INCREMENT,
  event_id      VARCHAR(64)   NOT NULL,
  biz_key       VARCHAR(64)   NOT NULL,
  topic         VARCHAR(128)  NOT NULL,
  payload       JSON          NOT NULL,
  status        TINYINT       NOT NULL DEFAULT 0 COMMENT '0 PENDING, 1 SENDING, 2 SENT, 3 FAILED, 4 SKIPPED',
  retry_count   INT           NOT NULL DEFAULT 0,
  next_retry_at DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  lease_until   DATETIME(3)   NULL,
  owner         VARCHAR(128)  NULL,
  msg_id        VARCHAR(128)  NULL,
  sent_at       DATETIME(3)   NULL,
  last_error    VARCHAR(1024) NULL,
  created_at    DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  UNIQUE KEY uk_event_id (event_id),
  KEY idx_pending (status, next_retry_at),
  KEY idx_claim (status, id, next_retry_at),
  KEY idx_key_order (biz_key, status, id)
) ENGINE=InnoDB";

/// The sweep's index: PENDING rows in id order, so a claim's `ORDER BY id LIMIT n`
/// reads n index entries. Without it the server scans the primary key from the start
/// of the table, through every row already SENT, on every claim.
pub const CLAIM_INDEX: (&str, &str) = ("idx_claim", "(status, id, next_retry_at)");

/// The key-order index: a claim checks, per row, that no earlier row of its key is
/// still unsent; with it that check reads only the key's unsent rows, not its history.
pub const KEY_ORDER_INDEX: (&str, &str) = ("idx_key_order", "(biz_key, status, id)");

/// ER_DUP_FIELDNAME: the column a migration adds is there already.
const DUPLICATE_COLUMN: u16 = 1060;

/// One numbered schema step of the relay's own tables. `{schema}` is substituted.
struct Migration {
    version: u32,
    name: &'static str,
    sql: &'static str,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "checkpoint mirror",
        sql: "CREATE TABLE IF NOT EXISTS `{schema}`.`outbox_relay_checkpoint` (
  source_id   VARCHAR(128)  NOT NULL PRIMARY KEY,
  binlog_file VARCHAR(255)  NOT NULL,
  binlog_pos  BIGINT        NOT NULL,
  gtid        VARCHAR(4096) NULL,
  server_uuid VARCHAR(64)   NULL,
  term        BIGINT        NOT NULL DEFAULT 0,
  updated_at  DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB",
    },
    Migration {
        version: 2,
        name: "leader lease",
        sql: "CREATE TABLE IF NOT EXISTS `{schema}`.`outbox_relay_lease` (
  name        VARCHAR(128) NOT NULL PRIMARY KEY,
  holder      VARCHAR(128) NOT NULL,
  term        BIGINT       NOT NULL,
  lease_until DATETIME(3)  NOT NULL
) ENGINE=InnoDB",
    },
    Migration {
        version: 3,
        name: "audit of manual actions",
        sql: "CREATE TABLE IF NOT EXISTS `{schema}`.`outbox_relay_audit` (
  id         BIGINT PRIMARY KEY AUTO_INCREMENT,
  at         DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  operator   VARCHAR(128)  NOT NULL,
  reason     VARCHAR(1024) NOT NULL,
  action     VARCHAR(64)   NOT NULL,
  target     VARCHAR(255)  NOT NULL,
  old_state  VARCHAR(255)  NULL,
  new_state  VARCHAR(255)  NULL,
  result     VARCHAR(1024) NOT NULL
) ENGINE=InnoDB",
    },
    Migration {
        version: 4,
        name: "whole checkpoint in the mirror",
        sql: "ALTER TABLE `{schema}`.`outbox_relay_checkpoint` ADD COLUMN checkpoint TEXT NULL",
    },
];

/// Columns the relay needs beyond the classic outbox table, with their definitions.
const EXTRA_OUTBOX_COLUMNS: &[(&str, &str)] = &[
    ("lease_until", "DATETIME(3) NULL"),
    ("owner", "VARCHAR(128) NULL"),
    ("msg_id", "VARCHAR(128) NULL"),
    ("sent_at", "DATETIME(3) NULL"),
    ("last_error", "VARCHAR(1024) NULL"),
];

/// The relay's tables are older than this relay needs.
#[derive(Debug, thiserror::Error)]
#[error("the relay's tables in `{schema}` are at migration {found} but this relay needs {needed} (the leader lease and the whole checkpoint in the mirror); fix: run `outbox-relay migrate` (as a user with CREATE and ALTER, see --admin-url)")]
pub struct NotMigrated {
    pub schema: String,
    pub found: u32,
    pub needed: u32,
}

/// Checks that every migration this relay knows has been applied; `Ok(Err(..))`
/// names what to run when not.
pub async fn check_migrated(pool: &Pool, outbox: &OutboxTable) -> Result<Result<(), NotMigrated>, mysql_async::Error> {
    let needed = MIGRATIONS.iter().map(|m| m.version).max().unwrap_or_default();
    let mut conn = pool.get_conn().await?;
    let found: u32 = match conn
        .query_first(format!("SELECT COALESCE(MAX(version), 0) FROM `{}`.`outbox_relay_migrations`", outbox.schema))
        .await
    {
        Ok(found) => found.unwrap_or_default(),
        // ER_NO_SUCH_TABLE: never migrated.
        Err(mysql_async::Error::Server(e)) if e.code == 1146 => 0,
        Err(error) => return Err(error),
    };
    Ok(if found >= needed { Ok(()) } else { Err(NotMigrated { schema: outbox.schema.clone(), found, needed }) })
}

/// Creates or upgrades every table; safe to run any number of times.
pub async fn migrate(pool: &Pool, outbox: &OutboxTable) -> Result<MigrationReport, mysql_async::Error> {
    let mut conn = pool.get_conn().await?;
    let schema = &outbox.schema;
    conn.query_drop(format!(
        "CREATE TABLE IF NOT EXISTS `{schema}`.`outbox_relay_migrations` (
  version    INT          NOT NULL PRIMARY KEY,
  name       VARCHAR(128) NOT NULL,
  applied_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB"
    ))
    .await?;
    let done: Vec<u32> = conn.query(format!("SELECT version FROM `{schema}`.`outbox_relay_migrations`")).await?;
    let mut report = MigrationReport::default();
    for migration in MIGRATIONS.iter().filter(|m| !done.contains(&m.version)) {
        match conn.query_drop(migration.sql.replace("{schema}", schema)).await {
            // Another `migrate` (a second relay, a parallel run) added the column first.
            Err(mysql_async::Error::Server(e)) if e.code == DUPLICATE_COLUMN => {}
            other => other?,
        }
        // IGNORE: two relays migrating at once both create IF NOT EXISTS; one records it.
        conn.exec_drop(
            format!("INSERT IGNORE INTO `{schema}`.`outbox_relay_migrations` (version, name) VALUES (?, ?)"),
            (migration.version, migration.name),
        )
        .await?;
        report.applied.push(migration.name);
    }
    let existing: Vec<String> = conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (&outbox.schema, &outbox.table),
        )
        .await?;
    if existing.is_empty() {
        conn.query_drop(OUTBOX_DDL.replace("{outbox}", &outbox.qualified())).await?;
        report.outbox_created = true;
    } else {
        report.added = add_missing(&mut conn, outbox, &existing).await?;
    }
    Ok(report)
}

async fn add_missing(
    conn: &mut mysql_async::Conn,
    outbox: &OutboxTable,
    existing: &[String],
) -> Result<Vec<&'static str>, mysql_async::Error> {
    let mut added = Vec::new();
    for (column, definition) in EXTRA_OUTBOX_COLUMNS {
        if !existing.iter().any(|c| c.eq_ignore_ascii_case(column)) {
            conn.query_drop(format!("ALTER TABLE {} ADD COLUMN `{column}` {definition}", outbox.qualified())).await?;
            added.push(*column);
        }
    }
    for (index, columns) in [CLAIM_INDEX, KEY_ORDER_INDEX] {
        if !has_index(conn, outbox, index).await? {
            conn.query_drop(format!("ALTER TABLE {} ADD INDEX `{index}` {columns}", outbox.qualified())).await?;
            added.push(index);
        }
    }
    Ok(added)
}

/// Whether the outbox table has the index `name` (`migrate` adds the relay's).
pub async fn has_index(
    conn: &mut mysql_async::Conn,
    outbox: &OutboxTable,
    name: &str,
) -> Result<bool, mysql_async::Error> {
    let found: Option<String> = conn
        .exec_first(
            "SELECT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME = ?",
            (&outbox.schema, &outbox.table, name),
        )
        .await?;
    Ok(found.is_some())
}
