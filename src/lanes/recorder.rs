//! How a lane's events end, made durable before they are reported.
//!
//! FAILED rows, booked retries and released claims are written to the primary first
//! (the database is retried until it answers), then reported to the coordinator. So
//! the checkpoint never passes an event that is neither on the broker nor visible in
//! the table as FAILED or PENDING. SENT rows are reported at once: their write-back is
//! batched later, and a lost one only means a duplicate. Every write names the row by
//! id and event_id. Every report also ends the event in the metrics: its lane's
//! in-flight gauge, and for a sent one its path, its commit-to-ack time and its time
//! in the relay.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use outbox_kit::RowStatus;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::outcome::{LaneEvent, LaneReport, Outcome};
use crate::backoff::Backoff;
use crate::metrics::{FailReason, Path, RelayMetrics, WriteMiss};
use crate::store::{ClaimStore, RowKey, StatusStore, IDS_LOGGED};

/// The lanes' way to record outcomes; cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    pub status: StatusStore,
    pub claims: ClaimStore,
    /// Pacing of database retries.
    pub backoff: Backoff,
    pub reports: mpsc::UnboundedSender<Vec<LaneReport>>,
    pub shutdown: CancellationToken,
    pub metrics: RelayMetrics,
    /// Events of this recorder's lane not yet reported (a detached gauge until
    /// [`Recorder::for_lane`]).
    pub inflight: Gauge,
}

impl Recorder {
    /// The recorder of one term's lanes, reporting to `reports` and pacing its
    /// database retries by `backoff`; each lane gets its own with [`Recorder::for_lane`].
    pub fn new(
        status: StatusStore,
        claims: ClaimStore,
        backoff: Backoff,
        reports: mpsc::UnboundedSender<Vec<LaneReport>>,
        shutdown: CancellationToken,
        metrics: RelayMetrics,
    ) -> Self {
        Self { status, claims, backoff, reports, shutdown, metrics, inflight: Gauge::default() }
    }

    /// The recorder of one lane, whose in-flight gauge it keeps.
    pub fn for_lane(&self, inflight: Gauge) -> Self {
        Self { inflight, ..self.clone() }
    }

    /// Reports SEND_OK with each event's message id. `false` when the coordinator is gone.
    pub fn sent(&self, events: Vec<LaneEvent>, msg_ids: Vec<String>) -> bool {
        let at = SystemTime::now();
        self.measure_sent(&events, at);
        let reports = events.into_iter().zip(msg_ids).map(|(e, msg_id)| e.sent(msg_id, at)).collect();
        self.reports.send(reports).is_ok()
    }

    fn measure_sent(&self, events: &[LaneEvent], at: SystemTime) {
        let at_us = crate::time::unix_micros(at) as f64;
        let swept = events.iter().filter(|e| e.swept()).count();
        self.metrics.published(Path::Sweep, swept);
        self.metrics.published(Path::Binlog, events.len() - swept);
        for created_us in events.iter().filter_map(|e| self.metrics.lag.created_unix_us(e.event.created_local_us?)) {
            self.metrics.commit_to_ack.observe(((at_us - created_us as f64) / 1e6).max(0.0));
        }
        let now = Instant::now();
        for event in events {
            self.metrics.route_to_ack.observe(now.duration_since(event.routed).as_secs_f64());
        }
        self.inflight.dec_by(crate::metrics::gauge_value(events.len()));
    }

    /// Writes FAILED with `detail` (why, in words), then reports. `false` when shut down first.
    /// Only the rows the mark changed count as FAILED; the others (already SENT or
    /// SKIPPED, no longer this relay's, or its leader term ended) are logged and counted
    /// as a miss.
    pub async fn fail(&self, events: &[LaneEvent], reason: FailReason, detail: &str) -> bool {
        let rows = rows(events);
        let Some(changed) = self.until_recorded("FAILED", || self.status.mark_failed(&rows, detail)).await else {
            return false;
        };
        let changed = usize::try_from(changed).unwrap_or(usize::MAX).min(rows.len());
        self.metrics.failed(reason, changed);
        let ids: Vec<u64> = rows.iter().take(IDS_LOGGED).map(|r| r.id).collect();
        tracing::error!(events = changed, ?ids, reason = detail, "events marked {}", RowStatus::Failed);
        if changed < rows.len() {
            self.metrics.write_missed(WriteMiss::FailedUnchanged, rows.len() - changed);
            tracing::warn!(unchanged = rows.len() - changed, ?ids, "a FAILED mark changed fewer rows than it was given: they were SENT or SKIPPED already, are no longer this relay's, or its leader term ended");
        }
        self.report(events, Outcome::Failed)
    }

    /// Puts claimed rows back to PENDING, due again in `delay`, then reports.
    pub async fn defer(&self, events: &[LaneEvent], delay: Duration, reason: &str) -> bool {
        let rows = rows(events);
        self.until_recorded("a retry", || self.claims.reschedule(&rows, delay, reason)).await.is_some()
            && self.report(events, Outcome::Deferred)
    }

    /// Leaves events of a held key unsent: claimed rows go back to PENDING (binlog
    /// events are PENDING already), then reports.
    pub async fn hold(&self, events: &[LaneEvent]) -> bool {
        let claimed: Vec<RowKey<'_>> = events.iter().filter(|e| e.swept()).map(LaneEvent::row).collect();
        (claimed.is_empty()
            || self.until_recorded("a released claim", || self.claims.release(&claimed)).await.is_some())
            && self.report(events, Outcome::Held)
    }

    /// Sleeps `delay` unless shut down first (`false`).
    pub async fn wait(&self, delay: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(delay) => true,
            () = self.shutdown.cancelled() => false,
        }
    }

    /// Runs `write` until the primary takes it; the rows it changed. `None` when shut
    /// down first: nothing is reported, so the checkpoint stays before these events.
    async fn until_recorded<F, Fut>(&self, what: &str, mut write: F) -> Option<u64>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<u64, mysql_async::Error>>,
    {
        let mut attempt = 0u32;
        loop {
            match write().await {
                Ok(changed) => return Some(changed),
                Err(error) => {
                    attempt += 1;
                    let delay = self.backoff.delay(attempt);
                    tracing::error!(%error, retry_in = ?delay, "cannot record {what} on the primary; the checkpoint waits until it is recorded");
                    if !self.wait(delay).await {
                        return None;
                    }
                }
            }
        }
    }

    fn report(&self, events: &[LaneEvent], outcome: Outcome) -> bool {
        self.inflight.dec_by(crate::metrics::gauge_value(events.len()));
        self.reports.send(events.iter().map(|e| e.report(outcome.clone())).collect()).is_ok()
    }
}

fn rows(events: &[LaneEvent]) -> Vec<RowKey<'_>> {
    events.iter().map(LaneEvent::row).collect()
}
