//! How a lane's events end, made durable before they are reported.
//!
//! FAILED rows, booked retries and released claims are written to the primary first
//! (the database is retried until it answers), then reported to the coordinator. So
//! the checkpoint never passes an event that is neither on the broker nor visible in
//! the table as FAILED or PENDING. SENT rows are reported at once: their write-back is
//! batched later, and a lost one only means a duplicate. Every write names the row by
//! id and event_id.

use std::future::Future;
use std::time::{Duration, SystemTime};

use outbox_kit::RowStatus;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::outcome::{LaneEvent, LaneReport, Outcome};
use crate::backoff::Backoff;
use crate::store::{ClaimStore, RowKey, StatusStore};

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
    /// Reports SEND_OK with each event's message id. `false` when the coordinator is gone.
    pub fn sent(&self, events: &[LaneEvent], msg_ids: Vec<String>) -> bool {
        let at = SystemTime::now();
        let reports = events.iter().zip(msg_ids).map(|(e, msg_id)| e.report(Outcome::Sent { msg_id, at })).collect();
        self.reports.send(reports).is_ok()
    }

    /// Writes FAILED with `reason`, then reports. `false` when shut down first.
    pub async fn fail(&self, events: &[LaneEvent], reason: &str) -> bool {
        let rows = rows(events);
        if !self.until_recorded("FAILED", || self.status.mark_failed(&rows, reason)).await {
            return false;
        }
        tracing::error!(
            events = rows.len(),
            first_id = rows.first().map(|r| r.id).unwrap_or_default(),
            reason,
            "events marked {}",
            RowStatus::Failed
        );
        self.report(events, Outcome::Failed)
    }

    /// Puts claimed rows back to PENDING, due again in `delay`, then reports.
    pub async fn defer(&self, events: &[LaneEvent], delay: Duration, reason: &str) -> bool {
        let rows = rows(events);
        self.until_recorded("a retry", || self.claims.reschedule(&rows, delay, reason)).await
            && self.report(events, Outcome::Deferred)
    }

    /// Leaves events of a held key unsent: claimed rows go back to PENDING (binlog
    /// events are PENDING already), then reports.
    pub async fn hold(&self, events: &[LaneEvent]) -> bool {
        let claimed: Vec<RowKey<'_>> = events.iter().filter(|e| e.swept()).map(LaneEvent::row).collect();
        (claimed.is_empty() || self.until_recorded("a released claim", || self.claims.release(&claimed)).await)
            && self.report(events, Outcome::Held)
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

    fn report(&self, events: &[LaneEvent], outcome: Outcome) -> bool {
        self.reports.send(events.iter().map(|e| e.report(outcome.clone())).collect()).is_ok()
    }
}

fn rows(events: &[LaneEvent]) -> Vec<RowKey<'_>> {
    events.iter().map(LaneEvent::row).collect()
}
