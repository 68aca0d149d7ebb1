//! Retention by DELETE: SENT rows older than the retention are deleted by primary
//! key in paced batches, each batch audited like an operator's `cleanup` run (the
//! operator named is the relay instance). Only the leader runs it, so a fleet never
//! deletes twice at once; PENDING, SENDING, FAILED and SKIPPED rows are never touched.

use std::time::Duration;

use crate::config::CleanupConfig;
use crate::ops::manual::{Manual, Operator};

/// One scheduled cleanup. A failed run is logged; the next one tries again.
pub(super) async fn delete_expired(manual: &Manual, settings: &CleanupConfig, by: &Operator) {
    let retention = Duration::from_secs(settings.retention_secs);
    let pace = Duration::from_millis(settings.pace_ms);
    match manual.cleanup(retention, settings.batch, pace, by, false, |_| {}).await {
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
            tracing::warn!(%error, "scheduled cleanup failed; the next run tries again (the table grows meanwhile); fix: the primary user needs DELETE on the outbox table (`outbox-relay check` lists its grants)")
        }
    }
}
