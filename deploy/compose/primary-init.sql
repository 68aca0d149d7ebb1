-- Runs once on the primary's first start (docker-entrypoint-initdb.d); the replica
-- receives all of it through replication (GTID auto-position from the beginning).
CREATE DATABASE IF NOT EXISTS app;

-- The outbox table (what `outbox-relay migrate` creates).
CREATE TABLE IF NOT EXISTS app.outbox_event (
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
) ENGINE=InnoDB;

-- The replica's replication user.
CREATE USER IF NOT EXISTS 'replicator'@'%' IDENTIFIED BY 'replicator-secret';
GRANT REPLICATION SLAVE ON *.* TO 'replicator'@'%';

-- The relay's least-privilege users (see the README's database set-up).
CREATE USER IF NOT EXISTS 'outbox_repl'@'%' IDENTIFIED BY 'repl-secret';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'outbox_repl'@'%';
GRANT SELECT ON app.* TO 'outbox_repl'@'%';
CREATE USER IF NOT EXISTS 'outbox_writer'@'%' IDENTIFIED BY 'writer-secret';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX ON app.* TO 'outbox_writer'@'%';
GRANT SESSION_VARIABLES_ADMIN ON *.* TO 'outbox_writer'@'%';
