//! The relay binary as a child process, configured for one test: its own outbox
//! table, checkpoint directory and replica server_id, so tests can run side by side.
//! A thin layer over `outbox_test_support::relay` that fails the test on any error.

use std::path::PathBuf;
use std::time::Duration;

use outbox_test_support::relay::RelayProcess as Child;

use super::{unique, Stack};

/// Settings a test may change; the rest comes from config/relay.toml.
#[derive(Clone)]
pub struct RelayOptions {
    pub table: String,
    pub checkpoint_dir: PathBuf,
    pub extra_env: Vec<(String, String)>,
    /// A config file instead of config/relay.toml.
    pub config: Option<PathBuf>,
    /// Point `[source]` at the stack (off: the config file decides).
    pub source: bool,
}

impl RelayOptions {
    /// A fresh checkpoint directory for `table`.
    pub fn new(table: &str) -> Self {
        let checkpoint_dir = std::env::temp_dir().join(unique("relay-ckpt"));
        Self { table: table.to_owned(), checkpoint_dir, extra_env: Vec::new(), config: None, source: true }
    }

    pub fn env(mut self, key: &str, value: impl ToString) -> Self {
        self.extra_env.push((key.to_owned(), value.to_string()));
        self
    }

    /// Every variable the relay gets: the stack's addresses, then the test's own.
    pub fn environment(&self, stack: &Stack) -> Vec<(String, String)> {
        let server_id = 100_000 + (uuid::Uuid::now_v7().as_u128() % 1_000_000_000) as u32;
        let mut env: Vec<(String, String)> = Vec::new();
        let mut set = |key: &str, value: String| env.push((key.to_owned(), value));
        if self.source {
            set("OUTBOX_RELAY__SOURCE__URL", stack.repl_url.clone());
            set("OUTBOX_RELAY__SOURCE__SERVER_ID", server_id.to_string());
        }
        set("OUTBOX_RELAY__PRIMARY__URL", stack.writer_url.clone());
        set("OUTBOX_RELAY__ROCKETMQ__NAMESRV", stack.namesrv.clone());
        set("OUTBOX_RELAY__OUTBOX__TABLE", self.table.clone());
        set("OUTBOX_RELAY__CHECKPOINT__PATH", self.checkpoint_dir.display().to_string());
        set("OUTBOX_RELAY__CHECKPOINT__INTERVAL_MS", "100".into());
        set("OUTBOX_RELAY__RETRY__BACKOFF_INITIAL_MS", "200".into());
        set("OUTBOX_RELAY__RETRY__BACKOFF_MAX_MS", "2000".into());
        set("OUTBOX_RELAY__ROCKETMQ__PRODUCER_GROUP", unique("relay"));
        set("OUTBOX_RELAY__LEADER__LEASE_MS", "8000".into());
        env.extend(self.extra_env.iter().cloned());
        env
    }
}

/// A running `outbox-relay run`.
pub struct RelayProcess(Child);

impl RelayProcess {
    pub fn start(stack: &Stack, options: &RelayOptions) -> Self {
        let log = std::env::temp_dir().join(format!("{}.log", unique("relay")));
        let example = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/config/relay.toml"));
        let config = options.config.as_ref().unwrap_or(&example);
        let binary = PathBuf::from(env!("CARGO_BIN_EXE_outbox-relay"));
        Self(Child::start(&binary, config, &options.environment(stack), &log).expect("start outbox-relay"))
    }

    /// Waits until `/readyz` answers 200 as the leader: in binlog mode the reader
    /// streams (its start position was saved before), so rows written afterwards are
    /// the binlog path's.
    pub async fn wait_ready(&mut self) {
        self.wait_role("leader", Duration::from_secs(60)).await;
    }

    /// Waits until `/readyz` answers 200 with `"role":"{role}"` (leader or standby).
    pub async fn wait_role(&mut self, role: &str, deadline: Duration) {
        let wanted = format!(r#""role":"{role}""#);
        match self.0.wait_readiness_with(true, &wanted, deadline).await {
            Ok(_) => {}
            Err(error) => panic!("{error:#}\n{}", self.log_text()),
        }
    }

    /// Waits until `/readyz` says `ready` (200) or not (503); returns the response.
    pub async fn wait_readiness(&mut self, ready: bool, deadline: Duration) -> String {
        self.wait_readiness_with(ready, "", deadline).await
    }

    /// Like [`Self::wait_readiness`], for an answer that also contains `text`.
    pub async fn wait_readiness_with(&mut self, ready: bool, text: &str, deadline: Duration) -> String {
        match self.0.wait_readiness_with(ready, text, deadline).await {
            Ok(response) => response,
            Err(error) => panic!("{error:#}\n{}", self.log_text()),
        }
    }

    /// The value of counter or gauge `name` on the relay's /metrics.
    pub fn metric(&self, name: &str) -> f64 {
        self.0.metric(name).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// The values of `names`, all from one scrape of /metrics.
    pub fn metrics<const N: usize>(&self, names: [&str; N]) -> [f64; N] {
        self.0.metrics(names).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Like [`Self::metric`], `None` while the relay does not answer (yet).
    pub fn try_metric(&self, name: &str) -> Option<f64> {
        self.0.metric(name).ok()
    }

    /// The sum of every series of the metric family `name`.
    pub fn metric_sum(&self, name: &str) -> f64 {
        self.0.metric_sum(name).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Where its metrics and health endpoint listens (host:port).
    pub fn http_address(&self) -> String {
        self.0.http_address().to_owned()
    }

    /// The OS process id (for SIGSTOP/SIGKILL scenarios).
    pub fn pid(&self) -> u32 {
        self.0.pid()
    }

    /// Waits for the relay to exit on its own; its exit code.
    pub async fn wait_exit(&mut self, deadline: Duration) -> Option<i32> {
        match self.0.wait_exit(deadline).await {
            Ok(code) => code,
            Err(error) => panic!("{error:#}\n{}", self.log_text()),
        }
    }

    /// SIGKILL: no drain, no final checkpoint.
    pub fn kill(mut self) {
        self.0.kill().expect("kill relay");
    }

    /// SIGTERM and wait for the exit (drain + checkpoint, well within 30 s); returns
    /// the exit code.
    pub fn stop(&mut self) -> Option<i32> {
        self.0.terminate(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e:#}\n{}", self.log_text()))
    }

    /// GET `path` from the relay's metrics and health endpoint: the whole response.
    pub fn http_get(&self, path: &str) -> String {
        self.0.get(path).unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.log_text()))
    }

    /// The `/readyz` response, or `None` while the endpoint does not answer (starting).
    pub fn readyz(&self) -> Option<String> {
        self.0.get("/readyz").ok()
    }

    /// The relay's log so far, for assertion messages.
    pub fn log_text(&self) -> String {
        self.0.log_text()
    }
}
