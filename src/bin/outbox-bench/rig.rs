//! The test rig: the stack's database and broker, fresh outbox tables and topics, fast
//! bulk inserts, and relay processes (the real binary, so its memory is its own).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Pool, Value};
use outbox_relay::config::DbUrl;
use outbox_relay::store::{migrate, OutboxTable};

use crate::options::{Mode, Options};
use crate::workload::Workload;

/// Rows per INSERT statement when filling a table.
const INSERT_CHUNK: usize = 500;

/// Connections and settings shared by every case.
pub struct Rig {
    pub options: Options,
    pub root: Pool,
    relay_bin: PathBuf,
    scratch: PathBuf,
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
        Ok(Self { options, root, relay_bin, scratch })
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

    /// A workload on a new topic.
    pub async fn workload(&self, name: &str) -> anyhow::Result<Workload> {
        let topic = unique(&format!("bench_{name}"));
        outbox_relay::admin::create_topic(&self.options.namesrv, "DefaultCluster", &topic, self.options.queues)
            .await
            .with_context(|| format!("create topic {topic}"))?;
        Ok(Workload { prefix: unique(name), topic, keys: self.options.keys, body_bytes: self.options.body_bytes })
    }

    /// A new, empty outbox table.
    pub async fn table(&self) -> anyhow::Result<OutboxTable> {
        let table = OutboxTable { schema: "app".into(), table: unique("bench") };
        migrate(&self.root, &table).await.context("create the benchmark's outbox table")?;
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
            .query_first(format!("SELECT COUNT(*) FROM {} WHERE status <> 2", table.qualified()))
            .await?;
        Ok(count.unwrap_or(0))
    }

    /// The source's binlog position now (file, pos).
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
        let o = &self.options;
        let log = self.scratch.join(format!("{}.log", unique("relay")));
        let server_id = 200_000 + (uuid::Uuid::now_v7().as_u128() % 1_000_000_000) as u32;
        let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/relay.toml");
        let child = Command::new(&self.relay_bin)
            .args(["run", "--config", config])
            .env("OUTBOX_RELAY__MODE", mode.name())
            .env("OUTBOX_RELAY__SOURCE__URL", &o.repl_url)
            .env("OUTBOX_RELAY__SOURCE__SERVER_ID", server_id.to_string())
            .env("OUTBOX_RELAY__PRIMARY__URL", &o.writer_url)
            .env("OUTBOX_RELAY__ROCKETMQ__NAMESRV", &o.namesrv)
            .env("OUTBOX_RELAY__ROCKETMQ__PRODUCER_GROUP", unique("bench"))
            .env("OUTBOX_RELAY__OUTBOX__TABLE", &table.table)
            .env("OUTBOX_RELAY__CHECKPOINT__PATH", checkpoint)
            .env("OUTBOX_RELAY__HTTP__LISTEN", "127.0.0.1:0")
            .env("OUTBOX_RELAY__LANES__BATCH_SIZE", o.batch_size.to_string())
            .env("OUTBOX_RELAY__LANES__MAX_IN_FLIGHT", o.max_in_flight.to_string())
            .env(
                "OUTBOX_RELAY__LOG__LEVEL",
                "info,rocketmq_client_rust=warn,rocketmq_transport=warn,rocketmq_runtime=warn",
            )
            .env("NO_COLOR", "1")
            .envs(o.relay_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("start {}", self.relay_bin.display()))?;
        Ok(RelayChild { child, log })
    }

    /// A fresh checkpoint directory.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.scratch.join(unique("checkpoint"))
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// A running relay process.
pub struct RelayChild {
    child: Child,
    log: PathBuf,
}

impl RelayChild {
    /// Waits for `text` in the log; when it appeared.
    pub async fn wait_log(&mut self, text: &str) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if self.log_text().contains(text) {
                return Ok(Instant::now());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("the relay exited ({status}) before logging {text:?}; log {}", self.log.display());
            }
            if Instant::now() > deadline {
                bail!("the relay never logged {text:?}; log {}", self.log.display());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the relay is ready to relay (`tailing binlog`, or the sweep's first period).
    pub async fn wait_ready(&mut self, mode: Mode) -> anyhow::Result<Instant> {
        self.wait_log(match mode {
            Mode::Binlog => "tailing binlog",
            Mode::Poll => "sweeping every",
        })
        .await
    }

    /// A counter from /metrics.
    pub fn metric(&self, name: &str) -> anyhow::Result<f64> {
        use std::io::{Read, Write};
        let log = self.log_text();
        let address = log
            .split("metrics on http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .context("no metrics address in the relay log yet")?;
        let mut stream = std::net::TcpStream::connect(address)?;
        write!(stream, "GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n")?;
        let mut body = String::new();
        stream.read_to_string(&mut body)?;
        body.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("{name} not on /metrics"))
    }

    /// Peak resident memory so far (VmHWM), MiB.
    pub fn peak_rss_mib(&self) -> anyhow::Result<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .context("VmHWM in /proc/PID/status")?;
        Ok(kib / 1024.0)
    }

    /// SIGTERM and wait; an error when it does not exit 0.
    pub fn stop(mut self) -> anyhow::Result<()> {
        Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status()?;
        let status = self.child.wait()?;
        if !status.success() {
            bail!("the relay exited with {status}; log {}", self.log.display());
        }
        Ok(())
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for RelayChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn insert_sql(table: &OutboxTable, workload: &Workload, range: std::ops::Range<usize>) -> (String, Params) {
    let values = vec!["(?, ?, ?, ?)"; range.len()].join(", ");
    let sql = format!("INSERT INTO {} (event_id, biz_key, topic, payload) VALUES {values}", table.qualified());
    let params: Vec<Value> = range
        .flat_map(|i| {
            [
                Value::from(workload.event_id(i)),
                Value::from(workload.biz_key(i)),
                Value::from(workload.topic.as_str()),
                Value::from(workload.payload(i)),
            ]
        })
        .collect();
    (sql, Params::Positional(params))
}

/// A name unique to this run.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// Polls `check` every 50 ms until it is true or `limit` passes.
pub async fn until<F, Fut>(what: &str, limit: Duration, mut check: F) -> anyhow::Result<Instant>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if check().await? {
            return Ok(Instant::now());
        }
        if Instant::now() > deadline {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
