//! The local stack as the harness disturbs it: its processes killed by pid file,
//! `scripts/stack up` to bring back whatever is down, and SQL on the replicas.
//! Addresses come from `eval "$(scripts/stack env)"`.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{bail, Context};
use mysql_async::prelude::Queryable;

/// How often `up` runs `scripts/stack up` before it gives up, and the pause between.
const UP_ATTEMPTS: u32 = 3;
const UP_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_secs(5);

/// A stack process the harness kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StackProcess {
    Primary,
    NameServer,
    /// broker-a of the cluster.
    Broker,
    /// broker-b of the cluster.
    BrokerB,
    /// broker-a's slave.
    BrokerASlave,
}

impl StackProcess {
    fn pid_file(self) -> &'static str {
        match self {
            StackProcess::Primary => "mariadb.pid",
            StackProcess::NameServer => "namesrv.pid",
            StackProcess::Broker => "broker.pid",
            StackProcess::BrokerB => "broker-b.pid",
            StackProcess::BrokerASlave => "broker-a-slave.pid",
        }
    }
}

/// One replica the relay can read: its replication user's URL and its root URL.
#[derive(Debug, Clone)]
pub(crate) struct Replica {
    pub(crate) repl_url: String,
    pub(crate) root_url: String,
}

/// The stack's addresses and controls.
#[derive(Debug, Clone)]
pub(crate) struct Stack {
    state: PathBuf,
    script: PathBuf,
    log: PathBuf,
    pub(crate) primary_root_url: String,
    pub(crate) writer_url: String,
    pub(crate) namesrv: String,
    pub(crate) replicas: [Replica; 2],
}

fn var(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| format!("{name} is not set: run eval \"$(scripts/stack env)\" first"))
}

impl Stack {
    /// The stack the environment names; `log` receives `scripts/stack` output.
    pub(crate) fn from_env(log: &Path) -> anyhow::Result<Self> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/stack");
        Ok(Self {
            state: PathBuf::from(var("OUTBOX_RELAY_TEST_STACK")?),
            script,
            log: log.to_owned(),
            primary_root_url: var("OUTBOX_RELAY_TEST_DB_URL")?,
            writer_url: var("OUTBOX_RELAY_TEST_WRITER_URL")?,
            namesrv: var("OUTBOX_RELAY_TEST_NAMESRV")?,
            replicas: [
                Replica {
                    repl_url: var("OUTBOX_RELAY_TEST_REPL_URL")?,
                    root_url: var("OUTBOX_RELAY_TEST_REPLICA_ROOT_URL")?,
                },
                Replica {
                    repl_url: var("OUTBOX_RELAY_TEST_REPL2_URL")?,
                    root_url: var("OUTBOX_RELAY_TEST_REPLICA2_ROOT_URL")?,
                },
            ],
        })
    }

    /// SIGKILL of `process`.
    pub(crate) async fn kill(&self, process: StackProcess) -> anyhow::Result<()> {
        self.signal(process, "-KILL").await
    }

    /// Sends `signal` (`-KILL`, `-STOP`, `-CONT`) to `process`.
    pub(crate) async fn signal(&self, process: StackProcess, signal: &str) -> anyhow::Result<()> {
        let file = self.state.join(process.pid_file());
        let pid = std::fs::read_to_string(&file).with_context(|| format!("read {}", file.display()))?;
        let status = tokio::process::Command::new("kill").args([signal, pid.trim()]).status().await?;
        anyhow::ensure!(status.success(), "kill {signal} {} ({process:?}) failed", pid.trim());
        Ok(())
    }

    /// `scripts/stack up`, tried up to three times: a stack process that died on its
    /// own right after it started is started again.
    pub(crate) async fn up(&self) -> anyhow::Result<()> {
        let mut attempt = 1;
        loop {
            match self.up_once().await {
                Err(error) if attempt < UP_ATTEMPTS => {
                    tracing::warn!("{error:#}; trying again");
                    tokio::time::sleep(UP_RETRY_PAUSE).await;
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    /// `scripts/stack up`: starts whatever is down and waits until all is ready.
    async fn up_once(&self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let status = tokio::process::Command::new(&self.script)
            .arg("up")
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .status()
            .await
            .with_context(|| format!("run {}", self.script.display()))?;
        if !status.success() {
            bail!("scripts/stack up failed ({status}); read {}", self.log.display());
        }
        Ok(())
    }

    /// The first column of the first row `sql` returns on the server at `url`.
    pub(crate) async fn value(&self, url: &str, sql: &str) -> anyhow::Result<Option<String>> {
        let mut conn = mysql_async::Conn::from_url(url).await.with_context(|| format!("connect for {sql}"))?;
        let value: Option<Option<String>> = conn.query_first(sql).await.with_context(|| format!("run {sql}"))?;
        conn.disconnect().await?;
        Ok(value.flatten())
    }

    /// Runs `sql` on the server at `url` over a connection of its own.
    pub(crate) async fn sql(&self, url: &str, sql: &str) -> anyhow::Result<()> {
        let mut conn = mysql_async::Conn::from_url(url).await.with_context(|| format!("connect for {sql}"))?;
        conn.query_drop(sql).await.with_context(|| format!("run {sql}"))?;
        conn.disconnect().await?;
        Ok(())
    }
}
