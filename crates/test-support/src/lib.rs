//! Shared by the relay's integration tests and `outbox-bench`: the relay binary as a
//! child process ([`relay`]), outbox rows to insert ([`rows`]) and unique names.
//! Every wait polls a condition (`/readyz`, the process state) against a deadline.

pub mod relay;
pub mod rows;

use std::future::Future;
use std::time::Duration;

/// A name unique to this run, for tables, topics, groups and event ids.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// Polls `check` every 50 ms until it returns `Some`, or fails after `deadline`
/// naming `what`; an error from `check` ends the wait at once.
pub async fn until<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        anyhow::ensure!(tokio::time::Instant::now() < until, "timed out after {deadline:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
