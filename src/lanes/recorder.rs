//! How a lane's events end, made durable before they are reported.
//!
//! FAILED rows and booked retries are written to the primary first (the database is
//! retried until it answers), then reported to the coordinator. So the checkpoint
//! never passes an event that is neither on the broker nor visible in the table as
//! FAILED or PENDING-with-a-retry-time. SENT rows are reported at once: their
//! write-back is batched later, and a lost one only means a duplicate.

use std::future::Future;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::outcome::{LaneReport, Outcome, Target};
use crate::backoff::Backoff;
use crate::store::{ClaimStore, StatusStore};

/// The lanes' way to record outcomes; cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    pub status: StatusStore,
    pub claims: ClaimStore,
    /// Pacing of database retries.
    pub backoff: Backoff,
    pub reports: mpsc::UnboundedSender<Vec<LaneReport>>,
    pub shutdown: CancellationToken,
}

impl Recorder {
    /// Reports SEND_OK with each target's message id. `false` when the coordinator is gone.
    pub fn sent(&self, targets: &[Target], msg_ids: Vec<String>) -> bool {
        let at = SystemTime::now();
        let reports = targets
            .iter()
            .zip(msg_ids)
            .map(|(t, msg_id)| LaneReport { tx_seq: t.tx_seq, id: t.id, outcome: Outcome::Sent { msg_id, at } })
            .collect();
        self.reports.send(reports).is_ok()
    }

    /// Writes FAILED with `reason`, then reports. `false` when shut down first.
    pub async fn fail(&self, targets: &[Target], reason: &str) -> bool {
        let ids = ids(targets);
        if !self.until_recorded("FAILED", || self.status.mark_failed(&ids, reason)).await {
            return false;
        }
        tracing::error!(
            events = ids.len(),
            first_id = ids.first().copied().unwrap_or_default(),
            reason,
            "events marked FAILED (status 3)"
        );
        self.report(targets, Outcome::Failed)
    }

    /// Puts claimed rows back to PENDING, due again in `delay`, then reports.
    pub async fn defer(&self, targets: &[Target], delay: Duration, reason: &str) -> bool {
        let ids = ids(targets);
        self.until_recorded("a retry", || self.claims.reschedule(&ids, delay, reason)).await
            && self.report(targets, Outcome::Deferred)
    }

    /// Sleeps `delay` unless shut down first (`false`).
    pub async fn wait(&self, delay: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(delay) => true,
            () = self.shutdown.cancelled() => false,
        }
    }

    /// Runs `write` until the primary takes it. `false` when shut down first: nothing
    /// is reported, so the checkpoint stays before these events.
    async fn until_recorded<F, Fut>(&self, what: &str, mut write: F) -> bool
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<u64, mysql_async::Error>>,
    {
        let mut attempt = 0u32;
        while let Err(error) = write().await {
            attempt += 1;
            let delay = self.backoff.delay(attempt);
            tracing::error!(%error, retry_in = ?delay, "cannot record {what} on the primary; the checkpoint waits until it is recorded");
            if !self.wait(delay).await {
                return false;
            }
        }
        true
    }

    fn report(&self, targets: &[Target], outcome: Outcome) -> bool {
        let reports =
            targets.iter().map(|t| LaneReport { tx_seq: t.tx_seq, id: t.id, outcome: outcome.clone() }).collect();
        self.reports.send(reports).is_ok()
    }
}

fn ids(targets: &[Target]) -> Vec<u64> {
    targets.iter().map(|t| t.id).collect()
}
