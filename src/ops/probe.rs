//! A running relay's own account, read over its HTTP endpoint: what `status` shows
//! beside the database's view. Lags, readiness and the problems each part reports
//! (a lane's send error, the binlog source's) live only in the process, so `status`
//! asks it: `/readyz` for role and problems, `/metrics` for the lag gauges.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long the relay may take to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(3);

/// The gauges `status` shows, in this order.
pub const SHOWN_GAUGES: [&str; 8] = [
    "relay_leader_term",
    "relay_binlog_lag_seconds",
    "relay_source_replica_lag_seconds",
    "relay_binlog_behind_bytes",
    "relay_checkpoint_age_seconds",
    "relay_binlog_expiry_headroom_seconds",
    "outbox_oldest_pending_seconds",
    "relay_held_keys",
];

/// One relay instance as it describes itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceView {
    /// Where it was asked (`http.listen`).
    pub address: String,
    pub ready: bool,
    /// `leader` or `standby`.
    pub role: String,
    /// Every problem a part reports now, with how long it has lasted.
    pub problems: Vec<String>,
    /// The [`SHOWN_GAUGES`] it exports (NaN: not known, e.g. on a standby).
    pub gauges: Vec<(String, f64)>,
}

/// The instance could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "no relay answers on http://{address} ({detail}); is one running there with this configuration's http.listen?"
    )]
    Unreachable { address: String, detail: String },
    #[error("http://{address}{path} answered something unexpected: {detail}")]
    BadAnswer { address: String, path: &'static str, detail: String },
}

/// The `/readyz` body.
#[derive(Deserialize)]
struct Readiness {
    ready: bool,
    role: String,
    #[serde(default)]
    problems: Vec<String>,
}

/// Asks the relay listening on `address` (host:port) how it stands.
pub async fn view(address: &str) -> Result<InstanceView, ProbeError> {
    let readiness = get(address, "/readyz").await?;
    let readiness: Readiness = serde_json::from_str(&readiness).map_err(|e| ProbeError::BadAnswer {
        address: address.to_owned(),
        path: "/readyz",
        detail: e.to_string(),
    })?;
    let metrics = get(address, "/metrics").await?;
    let gauges = SHOWN_GAUGES.iter().filter_map(|name| Some(((*name).to_owned(), sample(&metrics, name)?))).collect();
    Ok(InstanceView {
        address: address.to_owned(),
        ready: readiness.ready,
        role: readiness.role,
        problems: readiness.problems,
        gauges,
    })
}

/// The value of the unlabelled series `name` in Prometheus text.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The body of `GET path` (any status: `/readyz` answers 503 when not ready).
async fn get(address: &str, path: &'static str) -> Result<String, ProbeError> {
    let unreachable = |detail: String| ProbeError::Unreachable { address: address.to_owned(), detail };
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(ANSWER_WITHIN, exchange)
        .await
        .map_err(|_| unreachable(format!("no answer within {ANSWER_WITHIN:?}")))?
        .map_err(|e| unreachable(e.to_string()))?;
    let answer = String::from_utf8_lossy(&answer);
    answer.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).ok_or_else(|| ProbeError::BadAnswer {
        address: address.to_owned(),
        path,
        detail: "no HTTP body".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlabelled_samples_are_read_by_exact_name() {
        let text =
            "# HELP relay_held_keys x\nrelay_held_keys 3\nrelay_held_keys_other 9\nrelay_binlog_lag_seconds NaN\n";
        assert_eq!(sample(text, "relay_held_keys"), Some(3.0));
        assert!(sample(text, "relay_binlog_lag_seconds").is_some_and(f64::is_nan));
        assert_eq!(sample(text, "relay_leader_term"), None);
    }
}
