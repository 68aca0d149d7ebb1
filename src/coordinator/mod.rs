//! The coordinator: the one task that sees every batch and every ack.
//!
//! It registers each batch (binlog transaction or sweep claim) with the ack tracker,
//! routes its events to the lane of `hash(biz_key) % queue_count` (starting lanes on
//! first use), takes the lanes' reports, forwards SENT rows to the SENT write-back,
//! drops each batch's share of the in-flight budget once the acknowledged prefix
//! passes it, publishes the binlog path's progress to the sweep's watermark, and
//! hands the checkpoint to its writer at most every `checkpoint.interval`. Nothing
//! else decides the checkpoint. Its loop beats the liveness clock on every turn and
//! reports a checkpoint that stopped moving while batches are in flight.
//!
//! Beside it: the ack tracker (`ack`), which knows the acknowledged prefix, each
//! queue's progress past it (`replay`), the routing function (`route`), and the check
//! of the configured topics' routes at the start of a term (`topics`).

pub(crate) mod ack;
pub(crate) mod replay;
pub mod route;
pub(crate) mod topics;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use rocketmq_model::common::message::message_queue::MessageQueue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::checkpoint::{Checkpoint, CheckpointWriter};
use crate::config::{Config, FailedKeyPolicy, HashFunction};
use crate::error::RelayError;
use crate::event::OutboxEvent;
use crate::health::{Health, Part};
use crate::lanes::{
    run_failing, Attempts, HeldKeys, Lane, LaneEvent, LaneInput, LaneReport, LaneSettings, OutageFlag, Outcome,
    QueueSlot, Recorder,
};
use crate::leader::Term;
use crate::metrics::{RelayMetrics, WriteMiss};
use crate::rocketmq::{PublishError, Publisher, QueueLayout, Resolved, PROBE_EVERY};
use crate::source::sweep::Watermark;
use crate::source::{Admitted, BinlogPosition, InFlight, Origin};
use crate::store::Sent;
use crate::supervise::Supervisor;
use crate::write_back::{Queued, WriteBacks};
use ack::AckTracker;
use replay::QueueProgress;
use route::queue_for;

/// How long the route lookup of a known topic may take when judging whether the
/// broker serves anything (the client's own limit is a minute).
const KNOWN_ROUTE_WITHIN: Duration = Duration::from_secs(3);

/// How long shutdown waits for in-flight sends before the final checkpoint.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How often progress is logged: a minute's line is a heartbeat a person can read
/// past, not a stream that buries what changed.
const PROGRESS_EVERY: Duration = Duration::from_secs(60);
/// No acknowledgement this long while batches are in flight: the relay is not ready.
const ACK_STALL: Duration = Duration::from_secs(30);

/// How long a topic that is not on the cluster (and not configured) fails its events
/// before its route is looked up again.
const MISSING_TOPIC_RECHECK: Duration = Duration::from_secs(30);

/// Each topic's lanes, looked up for every event: hashed with foldhash, which costs a
/// fraction of the standard map's SipHash for keys this short.
type Topics = foldhash::HashMap<String, TopicLanes>;

/// Where a topic's events go.
enum TopicLanes {
    /// One sender per queue index, with the queue's progress slot.
    Queues(Vec<(LaneInput, QueueSlot)>),
    /// The topic is not on the cluster and not configured: its events are FAILED
    /// until `until`, then the route is looked up again.
    Failing { lane: LaneInput, until: Instant },
}

/// Logs the brokers of `topic`'s pinned `layout` that have no route now, if any.
pub(crate) fn warn_brokers_down(topic: &str, layout: &QueueLayout, down: &[String]) {
    if !down.is_empty() {
        tracing::warn!(topic, brokers = ?down, %layout, "brokers of the topic's pinned layout have no route now (down?): their queues wait for them, the others send");
    }
}

/// Counters for the progress log.
#[derive(Default)]
struct Progress {
    sent: u64,
    failed: u64,
    deferred: u64,
    held: u64,
    /// Binlog events the sweep had already claimed during a takeover: not sent again.
    swept_before: u64,
    /// Binlog events read again that their queue had finished before: not sent again.
    finished_before: u64,
}

/// Where a transaction ends: its binlog position (none for a sweep batch or a part of
/// a large transaction) and its highest outbox row id (none without events).
#[derive(Debug)]
struct TxEnd {
    position: Option<BinlogPosition>,
    highest_id: Option<u64>,
}

/// What a run of acknowledged transactions moves the checkpoint to.
#[derive(Debug, Default)]
struct AckedPrefix {
    position: Option<BinlogPosition>,
    highest_id: Option<u64>,
}

impl AckedPrefix {
    fn add(&mut self, end: TxEnd) {
        self.position = end.position.or(self.position.take());
        self.highest_id = self.highest_id.max(end.highest_id);
    }
}

/// The binlog path's durable position (binlog mode only).
pub struct Durable {
    pub writer: CheckpointWriter,
    pub checkpoint: Checkpoint,
}

/// Everything the coordinator owns.
pub struct Coordinator {
    tracker: AckTracker<TxEnd, InFlight>,
    /// Each queue's last finished binlog event past the checkpoint (saved with it).
    queue_progress: QueueProgress,
    /// Queue count per topic in use (saved with the checkpoint in binlog mode).
    pins: BTreeMap<String, u32>,
    /// Queue layout per topic in use (saved with the checkpoint in binlog mode).
    layouts: BTreeMap<String, QueueLayout>,
    durable: Option<Durable>,
    watermark: Arc<Watermark>,
    checkpoint_every: Duration,
    publisher: Arc<Publisher>,
    hash: HashFunction,
    /// Pinned queue counts from configuration (they win over the checkpoint).
    configured: HashMap<String, u32>,
    lane_settings: Arc<LaneSettings>,
    held: HeldKeys,
    recorder: Recorder,
    /// Bounded: when the primary falls behind, the coordinator waits (backpressure)
    /// instead of queueing write-backs without limit.
    sent: WriteBacks,
    metrics: RelayMetrics,
    health: Health,
    /// When the acknowledged prefix last moved (or the first batch after a pause came).
    progress_at: Instant,
    /// Spawns the lanes.
    supervisor: Supervisor,
    /// The leader term the pipeline runs under.
    term: Term,
    shutdown: CancellationToken,
}

/// Which queues the topics route to when the coordinator starts.
pub struct Pins {
    /// Queue count per topic, pinned in the checkpoint or for this process.
    pub counts: BTreeMap<String, u32>,
    /// Queue layout per topic pinned in the checkpoint.
    pub layouts: BTreeMap<String, QueueLayout>,
    /// Queue counts from the configuration (they win over the checkpoint).
    pub configured: HashMap<String, u32>,
}

/// What the coordinator sends to, reports to and checkpoints through.
pub struct Links {
    pub publisher: Arc<Publisher>,
    pub held: HeldKeys,
    /// The checkpoint and its writer (binlog mode).
    pub durable: Option<Durable>,
    pub watermark: Arc<Watermark>,
    pub recorder: Recorder,
    pub write_backs: WriteBacks,
    pub metrics: RelayMetrics,
    pub health: Health,
    pub supervisor: Supervisor,
    pub term: Term,
}

/// The coordinator's inputs.
pub struct Inputs {
    pub source: mpsc::Receiver<Admitted>,
    pub reports: mpsc::UnboundedReceiver<Vec<LaneReport>>,
}

impl Coordinator {
    /// A coordinator with the configuration's routing, lane and checkpoint settings.
    pub fn new(config: &Config, pins: Pins, links: Links) -> Self {
        let Links { publisher, held, durable, watermark, recorder, write_backs, metrics, health, supervisor, term } =
            links;
        let saved_marks = durable.as_ref().map(|durable| durable.checkpoint.queue_marks.clone());
        Self {
            tracker: AckTracker::new(0),
            queue_progress: QueueProgress::new(saved_marks.unwrap_or_default()),
            pins: pins.counts,
            layouts: pins.layouts,
            durable,
            watermark,
            checkpoint_every: Duration::from_millis(config.checkpoint.interval_ms),
            publisher,
            hash: config.rocketmq.hash,
            configured: pins.configured,
            lane_settings: Arc::new(LaneSettings::new(config)),
            held,
            recorder,
            sent: write_backs,
            metrics,
            health,
            progress_at: Instant::now(),
            shutdown: supervisor.stop_token(),
            supervisor,
            term,
        }
    }

    /// Runs until shutdown, the end of the source or an error; then drains and
    /// checkpoints whatever made it stop.
    pub async fn run(mut self, mut inputs: Inputs) -> Result<(), RelayError> {
        let mut topics = Topics::default();
        let mut progress = Progress::default();
        let mut tick = tokio::time::interval(self.checkpoint_every);
        let mut progress_tick = tokio::time::interval(PROGRESS_EVERY);
        let mut dirty = false;
        let stopped = loop {
            self.health.beat();
            // Timers first: a steady stream of batches must not starve the checkpoint.
            let turn = tokio::select! {
                biased;
                () = self.shutdown.cancelled() => break Ok(()),
                _ = tick.tick() => {
                    if std::mem::take(&mut dirty) {
                        self.persist();
                    }
                    self.check_stall();
                    self.metrics.held_keys.set(crate::metrics::gauge_value(self.held.len()));
                    Ok(())
                }
                _ = progress_tick.tick() => {
                    self.log_progress(&progress);
                    Ok(())
                }
                Some(reports) = inputs.reports.recv() => {
                    dirty |= self.on_reports(reports, &mut progress).await;
                    Ok(())
                }
                admitted = inputs.source.recv() => match admitted {
                    Some(admitted) => self.on_tx(admitted, &mut topics, &mut progress).await.map(|moved| dirty |= moved),
                    None => break Ok(()),
                },
            };
            if let Err(error) = turn {
                break Err(error);
            }
        };
        if !self.term.is_current() {
            // Deposed: another instance publishes and checkpoints now; nothing more here
            // (a failure on the way is the deposition's, not the pipeline's).
            self.log_progress(&progress);
            tracing::warn!(
                term = self.term.number(),
                "term over: no drain and no final checkpoint; the next leader resumes from the last checkpoint"
            );
            return Ok(());
        }
        self.drain(&mut inputs.reports, &mut progress).await;
        self.log_progress(&progress);
        let saved = match self.save_final().await {
            // The lease ran out during the drain: the next leader owns the position.
            Err(_) if !self.term.is_current() => {
                tracing::warn!(term = self.term.number(), "the leader lease ran out during the drain: no final checkpoint; the next leader resumes from the last one");
                Ok(())
            }
            saved => saved,
        };
        stopped.and(saved)
    }

    /// Not ready while batches are in flight and the acknowledged prefix has not
    /// moved for a while (a lane stuck at the head holds the checkpoint).
    fn check_stall(&self) {
        let in_flight = self.tracker.in_flight();
        let still = self.progress_at.elapsed();
        if in_flight > 0 && still > ACK_STALL {
            self.health.problem(
                Part::Checkpoint,
                format!(
                    "pipeline: the acknowledged prefix has not moved for {}s with {in_flight} batches in flight, so the checkpoint cannot move",
                    still.as_secs()
                ),
            );
        } else {
            self.health.clear(&Part::Checkpoint);
        }
    }

    /// The last checkpoint, awaited until durable: the relay is about to stop.
    async fn save_final(&mut self) -> Result<(), RelayError> {
        self.save_now().await?;
        if let Some(durable) = &self.durable {
            let position = &durable.checkpoint.position;
            tracing::info!(file = %position.file, pos = position.pos, gtid = ?position.gtid, "final checkpoint written");
        }
        Ok(())
    }

    /// Writes the checkpoint and waits until it is durable (binlog mode only).
    async fn save_now(&mut self) -> Result<(), RelayError> {
        let Some(checkpoint) = self.current_checkpoint() else { return Ok(()) };
        if let Some(durable) = &self.durable {
            self.health.alive_while(durable.writer.save_now(checkpoint)).await?;
        }
        Ok(())
    }

    /// Registers `tx` and routes its events. Returns whether the watermark moved.
    async fn on_tx(
        &mut self,
        admitted: Admitted,
        topics: &mut Topics,
        progress: &mut Progress,
    ) -> Result<bool, RelayError> {
        let Admitted { tx, in_flight } = admitted;
        if !self.open_topics(&tx.events, topics).await? {
            return Ok(false); // stopping: these events stay unacknowledged
        }
        let (end, failures_before, from_binlog) = match tx.origin {
            Origin::Binlog { end } => (Some(end), Vec::new(), true),
            Origin::BinlogPart => (None, Vec::new(), true),
            Origin::Sweep { retry_counts } => (None, retry_counts, false),
            Origin::Moved => {
                self.queue_progress.forget_inherited();
                (None, Vec::new(), true)
            }
        };
        if self.tracker.in_flight() == 0 {
            // The clock of the stall check starts with the first batch after a pause.
            self.progress_at = Instant::now();
        }
        let highest_id = tx.events.iter().map(|event| event.id).max();
        let seq = self.tracker.next_seq();
        let routed = Instant::now();
        let mut outgoing = Vec::with_capacity(tx.events.len());
        for (index, event) in tx.events.into_iter().enumerate() {
            let (lane, slot) = self.lane_for(topics, &event);
            if from_binlog && self.sent_before(slot, &event, seq, progress) {
                continue;
            }
            // Only binlog events move a queue's mark: a replay of the binlog never
            // meets a swept row that was not in it, and would skip that queue for good.
            let slot = slot.filter(|_| from_binlog);
            let attempts = match failures_before.get(index) {
                Some(&failures_before) => Attempts::Once { failures_before },
                None => Attempts::InPlace,
            };
            outgoing.push((lane, LaneEvent { tx_seq: seq, event, attempts, routed, slot }));
        }
        self.tracker.register(outgoing.len(), in_flight, Some(TxEnd { position: end, highest_id }));
        for (lane, event) in outgoing {
            lane.send(event);
        }
        Ok(self.advance())
    }

    /// Starts the lanes of every topic of `events` not started yet (or failing and
    /// due for another look); `false` when stopping first.
    async fn open_topics(&mut self, events: &[OutboxEvent], topics: &mut Topics) -> Result<bool, RelayError> {
        let stale = |lanes: &TopicLanes| matches!(lanes, TopicLanes::Failing { until, .. } if *until <= Instant::now());
        for event in events {
            if topics.get(&event.topic).is_none_or(stale) {
                let Some(lanes) = self.start_topic(&event.topic).await? else { return Ok(false) };
                topics.insert(event.topic.clone(), lanes);
            }
        }
        Ok(true)
    }

    /// The lane `event` goes to, and its queue's progress slot.
    fn lane_for<'t>(&self, topics: &'t Topics, event: &OutboxEvent) -> (&'t LaneInput, Option<QueueSlot>) {
        match &topics[&event.topic] {
            TopicLanes::Queues(lanes) => {
                let count = u32::try_from(lanes.len()).unwrap_or(u32::MAX);
                let (lane, slot) = &lanes[queue_for(self.hash, &event.biz_key, count) as usize];
                (lane, Some(*slot))
            }
            TopicLanes::Failing { lane, .. } => (lane, None),
        }
    }

    /// Whether binlog `event` (of transaction `seq`) went out before: its queue
    /// finished it in an earlier pipeline, or the sweep claimed it during a takeover.
    fn sent_before(&mut self, slot: Option<QueueSlot>, event: &OutboxEvent, seq: u64, progress: &mut Progress) -> bool {
        if slot.is_some_and(|slot| self.queue_progress.finished_before(slot, event.id, seq)) {
            progress.finished_before += 1;
            return true;
        }
        let swept = self.watermark.swept_already(event.id);
        progress.swept_before += u64::from(swept);
        swept
    }

    /// Applies lane reports. Returns whether the checkpoint changed.
    async fn on_reports(&mut self, reports: Vec<LaneReport>, progress: &mut Progress) -> bool {
        let mut marked = false;
        for report in reports {
            self.tracker.ack(report.tx_seq);
            if let Some(slot) = report.slot {
                let finished = matches!(report.outcome, Outcome::Sent(_) | Outcome::Failed);
                self.queue_progress.ended(slot, report.id, report.tx_seq, finished);
                marked = true;
            }
            match report.outcome {
                Outcome::Sent(sent) => {
                    progress.sent += 1;
                    self.write_back(sent).await;
                }
                Outcome::Failed => {
                    progress.failed += 1;
                }
                Outcome::Deferred => progress.deferred += 1,
                Outcome::Held => progress.held += 1,
            }
        }
        // A queue's progress is saved even while another queue holds the prefix.
        self.advance() || marked
    }

    /// Queues a SENT write-back; a full queue (the primary behind) is waited out. The
    /// writer is gone only when the pipeline stops: the row then stays PENDING (or goes
    /// back to PENDING with the term's claims) and is published again, never lost.
    async fn write_back(&mut self, sent: Sent) {
        let id = sent.id;
        let gone = match self.sent.try_row(sent) {
            Queued::Yes => false,
            Queued::Full(sent) => self.health.alive_while(self.sent.row(sent)).await.is_err(),
            Queued::WriterGone => true,
        };
        if gone {
            self.metrics.write_missed(WriteMiss::SentWriterStopped, 1);
            tracing::warn!(id, "the SENT writer has stopped: this row stays PENDING and is published again");
        }
    }

    /// Hands the checkpoint, with the current pins, to its writer (binlog mode only).
    fn persist(&mut self) {
        if let Some(checkpoint) = self.current_checkpoint() {
            if let Some(durable) = &self.durable {
                durable.writer.save(checkpoint);
            }
        }
    }

    /// The checkpoint to write now, with the current pins.
    fn current_checkpoint(&mut self) -> Option<Checkpoint> {
        let durable = self.durable.as_mut()?;
        durable.checkpoint.queue_counts.clone_from(&self.pins);
        durable.checkpoint.queue_layouts.clone_from(&self.layouts);
        durable.checkpoint.queue_marks = self.queue_progress.saved(self.tracker.first_pending());
        Some(durable.checkpoint.clone())
    }

    /// Pops the acknowledged prefix; in binlog mode moves the checkpoint to its newest
    /// position (the first one after a full sweep settles the sweep it owed) and
    /// through its highest row id. Returns whether the checkpoint changed.
    fn advance(&mut self) -> bool {
        let before = self.tracker.in_flight();
        let mut acked = AckedPrefix::default();
        self.tracker.advance_each(|end| acked.add(end));
        if self.tracker.in_flight() < before {
            self.progress_at = Instant::now();
        }
        self.metrics.in_flight_transactions.set(crate::metrics::gauge_value(self.tracker.in_flight()));
        let Some(durable) = self.durable.as_mut() else { return false };
        let checkpoint = &mut durable.checkpoint;
        if let Some(id) = acked.highest_id {
            checkpoint.acked_through = Some(checkpoint.acked_through.unwrap_or(0).max(id));
        }
        let Some(end) = acked.position else { return acked.highest_id.is_some() };
        if let Some(commit_time) = end.commit_time {
            self.watermark.acknowledged(commit_time);
        }
        checkpoint.position = end;
        if checkpoint.owed_sweep.take().is_some() {
            // The full sweep is done and everything it handed on acknowledged: saved at
            // once, so a restart from now on does not sweep again.
            self.persist();
        }
        true
    }

    /// Resolves a topic's queues and starts its lanes; `None` when stopping first.
    ///
    /// A topic with a known queue count or layout (configured, or pinned at an earlier
    /// first use) whose route cannot be read is an outage: the lookup is retried until
    /// it works. With a pinned layout, a broker missing from the route is down: the
    /// topic starts with every pinned queue, and that broker's lanes wait for it. Only
    /// a topic that is neither known nor on the cluster fails its events, and only
    /// while the broker serves the known ones.
    async fn start_topic(&mut self, topic: &str) -> Result<Option<TopicLanes>, RelayError> {
        let count = self.configured.get(topic).or_else(|| self.pins.get(topic)).copied();
        let layout = self.layouts.get(topic).cloned();
        let part = Part::Route(topic.to_owned());
        let mut attempt = 0u32;
        loop {
            let publisher = Arc::clone(&self.publisher);
            let lookup = async { publisher.resolve(topic, layout.as_ref(), count).await };
            let error = match self.health.alive_while(lookup).await {
                Ok(Resolved::Ready { layout, down }) => {
                    self.health.clear(&part);
                    warn_brokers_down(topic, &layout, &down);
                    return self.open_topic(topic, layout).await.map(Some);
                }
                Ok(Resolved::Incomplete { live, pinned }) => {
                    PublishError::QueueCountMismatch { topic: topic.to_owned(), pinned, live: live.len() }
                }
                Err(error) => error,
            };
            match error {
                PublishError::TopicMissing { .. } if count.is_none() && self.broker_serves_known_topics().await => {
                    return Ok(Some(self.failing_topic(topic, &error)))
                }
                // Routing by another layout would move keys between queues: a person decides.
                PublishError::LayoutChanged { .. } => return Err(error.into()),
                _ => {}
            }
            attempt += 1;
            self.health
                .problem(part.clone(), format!("broker: topic {topic} has no usable route (held, retrying): {error}"));
            if attempt % 50 == 1 {
                tracing::warn!(topic, %error, "cannot read the topic's whole route; its events wait and the lookup is retried");
            }
            tokio::select! {
                () = tokio::time::sleep(PROBE_EVERY * attempt.min(8)) => {}
                () = self.shutdown.cancelled() => return Ok(None),
            }
        }
    }

    /// Whether some topic the relay knows (configured or pinned) has a route now. An
    /// unknown topic without a route only fails its events then: while every known
    /// topic lacks one too, the broker is down (the NameServer drops a dead broker's
    /// routes) and the new topic is held like the others. With no known topic at all
    /// there is nothing to compare with, and the topic is taken as missing.
    async fn broker_serves_known_topics(&self) -> bool {
        let known: Vec<&String> = self.configured.keys().chain(self.pins.keys()).collect();
        if known.is_empty() {
            return true;
        }
        for topic in known {
            let lookup = tokio::time::timeout(KNOWN_ROUTE_WITHIN, self.publisher.live_queues(topic)).await;
            if lookup.is_ok_and(|found| found.is_ok_and(|queues| !queues.is_empty())) {
                return true;
            }
        }
        false
    }

    /// Pins the topic's queue layout and count (durable before its first send, so a
    /// restart routes the same way, even while a broker is down) and starts one lane
    /// per queue.
    async fn open_topic(&mut self, topic: &str, layout: QueueLayout) -> Result<TopicLanes, RelayError> {
        let count = u32::try_from(layout.len()).unwrap_or(u32::MAX);
        let queues = layout.queues(topic);
        if self.layouts.get(topic) != Some(&layout) {
            tracing::info!(topic, queue_count = count, %layout, "pinned queue layout");
            self.layouts.insert(topic.to_owned(), layout);
            self.pins.insert(topic.to_owned(), count);
            self.save_now().await?;
        }
        let mut lanes = Vec::with_capacity(queues.len());
        for (index, queue) in (0..count).zip(queues) {
            lanes.push((self.spawn_lane(queue), self.queue_progress.slot(topic, index)));
        }
        Ok(TopicLanes::Queues(lanes))
    }

    fn spawn_lane(&self, queue: MessageQueue) -> LaneInput {
        let (tx, rx) = mpsc::unbounded_channel();
        let queue_id = u32::try_from(queue.queue_id()).unwrap_or_default();
        let inflight = self.metrics.lane_inflight(queue.topic(), queue.broker_name(), queue_id);
        let outage = OutageFlag::new(self.metrics.broker_held_lanes(queue.broker_name()));
        let lane = Lane {
            queue,
            publisher: Arc::clone(&self.publisher),
            settings: Arc::clone(&self.lane_settings),
            recorder: self.recorder.for_lane(inflight.clone()),
            metrics: self.metrics.clone(),
            health: self.health.clone(),
            held: self.held.clone(),
            term: self.term.clone(),
            outage,
        };
        self.supervisor.spawn("lane", async move {
            lane.run(rx).await;
            Ok(())
        });
        LaneInput::new(tx, inflight)
    }

    fn failing_topic(&self, topic: &str, error: &PublishError) -> TopicLanes {
        tracing::error!(topic, %error, "topic is not on the cluster and not in rocketmq.topics: its events are marked FAILED (looked up again in {MISSING_TOPIC_RECHECK:?})");
        let (lane, rx) = mpsc::unbounded_channel();
        // Not a queue of the cluster: counted in a gauge of its own, not exported.
        let inflight = Gauge::default();
        let (reason, recorder) = (error.to_string(), self.recorder.for_lane(inflight.clone()));
        let held = (self.lane_settings.failed_key_policy == FailedKeyPolicy::Hold).then(|| self.held.clone());
        self.supervisor.spawn("failing lane", async move {
            run_failing(rx, reason, recorder, held).await;
            Ok(())
        });
        TopicLanes::Failing { lane: LaneInput::new(lane, inflight), until: Instant::now() + MISSING_TOPIC_RECHECK }
    }

    /// After the source stopped: take the reports of sends still running, for a while.
    async fn drain(&mut self, reports: &mut mpsc::UnboundedReceiver<Vec<LaneReport>>, progress: &mut Progress) {
        let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
        while self.tracker.in_flight() > 0 {
            match tokio::time::timeout_at(deadline, reports.recv()).await {
                Ok(Some(batch)) => {
                    self.on_reports(batch, progress).await;
                }
                _ => break,
            }
        }
    }

    fn log_progress(&self, progress: &Progress) {
        let position = self.durable.as_ref().map(|d| &d.checkpoint.position);
        tracing::info!(
            sent = progress.sent,
            failed = progress.failed,
            retries_booked = progress.deferred,
            held = progress.held,
            swept_during_takeover = progress.swept_before,
            finished_before_restart = progress.finished_before,
            in_flight_batches = self.tracker.in_flight(),
            checkpoint_file = position.map(|p| p.file.as_str()),
            checkpoint_pos = position.map(|p| p.pos),
            "progress"
        );
    }
}
