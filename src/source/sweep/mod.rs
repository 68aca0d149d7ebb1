//! The polling sweep: the fallback that makes "no loss" hold where the binlog path
//! cannot see a row, and the whole relay in poll mode.
//!
//! Every `sweep.interval` it puts expired leases back to PENDING, then claims due
//! PENDING rows (up to `sweep.batch` per claim, again at once while claims come back
//! full) and hands them to the same ordered lanes as the binlog path. In binlog mode
//! it first waits for the SENT write-backs queued so far, so a row already on the
//! broker is not claimed again just because its write-back is slow. What it may
//! take is the [`Cutoff`]: everything in poll mode; in binlog mode only rows the
//! binlog path has passed ([`watermark`]). A full sweep (first start, lost binlog
//! position) takes every row committed before it began, and reports when it has
//! handed them all on, so the binlog path attaches after them (per-key order); the
//! binlog path skips the ones it reads again (committed after its position was read).
//! While the binlog path is down the sweep runs at least every [`TAKEOVER_PERIOD`],
//! so a takeover delivers within seconds, not at the slow fallback period.

mod remembered;
pub mod watermark;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::config::{Mode, SweepConfig};
use crate::event::OutboxEvent;
use crate::fault::{self, Slow};
use crate::health::{Health, Part};
use crate::lanes::{HeldKey, HeldKeys, Waiting};
use crate::metrics::{FailReason, RelayMetrics};
use crate::source::{Handoff, Origin, OwedSweep, SourceTx};
use crate::store::{ClaimStore, Claimed, Cutoff, KeyUpTo, Malformed, StatusStore};
use crate::time::local_micros;
use crate::write_back::{Flushed, Unwritten, WriteBacks};

pub use watermark::Watermark;

/// The longest time between sweeps while the binlog path is down.
pub const TAKEOVER_PERIOD: Duration = Duration::from_secs(1);
/// Most rows one fence holds; more wait for the next period.
const FENCE_ROWS: usize = 10_000;
/// The longest a sweep waits for the SENT write-backs queued before it.
const WRITE_BACK_WAIT: Duration = Duration::from_secs(30);
/// How often, while keys are held, the sweep looks for a manual action that may have
/// freed them (one read of the audit table's newest id).
const RELEASE_CHECK: Duration = Duration::from_secs(1);
/// Held keys per claim of the rows they left behind.
const RELEASE_KEYS: usize = 100;

/// What the sweep does, and when.
#[derive(Debug, Clone)]
pub struct SweepSettings {
    pub interval: Duration,
    pub batch: usize,
    /// `None` in poll mode (no binlog path: take everything due); otherwise the grace
    /// and takeover delay applied to the binlog path's [`Watermark`].
    pub binlog: Option<BinlogGuard>,
}

/// How far behind the binlog path the sweep stays.
#[derive(Debug, Clone)]
pub struct BinlogGuard {
    pub watermark: Arc<Watermark>,
    pub grace: Duration,
    pub takeover_after: Duration,
}

impl SweepSettings {
    /// The sweep's settings from the configuration; `watermark` is the binlog path's
    /// progress in binlog mode, `None` in poll mode.
    pub fn new(sweep: &SweepConfig, mode: Mode, watermark: Option<Arc<Watermark>>) -> Self {
        Self {
            interval: sweep.interval(mode),
            batch: sweep.batch,
            binlog: watermark.map(|watermark| BinlogGuard {
                watermark,
                grace: Duration::from_millis(sweep.grace_ms),
                takeover_after: Duration::from_millis(sweep.takeover_after_ms),
            }),
        }
    }
}

/// How a full sweep tries the database again while it fails.
const FULL_SWEEP_RETRY: Backoff = Backoff { initial: Duration::from_millis(200), max: Duration::from_secs(10) };

/// Full sweeps asked for and not yet begun: the binlog path asks for one at a time.
const QUEUED_FULL_SWEEPS: usize = 4;

/// Where full sweeps are asked for, and the sweep's end of it.
pub fn full_sweeps() -> (mpsc::Sender<FullSweep>, mpsc::Receiver<FullSweep>) {
    mpsc::channel(QUEUED_FULL_SWEEPS)
}

/// A request for a full sweep; `done` fires once every row it covers is handed on.
pub struct FullSweep {
    pub owed: OwedSweep,
    /// When the request was made, for a position whose reading on the primary's clock
    /// is unknown: rows committed since then are in the binlog stream too, and the
    /// binlog path skips the ones this sweep claimed.
    pub position_read: Instant,
    pub done: oneshot::Sender<()>,
}

/// Which claimed rows the binlog path may still read (it skips those it meets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AheadOfBinlog {
    /// None: the binlog path has passed every row the claim may take.
    Nothing,
    /// Every one: claimed during a takeover, or left behind by a held key.
    Every,
    /// Those created from this instant on (the database's local clock in microseconds,
    /// as `created_at` reads): a full sweep's rows committed after the binlog path's
    /// position was read.
    CreatedFrom(i64),
}

impl AheadOfBinlog {
    /// What a periodic claim up to `cutoff` may take ahead of the binlog path.
    fn of(cutoff: &Cutoff) -> Self {
        match cutoff {
            Cutoff::OlderThan(_) | Cutoff::Behind(_) => AheadOfBinlog::Every,
            Cutoff::Everything | Cutoff::Before(_) | Cutoff::UpTo(_) | Cutoff::Listed(_) | Cutoff::Nothing => {
                AheadOfBinlog::Nothing
            }
        }
    }

    /// Whether `event` is one of them. A row without `created_at` is not: unknown, it
    /// is left to be sent again rather than remembered for ever.
    fn covers(self, event: &OutboxEvent) -> bool {
        match self {
            AheadOfBinlog::Nothing => false,
            AheadOfBinlog::Every => true,
            AheadOfBinlog::CreatedFrom(from) => event.created_local_us.is_some_and(|created| created >= from),
        }
    }
}

/// What the sweep claims from, hands on to and reports to.
pub struct SweepLinks {
    pub claims: ClaimStore,
    pub handoff: Handoff,
    pub requests: mpsc::Receiver<FullSweep>,
    pub metrics: RelayMetrics,
    /// Where a sweep that cannot claim is reported.
    pub health: Health,
    /// Where rows that cannot be read as events are marked FAILED.
    pub status: StatusStore,
    /// Keys whose events wait behind an earlier one, brought in line with the table
    /// every period and after every manual action.
    pub held: HeldKeys,
    /// The SENT writer's queue: flushed before each binlog-mode sweep, so rows the
    /// broker has acknowledged are SENT in the table, not claimed and sent again.
    pub write_backs: WriteBacks,
    /// Rows whose SENT write-back did not land: the ones this relay claimed are put
    /// back to PENDING (within a second), so they are published again.
    pub unwritten: Unwritten,
}

/// The sweep task.
pub struct Sweeper {
    claims: ClaimStore,
    handoff: Handoff,
    settings: SweepSettings,
    requests: mpsc::Receiver<FullSweep>,
    metrics: RelayMetrics,
    health: Health,
    status: StatusStore,
    held: HeldKeys,
    /// Rows seen waiting, to be claimed once the binlog path has passed them.
    fence: Option<Fence>,
    /// Whether the last look at the held keys found some with rows free to go.
    draining: bool,
    /// Whether the last fence was full: a backlog the binlog path has passed, which
    /// the next periodic sweep claims within a second, not a period later.
    backlog: bool,
    write_backs: WriteBacks,
    unwritten: Unwritten,
}

/// Rows the sweep saw waiting at `at` (database clock): it claims them only after the
/// binlog path has acknowledged a commit made after `at`, so everything committed
/// before them has been handed on first and a row of a transaction that was open a
/// long time never overtakes its key's rows committed before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fence {
    pub at: f64,
    pub ids: Vec<u64>,
}

/// The newest manual action seen in the audit table, and whether reading it fails.
#[derive(Debug, Default)]
struct Seen {
    action: Option<u64>,
    unreadable: bool,
}

/// One period's work, decided from the binlog path's progress before the sweep waits
/// for the write-backs.
struct Plan {
    /// What this period claims.
    claim: Cutoff,
    /// Binlog mode: rows still waiting below this are fenced for a later period.
    fence_behind: Option<Cutoff>,
}

/// Why a round of claims stopped early.
enum Stop {
    Database(mysql_async::Error),
    PipelineClosed,
}

impl Sweeper {
    pub fn new(settings: SweepSettings, links: SweepLinks) -> Self {
        let SweepLinks { claims, handoff, requests, metrics, health, status, held, write_backs, unwritten } = links;
        Self {
            claims,
            handoff,
            settings,
            requests,
            metrics,
            health,
            status,
            held,
            fence: None,
            draining: false,
            backlog: false,
            write_backs,
            unwritten,
        }
    }

    /// Sweeps until `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) {
        tokio::select! {
            () = self.serve() => {}
            () = shutdown.cancelled() => {}
        }
    }

    async fn serve(&mut self) {
        tracing::info!(batch = self.settings.batch, "sweeping every {:?}", self.settings.interval);
        let mut next = tokio::time::Instant::now();
        let watermark = self.settings.binlog.as_ref().map(|guard| Arc::clone(&guard.watermark));
        let mut release_check = tokio::time::interval(RELEASE_CHECK);
        let mut last_action = Seen::default();
        loop {
            tokio::select! {
                Some(request) = self.requests.recv() => self.full_sweep(request).await,
                _ = release_check.tick() => {
                    self.put_back_unwritten().await;
                    if !self.after_manual_action(&mut last_action).await || !self.drain_released().await {
                        return;
                    }
                }
                () = tokio::time::sleep_until(next) => {
                    if !self.periodic().await {
                        return;
                    }
                    next = tokio::time::Instant::now() + self.period();
                }
                () = outage_began(watermark.as_deref()) => next = tokio::time::Instant::now(),
            }
        }
    }

    /// The time to the next periodic sweep: shorter while the binlog path is down, or
    /// while a backlog of rows it has passed waits (the fallback drains like one).
    fn period(&self) -> Duration {
        match &self.settings.binlog {
            Some(guard) if guard.watermark.is_down() || self.backlog => self.settings.interval.min(TAKEOVER_PERIOD),
            _ => self.settings.interval,
        }
    }

    /// One periodic sweep. `false` when the pipeline has stopped.
    ///
    /// What it may claim is read from the binlog path's progress before it waits for
    /// the write-backs: every row acknowledged up to that progress is then SENT in the
    /// table, not claimed as if it were still waiting.
    async fn periodic(&mut self) -> bool {
        let Plan { claim, fence_behind } = self.plan();
        if self.settings.binlog.is_some() && (claim != Cutoff::Nothing || fence_behind.is_some()) {
            self.settle_write_backs().await;
        }
        self.reclaim().await;
        if !self.release_held().await {
            return false;
        }
        let swept = match self.claim_all(&claim, AheadOfBinlog::of(&claim)).await {
            Ok(()) => self.note_fence(fence_behind.as_ref()).await.map_err(Stop::Database),
            Err(stop) => Err(stop),
        };
        match swept {
            Ok(()) => {
                self.health.clear(&Part::Sweep);
                true
            }
            Err(stop) => self.claim_failed(&stop),
        }
    }

    /// Waits until the rows acknowledged so far are marked SENT (or given up on), so
    /// none of them is claimed as if it were still waiting.
    async fn settle_write_backs(&self) {
        let started = std::time::Instant::now();
        let flushed = self.write_backs.flush(WRITE_BACK_WAIT).await;
        self.metrics.write_back_wait.observe(started.elapsed().as_secs_f64());
        if flushed == Flushed::TimedOut {
            tracing::warn!(
                "sweep: SENT write-backs are more than {WRITE_BACK_WAIT:?} behind (the primary is slow); the sweep goes on, and rows already on the broker but not yet marked SENT may be sent again"
            );
        }
    }

    /// Reports a failed round; `false` when the pipeline has stopped.
    fn claim_failed(&self, stop: &Stop) -> bool {
        let Stop::Database(error) = stop else { return false };
        tracing::warn!(%error, "sweep: cannot claim rows on the primary; the next sweep tries again");
        self.health.problem(Part::Sweep, format!("sweep: cannot claim rows on the primary: {error}"));
        true
    }

    /// What this period may claim, from the binlog path's progress alone: everything
    /// due in poll mode; while the binlog path is down past its takeover delay,
    /// everything older than the grace; otherwise the rows fenced in an earlier period
    /// that the binlog path has passed since. In binlog mode it also says below which
    /// creation time the rows still waiting are fenced for a later period.
    fn plan(&mut self) -> Plan {
        let Some(guard) = &self.settings.binlog else { return Plan { claim: Cutoff::Everything, fence_behind: None } };
        let behind = match guard.watermark.cutoff(guard.grace, guard.takeover_after) {
            behind @ Cutoff::Before(_) => behind,
            takeover_or_nothing => return Plan { claim: takeover_or_nothing, fence_behind: None },
        };
        match self.fence.take() {
            Some(fence) if guard.watermark.passed(fence.at) => {
                Plan { claim: Cutoff::Listed(fence.ids), fence_behind: Some(behind) }
            }
            Some(waiting) => {
                self.fence = Some(waiting);
                Plan { claim: Cutoff::Nothing, fence_behind: None }
            }
            None => Plan { claim: Cutoff::Nothing, fence_behind: Some(behind) },
        }
    }

    /// Fences the rows still waiting below `behind`, to be claimed once the binlog path
    /// has passed them.
    async fn note_fence(&mut self, behind: Option<&Cutoff>) -> Result<(), mysql_async::Error> {
        let Some(behind) = behind else { return Ok(()) };
        let (at, ids) = self.claims.visible(FENCE_ROWS, behind).await?;
        self.backlog = ids.len() == FENCE_ROWS;
        self.fence = (!ids.is_empty()).then_some(Fence { at, ids });
        Ok(())
    }

    /// Puts this relay's claimed rows whose SENT write-back did not land back to
    /// PENDING; when the primary does not answer, they are tried again next time.
    async fn put_back_unwritten(&self) {
        let ids = self.unwritten.take();
        if ids.is_empty() {
            return;
        }
        match self.claims.release_ids(&ids).await {
            Ok(rows) => tracing::info!(
                rows,
                of = ids.len(),
                "claimed rows whose SENT write-back did not land are PENDING again: the sweep publishes them again"
            ),
            Err(error) => {
                tracing::warn!(%error, rows = ids.len(), "cannot put back claimed rows whose SENT write-back did not land; trying again in a second");
                self.unwritten.add(ids);
            }
        }
    }

    /// While released keys still have rows to send (the last pass claimed some), the
    /// next pass follows within a second instead of at the period: a key's events that
    /// wait behind the released rows go out as soon as those are sent. `false` when
    /// the pipeline has stopped.
    async fn drain_released(&mut self) -> bool {
        if !self.draining {
            return true;
        }
        if self.settings.binlog.is_some() {
            self.settle_write_backs().await;
        }
        self.reclaim().await;
        self.release_held().await
    }

    /// While keys are held: after a manual action (an operator skipped or requeued
    /// what they wait for), releases them at once instead of at the next period.
    /// `false` when the pipeline has stopped.
    async fn after_manual_action(&mut self, seen: &mut Seen) -> bool {
        if self.held.is_empty() {
            return true;
        }
        let action = match self.claims.last_manual_action().await {
            Ok(action) => {
                if std::mem::take(&mut seen.unreadable) {
                    tracing::info!("sweep: the audit table can be read again: held keys are released within a second of a manual action");
                }
                action
            }
            Err(error) => {
                if !std::mem::replace(&mut seen.unreadable, true) {
                    tracing::warn!(%error, "sweep: cannot read the audit table for manual actions; held keys are released at the next period (grant SELECT on outbox_relay_audit to the primary user)");
                }
                return true;
            }
        };
        let seen = &mut seen.action;
        if std::mem::replace(seen, action) == action {
            return true;
        }
        if self.settings.binlog.is_some() {
            // A row of a held key sent just before the hold may await its write-back.
            self.settle_write_backs().await;
        }
        self.release_held().await
    }

    /// Brings the held keys in line with the table, then claims the rows they left
    /// behind that nothing holds back any more (the row they waited for was delivered,
    /// skipped or requeued, or the key was held by a new pipeline), without waiting
    /// for the binlog path's progress: the rows it may still meet (its source lags, or
    /// it replays after a restart) are remembered, and it skips them. Keys the table
    /// still holds (a FAILED row, a retry not due) cost no claim. `false` when the
    /// pipeline has stopped.
    async fn release_held(&mut self) -> bool {
        let draining = match self.sync_held().await {
            Ok(draining) => draining,
            Err(error) => {
                tracing::warn!(%error, "sweep: cannot read which keys wait behind earlier events; the next sweep tries again");
                return true;
            }
        };
        self.draining = !draining.is_empty();
        for keys in draining.chunks(RELEASE_KEYS) {
            if let Err(stop) = self.claim_all(&Cutoff::Behind(keys.to_vec()), AheadOfBinlog::Every).await {
                return self.claim_failed(&stop);
            }
        }
        true
    }

    /// Brings the held keys in line with the table: every key with a FAILED row (hold
    /// policy) or a booked retry is held; of the others, a key with nothing unsent
    /// left at or below what it waits for is released, and the rest are returned:
    /// their rows left behind are free to go. One statement for the table's holds and
    /// one per [`RELEASE_KEYS`] keys not held by it, however many keys are held.
    async fn sync_held(&self) -> Result<Vec<KeyUpTo>, mysql_async::Error> {
        let table = self.claims.held_keys(None).await?;
        let kept: HashSet<HeldKey> = table.iter().map(|k| (k.topic.clone(), k.biz_key.clone())).collect();
        self.held.hold_all(table);
        let free = self.held.others_than(&kept);
        let mut draining = Vec::new();
        for chunk in free.chunks(RELEASE_KEYS) {
            let keys: Vec<KeyUpTo> = chunk.iter().map(|(key, waiting)| key_up_to(key, waiting)).collect();
            let waiting = self.claims.keys_waiting(&keys).await?;
            for ((key, seen), up_to) in chunk.iter().zip(keys) {
                if waiting.contains(key) {
                    draining.push(up_to);
                } else {
                    self.held.release(key, *seen);
                }
            }
        }
        Ok(draining)
    }

    /// Sweeps every row committed so far, retrying the database until it is done.
    async fn full_sweep(&self, request: FullSweep) {
        tracing::warn!(reason = %request.owed.reason, "full sweep: every PENDING row committed so far is claimed and sent");
        fault::slow(Slow::FullSweep).await;
        let backoff = FULL_SWEEP_RETRY;
        let mut failures = 0u32;
        self.settle_write_backs().await;
        loop {
            let swept = match self.full_sweep_bounds(&request).await {
                Ok((newest, ahead)) => {
                    self.reclaim().await;
                    self.claim_all(&Cutoff::UpTo(newest), ahead).await
                }
                Err(error) => Err(Stop::Database(error)),
            };
            match swept {
                Ok(()) => break,
                Err(Stop::PipelineClosed) => return,
                Err(Stop::Database(error)) => {
                    failures += 1;
                    let delay = backoff.delay(failures);
                    tracing::error!(%error, retry_in = ?delay, "full sweep: the primary failed; the binlog path waits until the sweep completes");
                    tokio::time::sleep(delay).await;
                }
            }
        }
        tracing::info!("full sweep: every row it covers is handed on");
        let _ = request.done.send(());
    }

    /// A full sweep claims every row up to the table's newest id, read after the binlog
    /// path's position was (a request comes only then): every row committed before
    /// the position is visible then, whatever clock its writer's session read. The
    /// binlog path reads again those committed after its position was read, so those
    /// are remembered for it to skip: rows created since then, less the grace that
    /// covers transactions open for a while (their rows were created before their
    /// commit) and the source replica's last known lag (its position was that far
    /// behind the primary). A writer whose clock reads behind the primary's makes
    /// some of them duplicates, never loses or reorders one.
    async fn full_sweep_bounds(&self, request: &FullSweep) -> Result<(u64, AheadOfBinlog), mysql_async::Error> {
        let newest = self.claims.newest_id().await?;
        let Some(guard) = &self.settings.binlog else { return Ok((newest, AheadOfBinlog::Nothing)) };
        let read = match request.owed.position_read_local_us {
            Some(read) => Some(read),
            None => self
                .claims
                .local_now_us()
                .await?
                .map(|now| now.saturating_sub(local_micros(request.position_read.elapsed()))),
        };
        let Some(read) = read else { return Ok((newest, AheadOfBinlog::Nothing)) };
        // A lag not read yet is not taken as none: as the takeover delay, the longest
        // the sweep otherwise lets the binlog path trail.
        let lag =
            Duration::try_from_secs_f64(self.metrics.source_replica_lag_seconds.get()).unwrap_or(guard.takeover_after);
        Ok((newest, AheadOfBinlog::CreatedFrom(read.saturating_sub(local_micros(guard.grace.saturating_add(lag))))))
    }

    /// Claims and hands on batches until a claim comes back short; the rows the binlog
    /// path may still read (`ahead`) are remembered for it to skip.
    async fn claim_all(&self, cutoff: &Cutoff, ahead: AheadOfBinlog) -> Result<(), Stop> {
        if *cutoff == Cutoff::Nothing {
            return Ok(());
        }
        loop {
            let Claimed { events, retry_counts, malformed } =
                self.claims.claim(self.settings.batch, cutoff).await.map_err(Stop::Database)?;
            // The sweep works as soon as it can claim, however long the backlog takes.
            self.health.clear(&Part::Sweep);
            let claimed = events.len() + malformed.len();
            self.fail_malformed(&malformed).await.map_err(Stop::Database)?;
            if let Some(first) = events.first() {
                self.metrics.swept.inc_by(claimed as u64);
                if let Some(guard) = &self.settings.binlog {
                    let ids: Vec<u64> = events.iter().filter(|e| ahead.covers(e)).map(|e| e.id).collect();
                    if !ids.is_empty() {
                        guard.watermark.swept_ahead(ids);
                    }
                }
                tracing::debug!(claimed, first_id = first.id, "sweep claimed rows");
                let batch = SourceTx { events, origin: Origin::Sweep { retry_counts } };
                self.handoff.send(batch).await.map_err(|_| Stop::PipelineClosed)?;
            }
            if claimed < self.settings.batch {
                return Ok(());
            }
        }
    }

    /// Rows that cannot be read as events can never be sent: FAILED, each with why.
    async fn fail_malformed(&self, malformed: &[Malformed]) -> Result<(), mysql_async::Error> {
        for row in malformed {
            tracing::error!(id = row.id, reason = %row.reason, "a claimed row cannot be read as an event: marking it FAILED");
            self.status.mark_failed_by_id(&[row.id], &row.reason).await?;
            self.metrics.failed(FailReason::Malformed, 1);
        }
        Ok(())
    }

    async fn reclaim(&self) {
        match self.claims.reclaim_expired().await {
            Ok(0) => {}
            Ok(rows) => {
                self.metrics.reclaimed.inc_by(rows);
                tracing::warn!(
                    rows,
                    "sweep: SENDING rows with an expired lease went back to PENDING (their sweeper died or stalled)"
                );
            }
            Err(error) => tracing::warn!(%error, "sweep: cannot reclaim expired leases; the next sweep tries again"),
        }
    }
}

/// Returns when the binlog path goes down; never in poll mode (no watermark).
async fn outage_began(watermark: Option<&Watermark>) {
    match watermark {
        Some(watermark) => watermark.outage_began().await,
        None => std::future::pending().await,
    }
}

/// A held key as the store names it.
fn key_up_to((topic, biz_key): &HeldKey, waiting: &Waiting) -> KeyUpTo {
    KeyUpTo { topic: topic.clone(), biz_key: biz_key.clone(), up_to: waiting.up_to }
}
