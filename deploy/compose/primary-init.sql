-- Runs once on the primary's first start (docker-entrypoint-initdb.d); the replica
-- receives all of it through replication (GTID auto-position from the beginning).
CREATE DATABASE IF NOT EXISTS app;

-- The outbox table and the relay's own tables come from the `migrate` service.

-- The replica's replication user.
CREATE USER IF NOT EXISTS 'replicator'@'%' IDENTIFIED BY 'replicator-secret';
GRANT REPLICATION SLAVE ON *.* TO 'replicator'@'%';

-- The relay's least-privilege users (see docs/deployment.md, "Database set-up").
CREATE USER IF NOT EXISTS 'outbox_repl'@'%' IDENTIFIED BY 'repl-secret';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'outbox_repl'@'%';
GRANT SELECT ON app.* TO 'outbox_repl'@'%';
CREATE USER IF NOT EXISTS 'outbox_writer'@'%' IDENTIFIED BY 'writer-secret';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX ON app.* TO 'outbox_writer'@'%';
GRANT SESSION_VARIABLES_ADMIN ON *.* TO 'outbox_writer'@'%';
