# Sourced by the MySQL image's entrypoint on the replica's first start: replicate the
# primary from the beginning with GTID auto-position (the primary's init arrives this
# way too). The replication password comes from the mounted secret.
docker_process_sql <<SQL
CHANGE REPLICATION SOURCE TO
  SOURCE_HOST = 'mysql', SOURCE_PORT = 3306,
  SOURCE_USER = 'replicator', SOURCE_PASSWORD = '$(cat /run/secrets/replicator_password)',
  SOURCE_AUTO_POSITION = 1, GET_SOURCE_PUBLIC_KEY = 1;
START REPLICA;
SQL
