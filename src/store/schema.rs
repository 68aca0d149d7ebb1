//! The outbox table and the relay's own tables, created by `outbox-relay migrate`.
//!
//! The relay's own tables are numbered migrations recorded in
//! `outbox_relay_migrations`, so running `migrate` again is a no-op. The outbox table
//! (whose name is configurable, so one schema may hold several) is created when
//! absent; one that already exists in the classic outbox shape (without `owner`, `msg_id`,
//! `sent_at`, `last_error`, `idx_claim`, or the optional message columns `tag`,
//! `event_type`, `headers`, `deliver_at`) gets what is missing added, because teams
//! adopt the relay on tables they already have. The added columns are nullable, so the
//! applications' INSERTs and an older relay go on as before.
//! The outbox table may be partitioned by `created_at` (see `partitions`): created so,
//! or an existing table converted when asked, never behind the operator's back.
//! The DDL runs on MariaDB 10.6+ and MySQL 8.0+ (both have SKIP LOCKED).

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Pool};
use outbox_kit::OutboxTable;

use super::partitions::{self, Partitioning, TooManyPartitions};
use crate::config::PartitionPeriod;

/// What `migrate` did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MigrationReport {
    pub outbox_created: bool,
    pub applied: Vec<&'static str>,
    /// Columns and indexes added to an existing outbox table.
    pub added: Vec<&'static str>,
    /// An existing unpartitioned outbox table was converted to partitions.
    pub converted: bool,
    /// Partitions added ahead to an existing partitioned table.
    pub partitions_added: usize,
}

/// The outbox table: the classic outbox columns plus `owner`, `msg_id`, `sent_at`,
/// `last_error`. `{keys}` is [`PLAIN_KEYS`] or [`PARTITIONED_KEYS`].
const OUTBOX_DDL: &str = "CREATE TABLE IF NOT EXISTS {outbox} (
  id            BIGINT        NOT NULL AUTO_INCREMENT,
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
  tag           VARCHAR(128)  NULL COMMENT 'the message tag consumers filter on',
  event_type    VARCHAR(128)  NULL COMMENT 'sent as the event_type property',
  headers       JSON          NULL COMMENT 'an object of strings: user properties (traceparent, ...)',
  deliver_at    DATETIME(3)   NULL COMMENT 'UTC: the broker delivers it then (a timer message)',
  {keys},
  KEY idx_pending (status, next_retry_at),
  KEY idx_claim (status, id, next_retry_at),
  KEY idx_key_order (biz_key, status, id)
) ENGINE=InnoDB";

const PLAIN_KEYS: &str = "PRIMARY KEY (id),\n  UNIQUE KEY uk_event_id (event_id)";

/// Every unique key of a partitioned table must hold the partitioning column, so the
/// primary key is `(id, created_at)` (ids stay unique: they come from AUTO_INCREMENT)
/// and `event_id` is indexed but no longer unique in the database.
const PARTITIONED_KEYS: &str = "PRIMARY KEY (id, created_at),\n  KEY idx_event_id (event_id)";

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
    Migration {
        version: 5,
        name: "reconciliation report",
        sql: "CREATE TABLE IF NOT EXISTS `{schema}`.`outbox_relay_reconciliation` (
  outbox_table VARCHAR(255) NOT NULL,
  hour_start   DATETIME     NOT NULL,
  topic        VARCHAR(128) NOT NULL,
  created      BIGINT       NOT NULL,
  sent         BIGINT       NOT NULL,
  skipped      BIGINT       NOT NULL,
  unsent       BIGINT       NOT NULL COMMENT 'created, neither SENT nor SKIPPED after the settle time',
  processed    BIGINT       NULL     COMMENT 'SENT and in the consumer dedup table; NULL without one',
  unprocessed  BIGINT       NULL     COMMENT 'SENT and not in the consumer dedup table',
  checked_at   DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (outbox_table, hour_start, topic)
) ENGINE=InnoDB",
    },
    Migration {
        version: 6,
        name: "orders to the leader",
        sql: "ALTER TABLE `{schema}`.`outbox_relay_lease`
  ADD COLUMN paused_by     VARCHAR(128) NULL COMMENT 'set: the leader publishes nothing until resumed',
  ADD COLUMN paused_at     DATETIME(3)  NULL,
  ADD COLUMN handover_term BIGINT       NULL COMMENT 'the leader of this term hands the lease to a standby'",
    },
    Migration {
        version: 7,
        name: "fleet roll call",
        sql: "CREATE TABLE IF NOT EXISTS `{schema}`.`outbox_relay_instances` (
  fleet    VARCHAR(128)  NOT NULL COMMENT 'the lease name',
  instance VARCHAR(255)  NOT NULL COMMENT 'host:pid:start of the process',
  http     VARCHAR(255)  NOT NULL COMMENT 'where its /metrics, /readyz and /healthz answer',
  role     VARCHAR(16)   NOT NULL COMMENT 'leader, standby or stopped',
  term     BIGINT        NOT NULL,
  ready    TINYINT       NOT NULL,
  reason   VARCHAR(1024) NULL,
  version  VARCHAR(32)   NOT NULL,
  seen_at  DATETIME(3)   NOT NULL,
  PRIMARY KEY (fleet, instance)
) ENGINE=InnoDB",
    },
];

/// Columns beyond the classic outbox table, with their definitions: those the relay
/// needs, then the optional message columns.
const EXTRA_OUTBOX_COLUMNS: &[(&str, &str)] = &[
    ("lease_until", "DATETIME(3) NULL"),
    ("owner", "VARCHAR(128) NULL"),
    ("msg_id", "VARCHAR(128) NULL"),
    ("sent_at", "DATETIME(3) NULL"),
    ("last_error", "VARCHAR(1024) NULL"),
    ("tag", "VARCHAR(128) NULL COMMENT 'the message tag consumers filter on'"),
    ("event_type", "VARCHAR(128) NULL COMMENT 'sent as the event_type property'"),
    ("headers", "JSON NULL COMMENT 'an object of strings: user properties (traceparent, ...)'"),
    ("deliver_at", "DATETIME(3) NULL COMMENT 'UTC: the broker delivers it then (a timer message)'"),
];

/// The relay's tables are older than this relay needs.
#[derive(Debug, thiserror::Error)]
#[error("the relay's tables in `{schema}` are at migration {found} but this relay needs {needed}; fix: run `outbox-relay migrate` (as a user with CREATE and ALTER, see --admin-url)")]
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

/// What `migrate` does about the outbox table's partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PartitionPlan {
    /// Leave the layout as it is.
    #[default]
    AsItIs,
    /// A new table is partitioned by this period; an existing partitioned one gets its
    /// partitions ahead; an existing unpartitioned one is refused (it needs `Convert`).
    Partitioned(PartitionPeriod),
    /// As `Partitioned`, and an existing unpartitioned table is converted in place.
    Convert(PartitionPeriod),
}

/// The outbox table's partitioning is not what `migrate` was asked for.
#[derive(Debug, thiserror::Error)]
pub enum PartitionRefused {
    #[error("{table} exists unpartitioned; converting it to {period} partitions copies the whole table while writes to it wait (MariaDB and MySQL both rebuild a table to partition it); fix: run `outbox-relay migrate --partition {period} --convert` in a quiet hour, after `outbox-relay cleanup` has removed old SENT rows (docs/operations.md, \"Partitioning an existing outbox\")")]
    Unconverted { table: String, period: PartitionPeriod },
    #[error("{table} is partitioned by {found}, not {asked}; fix: set outbox.partition = \"{found}\" (changing the period means re-creating the table)")]
    OtherPeriod { table: String, found: PartitionPeriod, asked: PartitionPeriod },
    #[error("{table} is partitioned by {method}({expression}), which the relay does not maintain; fix: leave outbox.partition unset, or re-create the table with `outbox-relay migrate --partition`")]
    Foreign { table: String, method: String, expression: String },
    #[error("{table}.created_at is {found}, which RANGE COLUMNS partitioning does not take; fix: make it DATETIME(3) first (`ALTER TABLE ... MODIFY created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)`, which keeps its values in the session time zone), then convert")]
    CreatedAtType { table: String, found: String },
    #[error(transparent)]
    TooMany(#[from] TooManyPartitions),
}

/// `migrate` failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(transparent)]
    Db(#[from] mysql_async::Error),
    #[error(transparent)]
    Refused(#[from] PartitionRefused),
}

/// Where `migrate`'s changes go: to the server, or (a dry run) into a list of the
/// statements it would run. Reads always go to the server.
struct Ddl<'a> {
    conn: &'a mut Conn,
    planned: Option<Vec<String>>,
}

impl Ddl<'_> {
    async fn run(&mut self, statement: String) -> Result<(), mysql_async::Error> {
        match &mut self.planned {
            Some(planned) => {
                planned.push(statement);
                Ok(())
            }
            None => self.conn.query_drop(statement).await,
        }
    }
}

/// Creates or upgrades every table; safe to run any number of times.
pub async fn migrate(pool: &Pool, outbox: &OutboxTable, plan: PartitionPlan) -> Result<MigrationReport, MigrateError> {
    let mut conn = pool.get_conn().await?;
    apply(&mut Ddl { conn: &mut conn, planned: None }, outbox, plan).await
}

/// The statements [`migrate`] would run now, in order; runs none of them.
pub async fn planned(pool: &Pool, outbox: &OutboxTable, plan: PartitionPlan) -> Result<Vec<String>, MigrateError> {
    let mut conn = pool.get_conn().await?;
    let mut ddl = Ddl { conn: &mut conn, planned: Some(Vec::new()) };
    apply(&mut ddl, outbox, plan).await?;
    Ok(ddl.planned.unwrap_or_default())
}

async fn apply(ddl: &mut Ddl<'_>, outbox: &OutboxTable, plan: PartitionPlan) -> Result<MigrationReport, MigrateError> {
    let mut report =
        MigrationReport { applied: migrate_relay_tables(ddl, &outbox.schema).await?, ..Default::default() };
    let existing: Vec<String> = ddl
        .conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (&outbox.schema, &outbox.table),
        )
        .await?;
    if existing.is_empty() {
        create_outbox(ddl, outbox, plan).await?;
        report.outbox_created = true;
        return Ok(report);
    }
    report.added = add_missing(ddl, outbox, &existing).await?;
    if let PartitionPlan::Partitioned(period) | PartitionPlan::Convert(period) = plan {
        let convert = matches!(plan, PartitionPlan::Convert(_));
        (report.converted, report.partitions_added) = partition(ddl, outbox, period, convert).await?;
    }
    Ok(report)
}

/// Applies the relay's own numbered migrations not applied yet; their names.
async fn migrate_relay_tables(ddl: &mut Ddl<'_>, schema: &str) -> Result<Vec<&'static str>, mysql_async::Error> {
    let recorded: Option<u64> = ddl
        .conn
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'outbox_relay_migrations'",
            (schema,),
        )
        .await?;
    let recorded = recorded.unwrap_or_default() > 0;
    if !recorded || ddl.planned.is_none() {
        ddl.run(format!(
            "CREATE TABLE IF NOT EXISTS `{schema}`.`outbox_relay_migrations` (
  version    INT          NOT NULL PRIMARY KEY,
  name       VARCHAR(128) NOT NULL,
  applied_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB"
        ))
        .await?;
    }
    let done: Vec<u32> = if recorded || ddl.planned.is_none() {
        ddl.conn.query(format!("SELECT version FROM `{schema}`.`outbox_relay_migrations`")).await?
    } else {
        Vec::new()
    };
    let mut applied = Vec::new();
    for migration in MIGRATIONS.iter().filter(|m| !done.contains(&m.version)) {
        match ddl.run(migration.sql.replace("{schema}", schema)).await {
            // Another `migrate` (a second relay, a parallel run) added the column first.
            Err(mysql_async::Error::Server(e)) if e.code == DUPLICATE_COLUMN => {}
            other => other?,
        }
        // IGNORE: two relays migrating at once both create IF NOT EXISTS; one records it.
        ddl.run(format!(
            "INSERT IGNORE INTO `{schema}`.`outbox_relay_migrations` (version, name) VALUES ({}, '{}')",
            migration.version,
            migration.name.replace('\'', "''")
        ))
        .await?;
        applied.push(migration.name);
    }
    Ok(applied)
}

async fn create_outbox(ddl: &mut Ddl<'_>, outbox: &OutboxTable, plan: PartitionPlan) -> Result<(), MigrateError> {
    let table = OUTBOX_DDL.replace("{outbox}", &outbox.qualified());
    let table = match plan {
        PartitionPlan::AsItIs => table.replace("{keys}", PLAIN_KEYS),
        PartitionPlan::Partitioned(period) | PartitionPlan::Convert(period) => {
            let now = partitions::db_now(&mut *ddl.conn).await?;
            let clause = partitions::partition_clause(period, now, now).map_err(PartitionRefused::from)?;
            format!("{}\n{clause}", table.replace("{keys}", PARTITIONED_KEYS))
        }
    };
    ddl.run(table).await?;
    Ok(())
}

/// Brings an existing table to `period` partitions: converts it when it has none (and
/// `convert`), adds the partitions ahead when it has. Whether it converted, and how
/// many partitions it added.
async fn partition(
    ddl: &mut Ddl<'_>,
    outbox: &OutboxTable,
    period: PartitionPeriod,
    convert: bool,
) -> Result<(bool, usize), MigrateError> {
    let table = outbox.qualified();
    match partitions::read(&mut *ddl.conn, outbox).await? {
        Partitioning::Unpartitioned if convert => {
            convert_in_place(ddl, outbox, period).await?;
            Ok((true, 0))
        }
        Partitioning::Unpartitioned => Err(PartitionRefused::Unconverted { table, period }.into()),
        Partitioning::Periods(layout) if layout.period == period => {
            let now = partitions::db_now(&mut *ddl.conn).await?;
            let missing = layout.missing(now, partitions::PERIODS_AHEAD);
            if let Some(statement) = partitions::add_statement(outbox, period, &missing) {
                ddl.run(statement).await?;
            }
            Ok((false, missing.len()))
        }
        Partitioning::Periods(layout) => {
            Err(PartitionRefused::OtherPeriod { table, found: layout.period, asked: period }.into())
        }
        Partitioning::Foreign { method, expression } => {
            Err(PartitionRefused::Foreign { table, method, expression }.into())
        }
    }
}

/// Re-keys and partitions the table in one ALTER (the server copies every row): the
/// primary key gains `created_at`, and each unique key without it becomes a plain
/// index of the same name, as partitioning requires.
async fn convert_in_place(
    ddl: &mut Ddl<'_>,
    outbox: &OutboxTable,
    period: PartitionPeriod,
) -> Result<(), MigrateError> {
    let created_at: Option<String> = ddl
        .conn
        .exec_first(
            "SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = 'created_at'",
            (&outbox.schema, &outbox.table),
        )
        .await?;
    let found = created_at.unwrap_or_else(|| "missing".to_owned());
    if !found.eq_ignore_ascii_case("datetime") {
        return Err(PartitionRefused::CreatedAtType { table: outbox.qualified(), found }.into());
    }
    let now = partitions::db_now(&mut *ddl.conn).await?;
    let oldest = partitions::oldest_row(&mut *ddl.conn, outbox).await?.unwrap_or(now);
    let clause = partitions::partition_clause(period, oldest, now).map_err(PartitionRefused::from)?;
    let unique: Vec<(String, String)> = ddl
        .conn
        .exec(
            "SELECT INDEX_NAME, GROUP_CONCAT(CONCAT('`', COLUMN_NAME, '`') ORDER BY SEQ_IN_INDEX) \
             FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
             AND NON_UNIQUE = 0 AND INDEX_NAME <> 'PRIMARY' GROUP BY INDEX_NAME \
             HAVING SUM(COLUMN_NAME = 'created_at') = 0",
            (&outbox.schema, &outbox.table),
        )
        .await?;
    let mut changes = vec!["DROP PRIMARY KEY".to_owned(), "ADD PRIMARY KEY (id, created_at)".to_owned()];
    for (index, columns) in unique {
        changes.push(format!("DROP INDEX `{index}`"));
        changes.push(format!("ADD INDEX `{index}` ({columns})"));
    }
    let started = std::time::Instant::now();
    ddl.run(format!("ALTER TABLE {} {}\n{clause}", outbox.qualified(), changes.join(", "))).await?;
    if ddl.planned.is_none() {
        tracing::info!(table = %outbox.qualified(), %period, took = ?started.elapsed(), "outbox table converted to partitions");
    }
    Ok(())
}

async fn add_missing(
    ddl: &mut Ddl<'_>,
    outbox: &OutboxTable,
    existing: &[String],
) -> Result<Vec<&'static str>, mysql_async::Error> {
    let mut added = Vec::new();
    for (column, definition) in EXTRA_OUTBOX_COLUMNS {
        if !existing.iter().any(|c| c.eq_ignore_ascii_case(column)) {
            ddl.run(format!("ALTER TABLE {} ADD COLUMN `{column}` {definition}", outbox.qualified())).await?;
            added.push(*column);
        }
    }
    for (index, columns) in [CLAIM_INDEX, KEY_ORDER_INDEX] {
        if !has_index(&mut *ddl.conn, outbox, index).await? {
            ddl.run(format!("ALTER TABLE {} ADD INDEX `{index}` {columns}", outbox.qualified())).await?;
            added.push(index);
        }
    }
    Ok(added)
}

/// A condition on the outbox table that leaves out timed events the broker has not
/// delivered yet (they sit in its timer, found neither on their topic nor by a
/// consumer); empty for a table without `deliver_at`.
pub async fn delivered_by_now(conn: &mut Conn, outbox: &OutboxTable) -> Result<&'static str, mysql_async::Error> {
    let found: Option<String> = conn
        .exec_first(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = 'deliver_at'",
            (&outbox.schema, &outbox.table),
        )
        .await?;
    Ok(if found.is_some() { " AND (deliver_at IS NULL OR deliver_at <= UTC_TIMESTAMP(3))" } else { "" })
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
