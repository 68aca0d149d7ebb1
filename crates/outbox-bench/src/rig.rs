//! The test rig: the stack's database and broker, fresh outbox tables and topics, fast
//! bulk inserts, and relay processes (the real binary, so its memory is its own).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Pool};
use outbox_kit::{OutboxTable, RowStatus};
use outbox_relay::config::DbUrl;
use outbox_relay::store::{migrate, PartitionPlan};
use outbox_relay::ProcessStats;
use outbox_test_support::relay::RelayProcess;
use outbox_test_support::rows::{self, Row};
pub use outbox_test_support::unique;

use crate::cpu::Processes;
use crate::options::{Mode, Options};
use crate::workload::{filled_message_columns, Workload};

/// Rows per INSERT statement when filling a table.
const INSERT_CHUNK: usize = 500;
/// How long a new table may take to show on the relay's source (a replica behind).
const SOURCE_CATCH_UP: Duration = Duration::from_secs(120);

/// Connections and settings shared by every case.
pub struct Rig {
    pub options: Options,
    pub root: Pool,
    relay_bin: PathBuf,
    /// Relay logs and checkpoints of this run; removed at the end unless a case failed.
    scratch: PathBuf,
    keep_scratch: AtomicBool,
}

impl Rig {
    pub async fn new(options: Options) -> anyhow::Result<Self> {
        let root = outbox_relay::db::connect("bench", &DbUrl::new(&options.db_url), 8)
            .await
            .context("the local stack's database (start it: scripts/stack up)")?;
        let relay_bin = match &options.relay {
            Some(path) => path.clone(),
            None => std::env::current_exe()?.with_file_name("outbox-relay"),
        };
        if !relay_bin.exists() {
            bail!("relay binary {} not found (build it: cargo build --release --bins)", relay_bin.display());
        }
        let scratch = std::env::temp_dir().join(format!("outbox-bench-{}", std::process::id()));
        std::fs::create_dir_all(&scratch)?;
        Ok(Self { options, root, relay_bin, scratch, keep_scratch: AtomicBool::new(false) })
    }

    /// Machine and settings, for the report's header.
    pub fn describe(&self) -> String {
        let o = &self.options;
        format!(
            "run {:?}: {} events of {} B over {} keys, {} queues, batch {}, max_in_flight {}, extra relay env {:?}; relay {}",
            o.label,
            o.events,
            o.body_bytes,
            o.keys,
            o.queues,
            o.batch_size,
            o.max_in_flight,
            o.relay_env,
            self.relay_bin.display()
        )
    }

    /// The processes whose CPU a case reports, with `relay_pid` as the relay's.
    pub fn processes(&self, relay_pid: u32) -> Processes {
        Processes::new(relay_pid, self.options.stack_dir.as_deref())
    }

    /// A workload on a new topic.
    pub async fn workload(&self, name: &str) -> anyhow::Result<Workload> {
        let topic = unique(&format!("bench_{name}"));
        outbox_relay::ops::admin::create_topic(
            outbox_relay::ops::admin::NameServer::unsigned(&self.options.namesrv),
            "DefaultCluster",
            &topic,
            self.options.queues,
            None,
        )
        .await
        .with_context(|| format!("create topic {topic}"))?;
        Ok(Workload {
            prefix: unique(name),
            topic,
            keys: self.options.keys,
            body_bytes: self.options.body_bytes,
            message_columns: self.options.message_columns.then(filled_message_columns),
        })
    }

    /// A new, empty outbox table, once the relay's source shows it too: a replica still
    /// applying the previous case's load may not have it yet, and a relay started then
    /// refuses to start (the table does not exist on its source).
    pub async fn table(&self) -> anyhow::Result<OutboxTable> {
        let table = OutboxTable { schema: "app".into(), table: unique("bench") };
        migrate(&self.root, &table, PartitionPlan::AsItIs).await.context("create the benchmark's outbox table")?;
        let source = outbox_relay::db::connect("source", &DbUrl::new(&self.options.repl_url), 1)
            .await
            .context("connect to the relay's source")?;
        let visible = until("the new outbox table on the relay's source", SOURCE_CATCH_UP, || {
            let (source, table) = (source.clone(), &table);
            async move {
                let columns: Option<u64> = source
                    .get_conn()
                    .await?
                    .exec_first(
                        "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
                        (&table.schema, &table.table),
                    )
                    .await?;
                Ok(columns.unwrap_or(0) > 0)
            }
        })
        .await;
        // The wait's own outcome is what counts; a failed goodbye changes nothing.
        let _ = source.disconnect().await;
        visible?;
        Ok(table)
    }

    /// Drops a table (the 1M-row cases need the disk back).
    pub async fn drop_table(&self, table: &OutboxTable) -> anyhow::Result<()> {
        self.root.get_conn().await?.query_drop(format!("DROP TABLE {}", table.qualified())).await?;
        Ok(())
    }

    /// Inserts events `range` of `workload`, `per_tx` rows per transaction.
    pub async fn insert(
        &self,
        table: &OutboxTable,
        workload: &Workload,
        range: std::ops::Range<usize>,
        per_tx: usize,
    ) -> anyhow::Result<()> {
        let mut conn = self.root.get_conn().await?;
        let mut start = range.start;
        while start < range.end {
            let end = (start + per_tx).min(range.end);
            let mut tx = conn.start_transaction(Default::default()).await?;
            for chunk_start in (start..end).step_by(INSERT_CHUNK) {
                let chunk = chunk_start..(chunk_start + INSERT_CHUNK).min(end);
                let (sql, params) = insert_sql(table, workload, chunk);
                tx.exec_drop(sql, params).await?;
            }
            tx.commit().await?;
            start = end;
        }
        Ok(())
    }

    /// `keys` rows of `workload`'s topic, each of a key of its own (none of the
    /// workload's keys), FAILED: with the hold policy each holds its key.
    pub async fn fail_keys(&self, table: &OutboxTable, workload: &Workload, keys: usize) -> anyhow::Result<()> {
        if keys == 0 {
            return Ok(());
        }
        let sql = format!(
            "INSERT INTO {} (event_id, biz_key, topic, payload, status, last_error) \
             SELECT CONCAT(?, '-held-', seq), CONCAT('held-', seq), ?, '{{}}', 3, 'bench: held' FROM seq_1_to_{keys}",
            table.qualified()
        );
        self.root.get_conn().await?.exec_drop(sql, (&workload.prefix, &workload.topic)).await?;
        Ok(())
    }

    /// One single-row autocommit INSERT; returns when it is committed.
    pub async fn insert_one(
        conn: &mut mysql_async::Conn,
        table: &OutboxTable,
        workload: &Workload,
        i: usize,
    ) -> anyhow::Result<()> {
        let (sql, params) = insert_sql(table, workload, i..i + 1);
        conn.exec_drop(sql, params).await?;
        Ok(())
    }

    /// Rows of `table` not yet SENT.
    pub async fn unsent(&self, table: &OutboxTable) -> anyhow::Result<u64> {
        let count: Option<u64> = self
            .root
            .get_conn()
            .await?
            .query_first(format!(
                "SELECT COUNT(*) FROM {} WHERE status <> {}",
                table.qualified(),
                RowStatus::Sent.code()
            ))
            .await?;
        Ok(count.unwrap_or(0))
    }

    /// Transactions the primary has written to its binlog since it started.
    pub async fn binlog_commits(&self) -> anyhow::Result<u64> {
        let row: Option<(String, u64)> =
            self.root.get_conn().await?.query_first("SHOW GLOBAL STATUS LIKE 'Binlog_commits'").await?;
        row.map(|(_, commits)| commits).context("the primary reports no Binlog_commits")
    }

    /// The primary's binlog position now (file, pos).
    pub async fn binlog_end(&self) -> anyhow::Result<(String, u64)> {
        let row: Option<mysql_async::Row> = self.root.get_conn().await?.query_first("SHOW MASTER STATUS").await?;
        let row = row.context("binlog is off")?;
        let file: String = row.get(0).context("binlog file")?;
        let pos: u64 = row.get(1).context("binlog pos")?;
        Ok((file, pos))
    }

    /// The relay's checkpoint for `table` as mirrored on the primary.
    pub async fn mirrored_checkpoint(&self, table: &OutboxTable) -> anyhow::Result<Option<(String, u64)>> {
        Ok(self
            .root
            .get_conn()
            .await?
            .exec_first(
                "SELECT binlog_file, binlog_pos FROM app.outbox_relay_checkpoint WHERE source_id = ?",
                (format!("{}.{}", table.schema, table.table),),
            )
            .await?)
    }

    /// Starts the relay in `mode` on `table`, with a checkpoint directory of its own.
    pub fn relay(&self, mode: Mode, table: &OutboxTable, checkpoint: &Path) -> anyhow::Result<RelayChild> {
        self.relay_with(mode, table, checkpoint, &[])
    }

    /// The same, with `extra` settings (`OUTBOX_RELAY__...`) after the run's own.
    pub fn relay_with(
        &self,
        mode: Mode,
        table: &OutboxTable,
        checkpoint: &Path,
        extra: &[(String, String)],
    ) -> anyhow::Result<RelayChild> {
        let o = &self.options;
        let log = self.scratch.join(format!("{}.log", unique("relay")));
        let server_id = 200_000 + (uuid::Uuid::now_v7().as_u128() % 1_000_000_000) as u32;
        let config = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/relay.toml"));
        let mut env: Vec<(String, String)> = [
            ("MODE", mode.name().to_owned()),
            ("SOURCE__URL", o.repl_url.clone()),
            ("SOURCE__SERVER_ID", server_id.to_string()),
            ("PRIMARY__URL", o.writer_url.clone()),
            ("ROCKETMQ__NAMESRV", o.namesrv.clone()),
            ("ROCKETMQ__PRODUCER_GROUP", unique("bench")),
            ("OUTBOX__TABLE", table.table.clone()),
            ("CHECKPOINT__PATH", checkpoint.display().to_string()),
            ("LANES__BATCH_SIZE", o.batch_size.to_string()),
            ("LANES__MAX_IN_FLIGHT", o.max_in_flight.to_string()),
            ("LOG__LEVEL", "info,rocketmq_client_rust=warn,rocketmq_transport=warn,rocketmq_runtime=warn".to_owned()),
        ]
        .into_iter()
        .map(|(key, value)| (format!("OUTBOX_RELAY__{key}"), value))
        .collect();
        env.extend(o.relay_env.iter().cloned());
        env.extend(extra.iter().cloned());
        Ok(RelayChild(RelayProcess::start(&self.relay_bin, config, &env, &log)?))
    }

    /// Keeps the scratch directory after the run: a failed case's error names a relay
    /// log in it.
    pub fn keep_scratch(&self) {
        eprintln!("outbox-bench: relay logs and checkpoints kept in {}", self.scratch.display());
        self.keep_scratch.store(true, Ordering::Relaxed);
    }

    /// A fresh checkpoint directory.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.scratch.join(unique("checkpoint"))
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if !self.keep_scratch.load(Ordering::Relaxed) {
            let _ = std::fs::remove_dir_all(&self.scratch);
        }
    }
}

/// A running relay process.
pub struct RelayChild(RelayProcess);

impl RelayChild {
    /// Waits until `/readyz` answers 200 as the leader (in binlog mode: the reader
    /// streams from a saved position); when. A relay is ready as a standby too, before
    /// it has taken the lease: stopped then, it has saved no checkpoint, and the next
    /// start would be a first start, drained by a full sweep instead of the binlog.
    pub async fn wait_ready(&mut self) -> anyhow::Result<Instant> {
        self.0.wait_readiness_with(true, r#""role":"leader""#, Duration::from_secs(300)).await?;
        Ok(Instant::now())
    }

    /// A counter from /metrics, summed over its labels.
    pub fn metric_sum(&self, name: &str) -> anyhow::Result<f64> {
        self.0.metric_sum(name)
    }

    /// A histogram's cumulative buckets from /metrics.
    pub fn histogram(&self, name: &str) -> anyhow::Result<Vec<(f64, f64)>> {
        self.0.histogram(name)
    }

    /// Peak resident memory so far (VmHWM), MiB.
    pub fn peak_rss_mib(&self) -> anyhow::Result<f64> {
        let pid = self.0.pid();
        let stats = ProcessStats::of_pid(pid).with_context(|| format!("read /proc/{pid} (has the relay exited?)"))?;
        Ok(stats.peak_resident_bytes as f64 / (1024.0 * 1024.0))
    }

    pub fn pid(&self) -> u32 {
        self.0.pid()
    }

    /// SIGTERM and wait; an error when it does not exit 0.
    pub fn stop(mut self) -> anyhow::Result<()> {
        match self.0.terminate(Duration::from_secs(60))? {
            Some(0) => Ok(()),
            code => bail!("the relay exited with {code:?}; log {}", self.0.log_path().display()),
        }
    }
}

fn insert_sql(table: &OutboxTable, workload: &Workload, range: std::ops::Range<usize>) -> (String, Params) {
    rows::insert_sql_with(
        table,
        range.map(|i| Row {
            event_id: workload.event_id(i),
            biz_key: workload.biz_key(i),
            topic: workload.topic.clone(),
            payload: workload.payload(i),
        }),
        workload.message_columns.as_ref(),
    )
}

/// Polls `check` every 50 ms until it is true or `limit` passes.
pub async fn until<F, Fut>(what: &str, limit: Duration, mut check: F) -> anyhow::Result<Instant>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    outbox_test_support::until(what, limit, || {
        let checked = check();
        async move { Ok(checked.await?.then(Instant::now)) }
    })
    .await
}
