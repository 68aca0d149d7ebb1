//! A lane: the one ordered sender of one queue.
//!
//! Events of a queue arrive in source order; the lane sends them in synchronous
//! batches (up to `batch_size` events and the broker's size limit, waiting at most
//! `linger` to fill one, unless its last batch held a single event: a trickle is sent
//! as it comes). What happens when a batch is not confirmed depends on what
//! the failure says (see `rocketmq::ErrorClass`):
//! - the broker cannot take anything now (an outage): the lane holds the batch and
//!   sends it again, probing every few seconds at most and at once when a new
//!   producer took over, for as long as it takes. Nothing behind it overtakes it, no
//!   attempt is counted and no event becomes FAILED;
//! - an event can never be sent (too large, illegal): a batch is split in halves
//!   until the bad events are alone; each fails by itself, the others go out;
//! - unknown: binlog events are retried in place with exponential backoff and fail
//!   after `max_retry` retries; swept rows book their retry in the table instead, so
//!   one bad row cannot hold its queue. An unknown answer of the broker that more
//!   than one of its queues got since its last confirmed send is the broker's
//!   trouble, not an event's: it is held like an outage.
//!
//! With `failed_key_policy = "hold"`, an event whose key has a FAILED event is not
//! sent: it stays PENDING until an operator releases the key. Every event ends in
//! exactly one report.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prometheus_client::metrics::gauge::Gauge;
use rocketmq_model::common::message::message_queue::MessageQueue;
use tokio::sync::mpsc;

use super::held::{HeldKeys, Verdict};
use super::outage::OutageFlag;
use super::outcome::{Attempts, LaneEvent};
use super::recorder::Recorder;
use crate::backoff::{Backoff, NextAttempt};
use crate::config::{Config, FailedKeyPolicy};
use crate::event::OutboxEvent;
use crate::fault;
use crate::health::{Dependency, Health, Part};
use crate::leader::Term;
use crate::metrics::{FailReason, RelayMetrics};
use crate::rocketmq::{
    check_delivery_time, check_size, prepare, ErrorClass, Prepared, PublishError, Publisher, SendStatus,
};
use crate::telemetry::{record_send, SendOutcome};

/// Per-message overhead assumed when sizing a batch (the usual properties).
const MESSAGE_OVERHEAD: usize = 512;

/// How often a lane tries again while the broker cannot take anything: from 200 ms
/// up to 2 s, so sending resumes within seconds of the broker's return.
const OUTAGE_PROBE: Backoff = Backoff { initial: Duration::from_millis(200), max: Duration::from_secs(2) };

/// Batching and retry settings of every lane.
#[derive(Debug, Clone)]
pub struct LaneSettings {
    pub batch_size: usize,
    pub linger: Duration,
    /// The broker's limit for one message, and for one batch.
    pub max_message_bytes: usize,
    /// How far ahead the broker's timer takes a delivery time.
    pub timer_max_delay: Duration,
    pub max_retry: u32,
    pub backoff: Backoff,
    pub failed_key_policy: FailedKeyPolicy,
}

impl LaneSettings {
    /// The lanes' batching, size limit and retry policy from the configuration.
    pub fn new(config: &Config) -> Self {
        Self {
            batch_size: config.lanes.batch_size,
            linger: Duration::from_millis(config.lanes.linger_ms),
            max_message_bytes: config.rocketmq.max_message_bytes,
            timer_max_delay: Duration::from_secs(config.rocketmq.timer_max_delay_s),
            max_retry: config.retry.max_retry,
            backoff: config.retry.backoff(),
            failed_key_policy: config.retry.failed_key_policy,
        }
    }
}

/// The way into a lane: each event counts in the lane's in-flight gauge until its
/// report (see `Recorder`).
pub struct LaneInput {
    events: mpsc::UnboundedSender<LaneEvent>,
    inflight: Gauge,
}

impl LaneInput {
    pub fn new(events: mpsc::UnboundedSender<LaneEvent>, inflight: Gauge) -> Self {
        Self { events, inflight }
    }

    /// Hands `event` on; a lane that has stopped (shutdown) leaves it unacknowledged.
    pub fn send(&self, event: LaneEvent) {
        self.inflight.inc();
        if self.events.send(event).is_err() {
            self.inflight.dec();
        }
    }
}

/// One queue's sender.
pub struct Lane {
    pub queue: MessageQueue,
    pub publisher: Arc<Publisher>,
    pub settings: Arc<LaneSettings>,
    pub recorder: Recorder,
    pub metrics: RelayMetrics,
    /// Where a broker that does not confirm this lane's sends is reported.
    pub health: Health,
    pub held: HeldKeys,
    /// The leader term this lane sends under: checked before every send.
    pub term: Term,
    /// Whether an outage holds this lane now, counted in its broker's gauge.
    pub outage: OutageFlag,
}

/// How one attempt at a part of a batch ended.
enum PartEnd {
    /// Every event of the part was reported.
    Done,
    /// The broker refused the part because of some event in it: try the halves.
    Split(Vec<LaneEvent>, Vec<LaneEvent>),
    /// Shutdown, the leader term ended, or the coordinator is gone.
    Stopped,
}

impl Lane {
    /// Sends everything that arrives on `input`, in order, until it closes or shutdown.
    /// A lane that stopped in the middle never sends anything after the stop.
    pub async fn run(self, mut input: mpsc::UnboundedReceiver<LaneEvent>) {
        let mut linger = true;
        while let Some(first) = input.recv().await {
            let Some(batch) = self.fill(first, &mut input, linger).await else { return };
            // Events that come one at a time are sent at once: waiting for company that
            // does not come costs each of them the linger and a timer. Once events queue
            // up while a batch is out, batches have company and the lane lingers again.
            linger = batch.len() > 1;
            if !self.deliver(batch).await {
                return;
            }
        }
    }

    /// Collects a batch: what is already queued, then (if `linger`) up to the linger
    /// for more; `None` when a batch sent on the way stopped.
    async fn fill(
        &self,
        first: LaneEvent,
        input: &mut mpsc::UnboundedReceiver<LaneEvent>,
        linger: bool,
    ) -> Option<Vec<LaneEvent>> {
        let limit = self.settings.max_message_bytes;
        let mut bytes = batch_bytes(&first.event);
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + self.settings.linger;
        while batch.len() < self.settings.batch_size {
            let next = match input.try_recv() {
                Ok(next) => next,
                Err(_) if !linger || self.settings.linger.is_zero() => break,
                Err(_) => match tokio::time::timeout_at(deadline, input.recv()).await {
                    Ok(Some(next)) => next,
                    _ => break,
                },
            };
            let size = batch_bytes(&next.event);
            let other_kind = batch.first().is_some_and(|b| !b.attempts.same_kind(next.attempts));
            if bytes + size > limit || other_kind {
                // It cannot join: it starts the next batch (order is kept by sending this one first).
                if !self.deliver(std::mem::take(&mut batch)).await {
                    return None;
                }
                bytes = 0;
            }
            bytes += size;
            batch.push(next);
        }
        Some(batch)
    }

    /// Takes one batch to its end, part by part in order. `false` when stopped meanwhile.
    async fn deliver(&self, batch: Vec<LaneEvent>) -> bool {
        let mut parts: VecDeque<Vec<LaneEvent>> = self.alone_apart(batch).into();
        while let Some(part) = parts.pop_front() {
            let Some(part) = self.leave_held(part).await else { return false };
            if part.is_empty() {
                continue;
            }
            match self.send_part(part).await {
                PartEnd::Done => {}
                PartEnd::Split(first, second) => {
                    parts.push_front(second);
                    parts.push_front(first);
                }
                PartEnd::Stopped => return false,
            }
        }
        true
    }

    /// The batch in order, with every event that goes alone in a part of its own: one
    /// over the broker's size limit (failed alone) and a timer message (the broker
    /// reads a delivery time only on a message sent by itself).
    fn alone_apart(&self, batch: Vec<LaneEvent>) -> Vec<Vec<LaneEvent>> {
        let mut parts: Vec<Vec<LaneEvent>> = Vec::new();
        for event in batch {
            match parts.last_mut() {
                Some(run) if self.batchable(&event) && run.first().is_some_and(|e| self.batchable(e)) => {
                    run.push(event)
                }
                _ => parts.push(vec![event]),
            }
        }
        parts
    }

    fn batchable(&self, event: &LaneEvent) -> bool {
        !event.event.is_timed() && check_size(&event.event, self.settings.max_message_bytes).is_ok()
    }

    /// Why the broker would refuse the event leading `part` whatever else it holds.
    fn refusal(&self, part: &[LaneEvent]) -> Option<PublishError> {
        let event = &part.first()?.event;
        check_size(event, self.settings.max_message_bytes)
            .and_then(|()| check_delivery_time(event, self.settings.timer_max_delay, SystemTime::now()))
            .err()
    }

    /// Leaves the events of held keys PENDING (reported as held); returns the rest
    /// (`None` when stopped).
    async fn leave_held(&self, part: Vec<LaneEvent>) -> Option<Vec<LaneEvent>> {
        let (held, free): (Vec<LaneEvent>, Vec<LaneEvent>) = part.into_iter().partition(|e| {
            self.held.verdict(&e.event.topic, &e.event.biz_key, e.event.id, e.swept()) == Verdict::LeaveBehind
        });
        if let Some(first) = held.first() {
            tracing::warn!(
                events = held.len(),
                first_id = first.event.id,
                "events of held keys left PENDING until the event they wait for is delivered, requeued or skipped"
            );
            if !self.recorder.hold(&held).await {
                return None;
            }
        }
        Some(free)
    }

    /// Sends one part until it has ended.
    async fn send_part(&self, part: Vec<LaneEvent>) -> PartEnd {
        if let Some(error) = self.refusal(&part) {
            return self.event_failure(part, &error).await;
        }
        let batch = match prepare(part.iter().map(|e| &e.event), Some(self.term.number())) {
            Ok(batch) => batch,
            Err(error) => return self.event_failure(part, &error).await,
        };
        let mut outages = 0u32;
        let mut unknown = 0u32;
        loop {
            if !self.term.is_current() {
                // Deposed: another instance may publish now; these events stay unacknowledged.
                return PartEnd::Stopped;
            }
            let error = match self.try_send(&part, &batch).await {
                Ok(()) => {
                    let reported = self.recorder.sent(part, batch.msg_ids);
                    return if reported { PartEnd::Done } else { PartEnd::Stopped };
                }
                // The term ran out while the broker was looked up: checked again above.
                Err(PublishError::NoTimeLeft) => continue,
                Err(error) => error,
            };
            let class = self.class_of(&error);
            self.metrics.retry(class);
            let go_on = match class {
                ErrorClass::Event => return self.event_failure(part, &error).await,
                ErrorClass::Outage => {
                    outages += 1;
                    self.wait_out_outage(&error, outages).await
                }
                ErrorClass::Unknown if part[0].swept() => return self.book_retries(part, &error).await,
                ErrorClass::Unknown => match self.settings.backoff.after_failure(unknown, self.settings.max_retry) {
                    NextAttempt::GiveUp { attempts } => {
                        let detail = format!("gave up after {attempts} attempts: {error}");
                        return self.give_up(part, FailReason::RetriesExhausted, &detail).await;
                    }
                    NextAttempt::RetryIn(delay) => {
                        unknown += 1;
                        self.health.problem(
                            self.part(),
                            format!(
                                "broker {}: sends to {} queue {} fail for an unknown reason (retry {unknown} of {}): {error}",
                                self.queue.broker_name(),
                                self.queue.topic(),
                                self.queue.queue_id(),
                                self.settings.max_retry
                            ),
                        );
                        tracing::warn!(queue = self.queue.queue_id(), topic = %self.queue.topic(), attempt = unknown, retry_in = ?delay, %error, "send failed for an unknown reason; retrying the same batch");
                        self.recorder.wait(delay).await
                    }
                },
            };
            if !go_on {
                return PartEnd::Stopped;
            }
        }
    }

    /// One send of `batch`, the events of `part`; `Ok` on SEND_OK.
    async fn try_send(&self, part: &[LaneEvent], batch: &Prepared) -> Result<(), PublishError> {
        let (started, began) = (std::time::Instant::now(), SystemTime::now());
        // Written, and waited for, only while the term holds: every send checks it first.
        let sent = self.publisher.send(&self.queue, batch, self.term.remaining()).await;
        self.metrics.sent_batch(self.queue.broker_name(), send_status(&sent), started.elapsed());
        let outcome = match &sent {
            Ok(()) => SendOutcome::Sent(&batch.msg_ids),
            Err(error) => SendOutcome::Failed(error),
        };
        record_send(part.iter().map(|e| &e.event), self.queue.topic().as_str(), began, outcome);
        sent?;
        self.publisher.confirmed(self.queue.broker_name());
        self.outage.end();
        self.health.clear(&self.part());
        self.health.dependencies().up(&self.broker());
        fault::lane_sent(part.len());
        Ok(())
    }

    /// Waits before the next attempt in an outage: the probe delay, or less if a new
    /// producer takes over meanwhile. `false` when shut down.
    async fn wait_out_outage(&self, error: &PublishError, attempt: u32) -> bool {
        let mut renewals = self.publisher.renewals();
        if error.unreachable() {
            self.publisher.unreachable(self.queue.broker_name());
        }
        self.outage.begin();
        self.health.problem(
            self.part(),
            format!(
                "broker {}: sends to {} queue {} are not confirmed (held, retrying): {error}",
                self.queue.broker_name(),
                self.queue.topic(),
                self.queue.queue_id()
            ),
        );
        self.health.dependencies().down(&self.broker(), error);
        tracing::debug!(broker = %self.queue.broker_name(), queue = self.queue.queue_id(), topic = %self.queue.topic(), attempt, %error, "broker cannot take the batch now; holding it and retrying");
        tokio::select! {
            () = tokio::time::sleep(OUTAGE_PROBE.delay(attempt)) => true,
            changed = renewals.changed() => changed.is_ok(),
            () = self.recorder.shutdown.cancelled() => false,
        }
    }

    /// An event-class refusal: halves of a larger part are tried on their own; a
    /// single event fails.
    async fn event_failure(&self, mut part: Vec<LaneEvent>, error: &PublishError) -> PartEnd {
        if part.len() > 1 {
            let second = part.split_off(part.len() / 2);
            return PartEnd::Split(part, second);
        }
        tracing::error!(queue = self.queue.queue_id(), topic = %self.queue.topic(), %error, "an event the broker can never take: marking it FAILED");
        let reason = match error {
            PublishError::BodyTooLarge { .. } => FailReason::TooLarge,
            _ => FailReason::Rejected,
        };
        self.give_up(part, reason, &error.to_string()).await
    }

    /// Marks `part` FAILED, then (hold policy) holds its keys. In that order, so a
    /// refresh of the held keys from the table never forgets one: the key is either
    /// held after the refresh began or already FAILED in the table it reads.
    async fn give_up(&self, part: Vec<LaneEvent>, reason: FailReason, detail: &str) -> PartEnd {
        self.health.clear(&self.part());
        if !self.recorder.fail(&part, reason, detail).await {
            return PartEnd::Stopped;
        }
        if self.settings.failed_key_policy == FailedKeyPolicy::Hold {
            hold_keys(&self.held, &part);
        }
        PartEnd::Done
    }

    /// What a failed send says, judged by its scope: an answer of unknown class that
    /// more than one queue of this lane's broker got since the broker's last confirmed
    /// send is the broker's trouble (see `PublishError::class_on_broker`).
    fn class_of(&self, error: &PublishError) -> ErrorClass {
        let refusing = match error.class() {
            ErrorClass::Unknown => self.publisher.refused(self.queue.broker_name(), self.queue.queue_id()),
            _ => 0,
        };
        error.class_on_broker(refusing)
    }

    /// This lane's name in the health record.
    fn broker(&self) -> Dependency {
        Dependency::Broker(self.queue.broker_name().to_string())
    }

    fn part(&self) -> Part {
        Part::Lane(self.queue.topic().to_string(), self.queue.broker_name().to_string(), self.queue.queue_id())
    }

    /// Swept rows after an attempt that failed for an unknown reason: each goes back
    /// to PENDING with its next retry time, or FAILED when its retries are used up.
    async fn book_retries(&self, part: Vec<LaneEvent>, error: &PublishError) -> PartEnd {
        let mut later: BTreeMap<Duration, Vec<LaneEvent>> = BTreeMap::new();
        let mut give_up = Vec::new();
        for event in part {
            let failures_before = match event.attempts {
                Attempts::Once { failures_before } => failures_before,
                Attempts::InPlace => 0,
            };
            match self.settings.backoff.after_failure(failures_before, self.settings.max_retry) {
                NextAttempt::RetryIn(delay) => later.entry(delay).or_default().push(event),
                NextAttempt::GiveUp { .. } => give_up.push(event),
            }
        }
        tracing::warn!(queue = self.queue.queue_id(), topic = %self.queue.topic(), %error, failed = give_up.len(), "swept rows not confirmed for an unknown reason; retries booked in the table");
        for (delay, group) in later {
            if !self.recorder.defer(&group, delay, &format!("send failed, retry in {delay:?}: {error}")).await {
                return PartEnd::Stopped;
            }
            // Until the deferred rows are delivered, nothing of their keys may pass them.
            hold_keys(&self.held, &group);
        }
        if give_up.is_empty() {
            return PartEnd::Done;
        }
        let detail = format!("gave up after {} retries: {error}", self.settings.max_retry);
        self.give_up(give_up, FailReason::RetriesExhausted, &detail).await
    }
}

/// The bytes an event is counted for in a batch: its payload, its headers and the
/// usual properties.
fn batch_bytes(event: &OutboxEvent) -> usize {
    event.payload.len() + event.extras().headers.as_ref().map_or(0, String::len) + MESSAGE_OVERHEAD
}

/// Holds the keys of `events` behind them.
fn hold_keys(held: &HeldKeys, events: &[LaneEvent]) {
    for event in events {
        held.hold((event.event.topic.clone(), event.event.biz_key.clone()), event.event.id);
    }
}

/// Fails every event that arrives on `input` with `reason`: the lane of a topic that
/// does not exist on the cluster and is not in the configuration. Under the hold
/// policy their keys are held like any other FAILED event's.
pub async fn run_failing(
    mut input: mpsc::UnboundedReceiver<LaneEvent>,
    reason: String,
    recorder: Recorder,
    held: Option<HeldKeys>,
) {
    while let Some(first) = input.recv().await {
        let mut events = vec![first];
        while let Ok(next) = input.try_recv() {
            events.push(next);
        }
        if !recorder.fail(&events, FailReason::NoTopic, &reason).await {
            return;
        }
        if let Some(held) = &held {
            hold_keys(held, &events);
        }
    }
}

/// How the broker answered a send, for the metrics.
fn send_status(sent: &Result<(), PublishError>) -> SendStatus {
    match sent {
        Ok(_) => SendStatus::SendOk,
        Err(PublishError::NotSendOk { status }) => *status,
        Err(_) => SendStatus::Error,
    }
}
