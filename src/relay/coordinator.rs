//! The coordinator: the one task that sees every batch and every ack.
//!
//! It registers each batch (binlog transaction or sweep claim) with the ack tracker,
//! routes its events to the lane of `hash(biz_key) % queue_count` (starting lanes on
//! first use), takes the lanes' reports, forwards SENT rows to the status writer,
//! drops each batch's share of the in-flight budget once the acknowledged prefix
//! passes it, publishes the binlog path's progress to the sweep's watermark, and
//! hands the checkpoint to its writer at most every `checkpoint.interval`. Nothing
//! else decides the checkpoint. Its loop beats the liveness clock on every turn and
//! reports a checkpoint that stopped moving while batches are in flight.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::ack::AckTracker;
use super::route::queue_for;
use super::RelayError;
use crate::checkpoint::{Checkpoint, CheckpointWriter};
use crate::config::HashFunction;
use crate::health::{Health, Part};
use crate::lanes::{run_failing, Attempts, Lane, LaneEvent, LaneReport, LaneSettings, Outcome, Recorder};
use crate::metrics::RelayMetrics;
use crate::rocketmq::{Producer, PublishError};
use crate::source::sweep::Watermark;
use crate::source::{Admitted, BinlogPosition, InFlight, Origin};
use crate::store::Sent;
use crate::supervise::Supervisor;

/// How long shutdown waits for in-flight sends before the final checkpoint.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How often progress is logged.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
/// No acknowledgement this long while batches are in flight: the relay is not ready.
const ACK_STALL: Duration = Duration::from_secs(30);

/// Where a topic's events go.
enum TopicLanes {
    /// One sender per queue index.
    Queues(Vec<mpsc::UnboundedSender<LaneEvent>>),
    /// The topic cannot be sent to: every event is FAILED.
    Failing(mpsc::UnboundedSender<LaneEvent>),
}

/// Counters for the progress log.
#[derive(Default)]
struct Progress {
    sent: u64,
    failed: u64,
    deferred: u64,
}

/// The binlog path's durable position (binlog mode only).
pub struct Durable {
    pub writer: CheckpointWriter,
    pub checkpoint: Checkpoint,
}

/// Everything the coordinator owns.
pub struct Coordinator {
    pub tracker: AckTracker<BinlogPosition, InFlight>,
    /// Queue count per topic in use (saved with the checkpoint in binlog mode).
    pub pins: BTreeMap<String, u32>,
    pub durable: Option<Durable>,
    pub watermark: Arc<Watermark>,
    pub checkpoint_every: Duration,
    pub producer: Arc<Producer>,
    pub hash: HashFunction,
    /// Pinned queue counts from configuration (they win over the checkpoint).
    pub configured: HashMap<String, u32>,
    pub lane_settings: Arc<LaneSettings>,
    pub recorder: Recorder,
    /// Bounded: when the primary falls behind, the coordinator waits (backpressure)
    /// instead of queueing write-backs without limit.
    pub sent: mpsc::Sender<Sent>,
    pub metrics: RelayMetrics,
    pub health: Health,
    /// Spawns the lanes.
    pub supervisor: Supervisor,
    pub shutdown: CancellationToken,
}

/// The coordinator's inputs.
pub struct Inputs {
    pub source: mpsc::Receiver<Admitted>,
    pub reports: mpsc::UnboundedReceiver<Vec<LaneReport>>,
}

impl Coordinator {
    /// Runs until shutdown or the end of the source; then drains and checkpoints.
    pub async fn run(mut self, mut inputs: Inputs) -> Result<(), RelayError> {
        let mut topics: HashMap<String, TopicLanes> = HashMap::new();
        let mut progress = Progress::default();
        let mut tick = tokio::time::interval(self.checkpoint_every);
        let mut progress_tick = tokio::time::interval(PROGRESS_EVERY);
        let mut dirty = false;
        let mut last_ack = Instant::now();
        loop {
            self.health.beat();
            tokio::select! {
                biased;
                Some(reports) = inputs.reports.recv() => {
                    last_ack = Instant::now();
                    dirty |= self.on_reports(reports, &mut progress).await;
                }
                admitted = inputs.source.recv() => match admitted {
                    Some(admitted) => dirty |= self.on_tx(admitted, &mut topics).await?,
                    None => break,
                },
                _ = tick.tick() => {
                    if std::mem::take(&mut dirty) {
                        self.persist();
                    }
                    self.check_stall(last_ack);
                }
                _ = progress_tick.tick() => self.log_progress(&progress),
                () = self.shutdown.cancelled() => break,
            }
        }
        self.drain(&mut inputs.reports, &mut progress).await;
        self.log_progress(&progress);
        self.save_final().await
    }

    /// Not ready while batches are in flight and none was acknowledged for a while.
    fn check_stall(&self, last_ack: Instant) {
        let in_flight = self.tracker.in_flight();
        if in_flight > 0 && last_ack.elapsed() > ACK_STALL {
            self.health.problem(
                Part::Checkpoint,
                format!(
                    "pipeline: no send acknowledged for {}s while {in_flight} batches are in flight, so the checkpoint cannot move",
                    last_ack.elapsed().as_secs()
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
            durable.writer.save_now(checkpoint).await?;
        }
        Ok(())
    }

    /// Registers `tx` and routes its events. Returns whether the watermark moved.
    async fn on_tx(
        &mut self,
        admitted: Admitted,
        topics: &mut HashMap<String, TopicLanes>,
    ) -> Result<bool, RelayError> {
        let Admitted { tx, in_flight } = admitted;
        let (end, failures_before) = match tx.origin {
            Origin::Binlog { end } => (Some(end), Vec::new()),
            Origin::BinlogPart => (None, Vec::new()),
            Origin::Sweep { retry_counts } => (None, retry_counts),
        };
        let seq = self.tracker.register(tx.events.len(), in_flight, end);
        for (index, event) in tx.events.into_iter().enumerate() {
            if !topics.contains_key(&event.topic) {
                let lanes = self.start_topic(&event.topic).await?;
                topics.insert(event.topic.clone(), lanes);
            }
            let lane = match &topics[&event.topic] {
                TopicLanes::Queues(lanes) => {
                    let count = u32::try_from(lanes.len()).unwrap_or(u32::MAX);
                    &lanes[queue_for(self.hash, &event.biz_key, count) as usize]
                }
                TopicLanes::Failing(lane) => lane,
            };
            let attempts = match failures_before.get(index) {
                Some(&failures_before) => Attempts::Once { failures_before },
                None => Attempts::InPlace,
            };
            // A lane only stops at shutdown; its events then stay unacknowledged.
            let _ = lane.send(LaneEvent { tx_seq: seq, event, attempts });
        }
        Ok(self.advance())
    }

    /// Applies lane reports. Returns whether the watermark moved.
    async fn on_reports(&mut self, reports: Vec<LaneReport>, progress: &mut Progress) -> bool {
        for report in reports {
            self.tracker.ack(report.tx_seq);
            match report.outcome {
                Outcome::Sent { msg_id, at } => {
                    progress.sent += 1;
                    self.metrics.sent.inc();
                    // Only fails when the writer is gone (shutdown): the row then stays
                    // PENDING and is sent again later, never lost.
                    let _ = self.sent.send(Sent { id: report.id, msg_id, at }).await;
                }
                Outcome::Failed => {
                    progress.failed += 1;
                    self.metrics.failed.inc();
                }
                Outcome::Deferred => progress.deferred += 1,
            }
        }
        self.advance()
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
        Some(durable.checkpoint.clone())
    }

    fn advance(&mut self) -> bool {
        let advanced = self.tracker.advance();
        self.metrics.in_flight_transactions.set(i64::try_from(self.tracker.in_flight()).unwrap_or(i64::MAX));
        let (Some(end), Some(durable)) = (advanced, self.durable.as_mut()) else { return false };
        self.metrics.checkpoint_position.set(i64::try_from(end.pos).unwrap_or(i64::MAX));
        if let Some(commit_time) = end.commit_time {
            self.watermark.acknowledged(commit_time);
        }
        durable.checkpoint.position = end;
        true
    }

    /// Resolves a topic's pinned queues and starts its lanes.
    async fn start_topic(&mut self, topic: &str) -> Result<TopicLanes, RelayError> {
        let pinned = self.configured.get(topic).or_else(|| self.pins.get(topic)).copied();
        let queues = match pinned {
            Some(count) => self.producer.pinned_queues(topic, count).await,
            None => self.producer.live_queues(topic).await,
        };
        match queues {
            Ok(queues) if !queues.is_empty() => {
                let count = u32::try_from(queues.len()).unwrap_or(u32::MAX);
                if self.pins.insert(topic.to_owned(), count).is_none() {
                    // Durable before the first send of this topic, so a restart routes the same way.
                    self.save_now().await?;
                    tracing::info!(topic, queue_count = count, "pinned queue count");
                }
                Ok(TopicLanes::Queues(queues.into_iter().map(|queue| self.spawn_lane(queue)).collect()))
            }
            Ok(_) => Ok(self.failing_topic(
                topic,
                &PublishError::TopicMissing { topic: topic.to_owned(), queue_count: pinned.unwrap_or(8) },
            )),
            Err(error @ PublishError::TopicMissing { .. }) => Ok(self.failing_topic(topic, &error)),
            Err(error) => Err(error.into()),
        }
    }

    fn spawn_lane(
        &self,
        queue: rocketmq_model::common::message::message_queue::MessageQueue,
    ) -> mpsc::UnboundedSender<LaneEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        let lane = Lane {
            queue,
            producer: Arc::clone(&self.producer),
            settings: Arc::clone(&self.lane_settings),
            recorder: self.recorder.clone(),
            metrics: self.metrics.clone(),
            health: self.health.clone(),
        };
        self.supervisor.spawn("lane", async move {
            lane.run(rx).await;
            Ok(())
        });
        tx
    }

    fn failing_topic(&self, topic: &str, error: &PublishError) -> TopicLanes {
        tracing::error!(topic, %error, "topic cannot be published to: its events are marked FAILED");
        let (tx, rx) = mpsc::unbounded_channel();
        let (reason, recorder) = (error.to_string(), self.recorder.clone());
        self.supervisor.spawn("failing lane", async move {
            run_failing(rx, reason, recorder).await;
            Ok(())
        });
        TopicLanes::Failing(tx)
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
            in_flight_batches = self.tracker.in_flight(),
            checkpoint_file = position.map(|p| p.file.as_str()),
            checkpoint_pos = position.map(|p| p.pos),
            "progress"
        );
    }
}
