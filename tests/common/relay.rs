//! The relay binary as a child process, configured for one test: its own outbox
//! table, checkpoint directory and replica server_id, so tests can run side by side.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{unique, Stack};

/// Settings a test may change; the rest comes from config/relay.toml.
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
}

/// A running `outbox-relay run`.
pub struct RelayProcess {
    child: Child,
    pub log: PathBuf,
}

impl RelayProcess {
    pub fn start(stack: &Stack, options: &RelayOptions) -> Self {
        let log = std::env::temp_dir().join(format!("{}.log", unique("relay")));
        let log_file = std::fs::File::create(&log).expect("relay log file");
        let server_id = 100_000 + (uuid::Uuid::now_v7().as_u128() % 1_000_000_000) as u32;
        let example = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/config/relay.toml"));
        let mut command = Command::new(env!("CARGO_BIN_EXE_outbox-relay"));
        command.arg("run").arg("--config").arg(options.config.as_ref().unwrap_or(&example));
        if options.source {
            command
                .env("OUTBOX_RELAY__SOURCE__URL", &stack.repl_url)
                .env("OUTBOX_RELAY__SOURCE__SERVER_ID", server_id.to_string());
        }
        command
            .env("OUTBOX_RELAY__PRIMARY__URL", &stack.writer_url)
            .env("OUTBOX_RELAY__ROCKETMQ__NAMESRV", &stack.namesrv)
            .env("OUTBOX_RELAY__OUTBOX__TABLE", &options.table)
            .env("OUTBOX_RELAY__CHECKPOINT__PATH", &options.checkpoint_dir)
            .env("OUTBOX_RELAY__CHECKPOINT__INTERVAL_MS", "100")
            .env("OUTBOX_RELAY__HTTP__LISTEN", "127.0.0.1:0")
            .env("OUTBOX_RELAY__RETRY__BACKOFF_INITIAL_MS", "200")
            .env("OUTBOX_RELAY__RETRY__BACKOFF_MAX_MS", "2000")
            .env("OUTBOX_RELAY__ROCKETMQ__PRODUCER_GROUP", unique("relay"))
            .env("NO_COLOR", "1")
            .envs(options.extra_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(log_file);
        let child = command.spawn().expect("spawn outbox-relay");
        Self { child, log }
    }

    /// Waits until the relay logs that it is tailing the binlog (it saved its start
    /// position before that), so rows written afterwards are the binlog path's.
    pub async fn wait_tailing(&mut self) {
        self.wait_log("tailing binlog").await;
    }

    /// Waits until the relay's log contains `text`; panics if it exits first.
    pub async fn wait_log(&mut self, text: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("poll relay") {
                panic!("relay exited early ({status}):\n{}", self.log_text());
            }
            if self.log_text().contains(text) {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "relay never logged {text:?}:\n{}", self.log_text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The value of counter or gauge `name` on the relay's /metrics.
    pub fn metric(&self, name: &str) -> f64 {
        let body = self.http_get("/metrics");
        body.lines()
            .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("metric {name} not on /metrics:\n{body}"))
    }

    /// The OS process id (for SIGSTOP/SIGKILL scenarios).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the relay to exit on its own (a start-up error); its exit code.
    pub async fn wait_exit(&mut self, deadline: Duration) -> Option<i32> {
        let until = tokio::time::Instant::now() + deadline;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll relay") {
                return status.code();
            }
            assert!(
                tokio::time::Instant::now() < until,
                "relay still running after {deadline:?}:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILL: no drain, no final checkpoint.
    pub fn kill(mut self) {
        self.child.kill().expect("kill relay");
        self.child.wait().expect("reap relay");
    }

    /// SIGTERM and wait for a clean exit (drain + checkpoint); returns the exit code.
    pub fn stop(mut self) -> Option<i32> {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().expect("send SIGTERM");
        self.child.wait().expect("wait relay").code()
    }

    /// GET `path` from the relay's metrics/health endpoint (its address is in the log).
    pub fn http_get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let log = self.log_text();
        let address = log
            .split("metrics on http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("no metrics address in the relay log:\n{log}"));
        let mut stream = std::net::TcpStream::connect(address).expect("connect to the metrics endpoint");
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").expect("send request");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read response");
        response
    }

    /// The relay's log so far, for assertion messages.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
