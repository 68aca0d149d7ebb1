//! The relay binary as a child process: started with its configuration in
//! environment variables, its metrics and health endpoint on a free loopback port,
//! its log in a file. Readiness is `/readyz`, never the log text.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

/// A running `outbox-relay run`.
pub struct RelayProcess {
    child: Child,
    log: PathBuf,
    /// `host:port` of its metrics and health endpoint.
    http: String,
}

/// A signal the tests send to a relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Stop,
    Cont,
}

/// How `/readyz` names the leader role.
const LEADER: &str = r#""role":"leader""#;

/// How long a request to the relay's HTTP endpoint may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(2);

/// A loopback port that is free now (the relay binds it right after).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl RelayProcess {
    /// Starts `binary run --config config` with `env` on top (`OUTBOX_RELAY__...`),
    /// logging to `log`.
    pub fn start(binary: &Path, config: &Path, env: &[(String, String)], log: &Path) -> anyhow::Result<Self> {
        let http = format!("127.0.0.1:{}", free_port()?);
        let log_file = std::fs::File::create(log).with_context(|| format!("create {}", log.display()))?;
        let child = Command::new(binary)
            .arg("run")
            .arg("--config")
            .arg(config)
            .env("OUTBOX_RELAY__HTTP__LISTEN", &http)
            .env("NO_COLOR", "1")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("start {}", binary.display()))?;
        Ok(Self { child, log: log.to_owned(), http })
    }

    /// Where its metrics and health endpoint listens (host:port).
    pub fn http_address(&self) -> &str {
        &self.http
    }

    /// GET `path` from the metrics and health endpoint: the whole HTTP response. A
    /// relay that does not answer within 2 s (stopped, or hung) is an error.
    pub fn get(&self, path: &str) -> std::io::Result<String> {
        use std::io::{Read, Write};
        let address: std::net::SocketAddr =
            self.http.parse().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let mut stream = std::net::TcpStream::connect_timeout(&address, HTTP_TIMEOUT)?;
        stream.set_read_timeout(Some(HTTP_TIMEOUT))?;
        stream.set_write_timeout(Some(HTTP_TIMEOUT))?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.http)?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        Ok(response)
    }

    /// Waits until `/readyz` says `ready` (200) or not (503); returns that response.
    /// Fails when the relay exits first or `deadline` passes.
    pub async fn wait_readiness(&mut self, ready: bool, deadline: Duration) -> anyhow::Result<String> {
        self.wait_readiness_with(ready, "", deadline).await
    }

    /// Like [`Self::wait_readiness`], for an answer that also contains `text` (such as
    /// `"role":"leader"`).
    pub async fn wait_readiness_with(&mut self, ready: bool, text: &str, deadline: Duration) -> anyhow::Result<String> {
        let wanted = if ready { "HTTP/1.0 200" } else { "HTTP/1.0 503" };
        let what = format!("/readyz to answer {wanted} {text} (log {})", self.log.display());
        crate::until(&what, deadline, || std::future::ready(self.readiness_is(wanted, text))).await
    }

    /// The `/readyz` response if it starts with `status` and contains `text`; an error
    /// once the relay exited.
    fn readiness_is(&mut self, status: &str, text: &str) -> anyhow::Result<Option<String>> {
        if let Some(code) = self.child.try_wait()? {
            bail!("the relay exited ({code}) before /readyz answered {status} {text}; log {}", self.log.display());
        }
        Ok(self.get("/readyz").ok().filter(|response| response.starts_with(status) && response.contains(text)))
    }

    /// The value of counter or gauge `name` on `/metrics`.
    pub fn metric(&self, name: &str) -> anyhow::Result<f64> {
        let [value] = self.metrics([name])?;
        Ok(value)
    }

    /// The values of counters or gauges `names`, all from one scrape of `/metrics`, so
    /// figures the relay reads together (such as resident memory and its peak) are
    /// compared as it read them.
    pub fn metrics<const N: usize>(&self, names: [&str; N]) -> anyhow::Result<[f64; N]> {
        let body = self.get("/metrics")?;
        let value_of = |name: &str| {
            body.lines()
                .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
                .and_then(|value| value.trim().parse().ok())
                .with_context(|| format!("metric {name} not on /metrics:\n{body}"))
        };
        let mut values = [0.0; N];
        for (value, name) in values.iter_mut().zip(names) {
            *value = value_of(name)?;
        }
        Ok(values)
    }

    /// The sum of every series of the metric family `name` (all label values).
    pub fn metric_sum(&self, name: &str) -> anyhow::Result<f64> {
        let body = self.get("/metrics")?;
        let values: Vec<f64> = body
            .lines()
            .filter_map(|line| line.strip_prefix(name))
            .filter_map(|rest| match rest.as_bytes().first() {
                Some(b' ') => Some(rest),
                Some(b'{') => rest.split_once("} ").map(|(_, value)| value),
                _ => None,
            })
            .filter_map(|value| value.trim().parse().ok())
            .collect();
        anyhow::ensure!(!values.is_empty(), "metric {name} not on /metrics:\n{body}");
        Ok(values.iter().sum())
    }

    /// The cumulative buckets of histogram `name`: (upper bound, count) in order,
    /// the last one `+Inf`.
    pub fn histogram(&self, name: &str) -> anyhow::Result<Vec<(f64, f64)>> {
        let body = self.get("/metrics")?;
        let prefix = format!("{name}_bucket{{le=\"");
        let buckets: Vec<(f64, f64)> = body
            .lines()
            .filter_map(|line| line.strip_prefix(&prefix)?.split_once("\"} "))
            .filter_map(|(le, count)| {
                let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
                Some((le, count.trim().parse().ok()?))
            })
            .collect();
        anyhow::ensure!(!buckets.is_empty(), "histogram {name} not on /metrics:\n{body}");
        Ok(buckets)
    }

    /// Waits for the relay to exit on its own; its exit code.
    pub async fn wait_exit(&mut self, deadline: Duration) -> anyhow::Result<Option<i32>> {
        let what = format!("the relay to exit (log {})", self.log.display());
        let exited =
            || std::future::ready(self.child.try_wait().map(|s| s.map(|status| status.code())).map_err(Into::into));
        crate::until(&what, deadline, exited).await
    }

    /// SIGTERM, then waits up to `deadline` for the exit (drain and final
    /// checkpoint); the exit code. A relay that does not stop in time is an error.
    pub fn terminate(&mut self, deadline: Duration) -> anyhow::Result<Option<i32>> {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status()?;
        anyhow::ensure!(status.success(), "kill -TERM {} failed", self.child.id());
        let until = std::time::Instant::now() + deadline;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status.code());
            }
            if std::time::Instant::now() >= until {
                bail!("the relay did not stop within {deadline:?} of SIGTERM; log {}", self.log.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Freezes (SIGSTOP) or continues (SIGCONT) the relay.
    pub fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        let name = match signal {
            Signal::Stop => "-STOP",
            Signal::Cont => "-CONT",
        };
        let status = Command::new("kill").arg(name).arg(self.child.id().to_string()).status()?;
        anyhow::ensure!(status.success(), "kill {name} {} failed", self.child.id());
        Ok(())
    }

    /// Whether `/readyz` answers that this instance leads (ready or not).
    pub fn leads(&self) -> bool {
        self.get("/readyz").is_ok_and(|r| r.contains(LEADER))
    }

    /// Whether `/readyz` answers 200 and that this instance leads.
    pub fn ready_leader(&self) -> bool {
        self.get("/readyz").is_ok_and(|r| r.starts_with("HTTP/1.0 200") && r.contains(LEADER))
    }

    /// The exit code if the relay has exited (`Some(None)`: killed by a signal).
    pub fn exited(&mut self) -> std::io::Result<Option<Option<i32>>> {
        Ok(self.child.try_wait()?.map(|status| status.code()))
    }

    /// SIGKILL: no drain, no final checkpoint.
    pub fn kill(&mut self) -> std::io::Result<()> {
        self.child.kill()?;
        self.child.wait().map(drop)
    }

    /// The OS process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where the log is.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The log so far, for assertion messages.
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
