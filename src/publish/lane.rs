//! A lane: the one ordered sender of one queue.
//!
//! Events of a queue arrive in source order; the lane sends them in synchronous
//! batches (up to `batch_size` events and the broker's size limit, waiting at most
//! `linger` to fill one). A batch that does not get SEND_OK is retried in place, with
//! exponential backoff, so nothing behind it overtakes it (per-key order). After
//! `max_retry` failed attempts, or at once for a non-retryable error, its events are
//! written FAILED and the lane moves on. Every event ends in exactly one report.

use std::sync::Arc;
use std::time::Duration;

use rocketmq_model::common::message::message_queue::MessageQueue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::rocketmq::{check_size, prepare, Producer, PublishError, Retry};
use crate::backoff::Backoff;
use crate::event::OutboxEvent;
use crate::metrics::RelayMetrics;
use crate::store::StatusStore;

/// Per-message overhead assumed when sizing a batch (properties, headers).
const MESSAGE_OVERHEAD: usize = 512;

/// An event on its way to a lane, tagged with its source transaction.
#[derive(Debug)]
pub struct LaneEvent {
    pub tx_seq: u64,
    pub event: OutboxEvent,
}

/// How an event ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The broker answered SEND_OK; `msg_id` is the broker's message id.
    Sent { msg_id: String },
    /// Durably marked FAILED in the outbox table.
    Failed,
}

/// The end of one event, sent back to the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneReport {
    pub tx_seq: u64,
    pub id: u64,
    pub outcome: Outcome,
}

/// Batching and retry settings of every lane.
#[derive(Debug, Clone)]
pub struct LaneSettings {
    pub batch_size: usize,
    pub linger: Duration,
    /// The broker's limit for one message, and for one batch.
    pub max_message_bytes: usize,
    pub max_retry: u32,
    pub backoff: Backoff,
}

/// One queue's sender.
pub struct Lane {
    pub queue: MessageQueue,
    pub producer: Arc<Producer>,
    pub status: StatusStore,
    pub settings: Arc<LaneSettings>,
    pub reports: mpsc::UnboundedSender<Vec<LaneReport>>,
    pub metrics: RelayMetrics,
    pub shutdown: CancellationToken,
}

impl Lane {
    /// Sends everything that arrives on `input`, in order, until it closes or shutdown.
    pub async fn run(self, mut input: mpsc::UnboundedReceiver<LaneEvent>) {
        while let Some(first) = input.recv().await {
            let batch = self.fill(first, &mut input).await;
            if !self.deliver(batch).await {
                return;
            }
        }
    }

    /// Collects a batch: what is already queued, then up to `linger` for more.
    async fn fill(&self, first: LaneEvent, input: &mut mpsc::UnboundedReceiver<LaneEvent>) -> Vec<LaneEvent> {
        let limit = self.settings.max_message_bytes;
        let mut bytes = first.event.payload.len() + MESSAGE_OVERHEAD;
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + self.settings.linger;
        while batch.len() < self.settings.batch_size {
            let next = match input.try_recv() {
                Ok(next) => next,
                Err(_) if self.settings.linger.is_zero() => break,
                Err(_) => match tokio::time::timeout_at(deadline, input.recv()).await {
                    Ok(Some(next)) => next,
                    _ => break,
                },
            };
            let size = next.event.payload.len() + MESSAGE_OVERHEAD;
            if bytes + size > limit {
                // Too big to join: it starts the next batch (order is kept by sending this one first).
                let delivered = self.deliver(std::mem::take(&mut batch)).await;
                bytes = 0;
                if !delivered {
                    return Vec::new();
                }
            }
            bytes += size;
            batch.push(next);
        }
        batch
    }

    /// Sends one batch to the end (SEND_OK or FAILED). `false` when shut down meanwhile.
    async fn deliver(&self, batch: Vec<LaneEvent>) -> bool {
        if batch.is_empty() {
            return true;
        }
        let (sendable, oversized): (Vec<LaneEvent>, Vec<LaneEvent>) =
            batch.into_iter().partition(|e| check_size(&e.event, self.settings.max_message_bytes).is_ok());
        for event in oversized {
            let error = check_size(&event.event, self.settings.max_message_bytes)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            if !self.fail(&[(event.tx_seq, event.event.id)], &error).await {
                return false;
            }
        }
        if sendable.is_empty() {
            return true;
        }
        let (targets, events): (Vec<(u64, u64)>, Vec<OutboxEvent>) =
            sendable.into_iter().map(|e| ((e.tx_seq, e.event.id), e.event)).unzip();
        let batch = match prepare(&events) {
            Ok(batch) => batch,
            Err(error) => return self.fail(&targets, &error.to_string()).await,
        };
        let mut attempt = 0u32;
        loop {
            match self.producer.send(&self.queue, &batch).await {
                Ok(receipt) => {
                    let reports = targets
                        .iter()
                        .zip(receipt.msg_ids)
                        .map(|(&(tx_seq, id), msg_id)| LaneReport { tx_seq, id, outcome: Outcome::Sent { msg_id } })
                        .collect();
                    return self.reports.send(reports).is_ok();
                }
                Err(error) if error.retry() == Retry::NonRetryable => {
                    tracing::error!(queue = self.queue.queue_id(), topic = %self.queue.topic(), %error, events = events.len(), "non-retryable send error: marking FAILED");
                    return self.fail(&targets, &error.to_string()).await;
                }
                Err(error) => {
                    attempt += 1;
                    if attempt > self.settings.max_retry {
                        let reason = format!("gave up after {attempt} attempts: {error}");
                        tracing::error!(queue = self.queue.queue_id(), topic = %self.queue.topic(), %reason, "marking FAILED");
                        return self.fail(&targets, &reason).await;
                    }
                    self.metrics.send_retries.inc();
                    if !self.wait_to_retry(attempt, &error).await {
                        return false;
                    }
                }
            }
        }
    }

    async fn wait_to_retry(&self, attempt: u32, error: &PublishError) -> bool {
        let delay = self.settings.backoff.delay(attempt);
        tracing::warn!(queue = self.queue.queue_id(), topic = %self.queue.topic(), attempt, retry_in = ?delay, %error, "send not confirmed; retrying the same batch");
        tokio::select! {
            () = tokio::time::sleep(delay) => true,
            () = self.shutdown.cancelled() => false,
        }
    }

    /// Writes FAILED durably (retrying the database until it works), then reports.
    async fn fail(&self, targets: &[(u64, u64)], reason: &str) -> bool {
        fail_durably(&self.status, &self.settings.backoff, &self.shutdown, &self.reports, targets, reason).await
    }
}

/// Fails every event that arrives on `input` with `reason`: the lane of a topic that
/// cannot be sent to at all (it does not exist on the cluster).
pub async fn run_failing(
    mut input: mpsc::UnboundedReceiver<LaneEvent>,
    reason: String,
    status: StatusStore,
    settings: Arc<LaneSettings>,
    reports: mpsc::UnboundedSender<Vec<LaneReport>>,
    shutdown: CancellationToken,
) {
    while let Some(first) = input.recv().await {
        let mut targets = vec![(first.tx_seq, first.event.id)];
        while let Ok(next) = input.try_recv() {
            targets.push((next.tx_seq, next.event.id));
        }
        if !fail_durably(&status, &settings.backoff, &shutdown, &reports, &targets, &reason).await {
            return;
        }
    }
}

/// Writes FAILED for `targets` ((tx_seq, row id) pairs), retrying the database until
/// it works, then reports them. `false` when shut down first (nothing reported: the
/// checkpoint stays before them).
async fn fail_durably(
    status: &StatusStore,
    backoff: &Backoff,
    shutdown: &CancellationToken,
    reports: &mpsc::UnboundedSender<Vec<LaneReport>>,
    targets: &[(u64, u64)],
    reason: &str,
) -> bool {
    let ids: Vec<u64> = targets.iter().map(|&(_, id)| id).collect();
    let mut attempt = 0u32;
    while let Err(error) = status.mark_failed(&ids, reason).await {
        attempt += 1;
        let delay = backoff.delay(attempt);
        tracing::error!(%error, retry_in = ?delay, "cannot record FAILED on the primary; the checkpoint waits until it is recorded");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shutdown.cancelled() => return false,
        }
    }
    tracing::error!(
        events = ids.len(),
        first_id = ids.first().copied().unwrap_or_default(),
        reason,
        "events marked FAILED (status 3)"
    );
    let failed = targets.iter().map(|&(tx_seq, id)| LaneReport { tx_seq, id, outcome: Outcome::Failed }).collect();
    reports.send(failed).is_ok()
}
