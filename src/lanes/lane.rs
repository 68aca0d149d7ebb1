//! A lane: the one ordered sender of one queue.
//!
//! Events of a queue arrive in source order; the lane sends them in synchronous
//! batches (up to `batch_size` events and the broker's size limit, waiting at most
//! `linger` to fill one). A batch holds events of one retry kind:
//! - binlog events are retried in place, with exponential backoff, so nothing behind
//!   them overtakes them (per-key order); after `max_retry` failed retries they are
//!   written FAILED and the lane moves on;
//! - swept rows get one attempt; a failure books the retry in the table
//!   (`retry_count`, `next_retry_at`) and the sweep claims them again when due, so one
//!   bad row cannot hold its queue (the seed: "back to polling, not waiting in place").
//!
//! Non-retryable errors are FAILED at once. Every event ends in exactly one report.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rocketmq_model::common::message::message_queue::MessageQueue;
use tokio::sync::mpsc;

use super::outcome::{Attempts, LaneEvent, Target};
use super::recorder::Recorder;
use crate::backoff::{Backoff, NextAttempt};
use crate::event::OutboxEvent;
use crate::fault;
use crate::health::{Health, Part};
use crate::metrics::RelayMetrics;
use crate::rocketmq::{check_size, prepare, Producer, PublishError, Retry};

/// Per-message overhead assumed when sizing a batch (properties, headers).
const MESSAGE_OVERHEAD: usize = 512;

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
    pub settings: Arc<LaneSettings>,
    pub recorder: Recorder,
    pub metrics: RelayMetrics,
    /// Where a broker that does not confirm this lane's sends is reported.
    pub health: Health,
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
            let other_kind = batch.first().is_some_and(|b| !b.attempts.same_kind(next.attempts));
            if bytes + size > limit || other_kind {
                // It cannot join: it starts the next batch (order is kept by sending this one first).
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

    /// Sends one batch to its end (SEND_OK, FAILED or deferred). `false` when shut down meanwhile.
    async fn deliver(&self, batch: Vec<LaneEvent>) -> bool {
        let (sendable, oversized): (Vec<LaneEvent>, Vec<LaneEvent>) =
            batch.into_iter().partition(|e| check_size(&e.event, self.settings.max_message_bytes).is_ok());
        for event in oversized {
            let reason = check_size(&event.event, self.settings.max_message_bytes)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            if !self.recorder.fail(&[Target::of(&event)], &reason).await {
                return false;
            }
        }
        if sendable.is_empty() {
            return true;
        }
        let targets: Vec<Target> = sendable.iter().map(Target::of).collect();
        let events: Vec<OutboxEvent> = sendable.into_iter().map(|e| e.event).collect();
        let batch = match prepare(&events) {
            Ok(batch) => batch,
            Err(error) => return self.recorder.fail(&targets, &error.to_string()).await,
        };
        let mut failures = 0u32;
        loop {
            let error = match self.producer.send(&self.queue, &batch).await {
                Ok(receipt) => {
                    self.health.clear(&self.part());
                    fault::lane_sent(targets.len());
                    return self.recorder.sent(&targets, receipt.msg_ids);
                }
                Err(error) => error,
            };
            if error.retry() == Retry::NonRetryable {
                tracing::error!(queue = self.queue.queue_id(), topic = %self.queue.topic(), %error, events = events.len(), "non-retryable send error: marking FAILED");
                return self.recorder.fail(&targets, &error.to_string()).await;
            }
            self.health.problem(
                self.part(),
                format!(
                    "broker: sends to {} queue {} are not confirmed: {error}",
                    self.queue.topic(),
                    self.queue.queue_id()
                ),
            );
            if targets.first().is_some_and(|t| t.attempts != Attempts::InPlace) {
                return self.book_retries(&targets, &error).await;
            }
            match self.settings.backoff.after_failure(failures, self.settings.max_retry) {
                NextAttempt::GiveUp { attempts } => {
                    let reason = format!("gave up after {attempts} attempts: {error}");
                    tracing::error!(queue = self.queue.queue_id(), topic = %self.queue.topic(), %reason, "marking FAILED");
                    return self.recorder.fail(&targets, &reason).await;
                }
                NextAttempt::RetryIn(delay) => {
                    failures += 1;
                    self.metrics.send_retries.inc();
                    tracing::warn!(queue = self.queue.queue_id(), topic = %self.queue.topic(), attempt = failures, retry_in = ?delay, %error, "send not confirmed; retrying the same batch");
                    if !self.recorder.wait(delay).await {
                        return false;
                    }
                }
            }
        }
    }

    /// This lane's name in the health record.
    fn part(&self) -> Part {
        Part::Lane(self.queue.topic().to_string(), self.queue.queue_id())
    }

    /// Swept rows after their one attempt: each goes back to PENDING with its next
    /// retry time, or FAILED when its retries are used up.
    async fn book_retries(&self, targets: &[Target], error: &PublishError) -> bool {
        let mut later: BTreeMap<Duration, Vec<Target>> = BTreeMap::new();
        let mut give_up = Vec::new();
        for target in targets {
            let Attempts::Once { failures_before } = target.attempts else { continue };
            match self.settings.backoff.after_failure(failures_before, self.settings.max_retry) {
                NextAttempt::RetryIn(delay) => later.entry(delay).or_default().push(*target),
                NextAttempt::GiveUp { .. } => give_up.push(*target),
            }
        }
        self.metrics.send_retries.inc();
        tracing::warn!(queue = self.queue.queue_id(), topic = %self.queue.topic(), %error, rescheduled = targets.len() - give_up.len(), failed = give_up.len(), "swept rows not confirmed; retries booked in the table");
        for (delay, group) in later {
            if !self.recorder.defer(&group, delay, &format!("send not confirmed, retry in {delay:?}: {error}")).await {
                return false;
            }
        }
        let reason = format!("gave up after {} retries: {error}", self.settings.max_retry);
        give_up.is_empty() || self.recorder.fail(&give_up, &reason).await
    }
}

/// Fails every event that arrives on `input` with `reason`: the lane of a topic that
/// cannot be sent to at all (it does not exist on the cluster).
pub async fn run_failing(mut input: mpsc::UnboundedReceiver<LaneEvent>, reason: String, recorder: Recorder) {
    while let Some(first) = input.recv().await {
        let mut targets = vec![Target::of(&first)];
        while let Ok(next) = input.try_recv() {
            targets.push(Target::of(&next));
        }
        if !recorder.fail(&targets, &reason).await {
            return;
        }
    }
}
