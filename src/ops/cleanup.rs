//! The leader's scheduled cleanup: every `cleanup.interval_ms`, SENT rows older than
//! the retention are deleted by primary key in paced batches, each batch audited like
//! an operator's `cleanup` run (the operator named is the relay instance). Only the
//! leader runs it, so a fleet never deletes twice at once; PENDING, SENDING, FAILED
//! and SKIPPED rows are never touched.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::manual::{Manual, Operator};
use crate::config::CleanupConfig;

/// Runs a cleanup every interval until `stop`. A failed run is logged and tried
/// again at the next interval.
pub async fn run_scheduled(manual: Manual, settings: CleanupConfig, instance: String, stop: CancellationToken) {
    let interval = Duration::from_millis(settings.interval_ms);
    let by = Operator { name: instance, reason: "scheduled cleanup (cleanup.interval_ms)".to_owned() };
    let retention = Duration::from_secs(settings.retention_secs);
    let pace = Duration::from_millis(settings.pace_ms);
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = stop.cancelled() => return,
        }
        let run = manual.cleanup(retention, settings.batch, pace, &by, false, |_| {});
        let cleaned = tokio::select! {
            cleaned = run => cleaned,
            () = stop.cancelled() => return,
        };
        match cleaned {
            Ok(done) if done.deleted > 0 => {
                tracing::info!(
                    deleted = done.deleted,
                    batches = done.batches,
                    retention_secs = settings.retention_secs,
                    "scheduled cleanup deleted SENT rows past their retention"
                );
            }
            Ok(_) => tracing::debug!("scheduled cleanup: no SENT row past its retention"),
            Err(error) => {
                tracing::warn!(%error, retry_in = ?interval, "scheduled cleanup failed; the next run tries again (the table grows meanwhile); fix: the primary user needs DELETE on the outbox table (`outbox-relay check` lists its grants)")
            }
        }
    }
}
