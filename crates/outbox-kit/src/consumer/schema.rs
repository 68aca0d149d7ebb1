//! The consumer kit's tables, created in the consumer's own database (the one its
//! business writes go to, so the dedup mark commits in the same transaction).
//!
//! - `event_dedup`: one row per handled event; the primary key is the final judge of
//!   "already handled". `PROCESSED` = the business write committed with it;
//!   `REJECTED` = judged unprocessable, quarantined, never retried.
//! - `event_quarantine`: the full message of every REJECTED event, for a person.
//! - `entity_version`: the newest version applied per entity, for the version guard.

use mysql_async::prelude::Queryable;
use mysql_async::Pool;

const DDL: [&str; 3] = [
    "CREATE TABLE IF NOT EXISTS event_dedup (
  event_id   VARCHAR(64)  NOT NULL PRIMARY KEY,
  status     VARCHAR(16)  NOT NULL COMMENT 'PROCESSED / REJECTED',
  msg_id     VARCHAR(128) NULL,
  created_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  KEY idx_created (created_at)
) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS event_quarantine (
  id         BIGINT PRIMARY KEY AUTO_INCREMENT,
  event_id   VARCHAR(64)   NOT NULL,
  msg_id     VARCHAR(128)  NULL,
  biz_key    VARCHAR(64)   NULL,
  body       LONGBLOB      NOT NULL,
  reason     VARCHAR(1024) NOT NULL,
  created_at DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  KEY idx_event (event_id)
) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS entity_version (
  entity     VARCHAR(64)  NOT NULL,
  entity_key VARCHAR(128) NOT NULL,
  version    BIGINT       NOT NULL,
  PRIMARY KEY (entity, entity_key)
) ENGINE=InnoDB",
];

/// Creates the kit's tables in the pool's default database; idempotent.
pub async fn migrate(pool: &Pool) -> Result<(), mysql_async::Error> {
    let mut conn = pool.get_conn().await?;
    for ddl in DDL {
        conn.query_drop(ddl).await?;
    }
    Ok(())
}
