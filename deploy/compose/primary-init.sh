# Sourced by the MySQL image's entrypoint on the primary's first start
# (docker-entrypoint-initdb.d; `docker_process_sql` is its client, logged in as root
# through a defaults file). The replica receives all of it through replication. The
# passwords come from the mounted secrets, never from a command line.
secret() { cat "/run/secrets/$1"; }
docker_process_sql <<SQL
CREATE DATABASE IF NOT EXISTS app;

-- The replica's replication user.
CREATE USER IF NOT EXISTS 'replicator'@'%' IDENTIFIED BY '$(secret replicator_password)';
GRANT REPLICATION SLAVE ON *.* TO 'replicator'@'%';

-- The relay's least-privilege users (docs/deployment.md, "Database set-up"); the
-- writer may also run migrate here (CREATE, ALTER, INDEX).
CREATE USER IF NOT EXISTS 'outbox_repl'@'%' IDENTIFIED BY '$(secret outbox_repl_password)';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'outbox_repl'@'%';
GRANT SELECT ON app.* TO 'outbox_repl'@'%';
CREATE USER IF NOT EXISTS 'outbox_writer'@'%' IDENTIFIED BY '$(secret outbox_writer_password)';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP, LOCK TABLES ON app.* TO 'outbox_writer'@'%';
GRANT SESSION_VARIABLES_ADMIN ON *.* TO 'outbox_writer'@'%';
SQL
