#!/bin/sh
# Runs once on the replica's first start: replicate the primary from the beginning
# with GTID auto-position (the primary's init SQL arrives this way too).
set -eu
mysql -uroot -p"$MYSQL_ROOT_PASSWORD" <<SQL
CHANGE REPLICATION SOURCE TO
  SOURCE_HOST = 'mysql', SOURCE_PORT = 3306,
  SOURCE_USER = 'replicator', SOURCE_PASSWORD = 'replicator-secret',
  SOURCE_AUTO_POSITION = 1, GET_SOURCE_PUBLIC_KEY = 1;
START REPLICA;
SQL
