//! What the sweep may take in binlog mode without racing the binlog path.
//!
//! A row the binlog path will still deliver should be left to it, or it is sent
//! twice. The binlog path's progress is the commit time, on the primary's clock, of
//! the newest acknowledged transaction (any transaction: the leader's lease renewals
//! keep them coming while the outbox is idle): every row created before it was
//! committed before it, so it has been seen. The sweep takes rows created more than
//! `sweep.grace` before that time; the grace covers the second-granularity of commit
//! times and transactions open for a while (rows acknowledged but still being written
//! back as SENT the sweep waits for itself, through the write-back queue).
//! While the binlog path is down longer than `sweep.takeover_after`, its progress
//! stops meaning anything and the sweep takes everything older than the grace; when
//! it is down for a cause only a person can fix, the sweep takes over at once. The
//! rows it claims then are remembered here: the binlog path, catching up, meets them
//! again and skips them instead of publishing them twice. The memory is the
//! pipeline's: a claim a stopping pipeline hands back goes to PENDING unsent, and a
//! later pipeline must not skip it (after a pause, a restart or a handover in between
//! such rows may be published twice, which consumers deduplicate).
//!
//! A replica that stops applying is not a binlog path that is down: its stream stays
//! open and idle, its progress stays at the last commit it applied (the primary's
//! commit time), and the sweep waits for it.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::remembered::RememberedIds;
use crate::store::Cutoff;

/// Most row ids swept during takeovers that are remembered for the binlog path to skip.
const TAKEN_OVER_MAX: usize = 1_000_000;

/// The binlog path's progress, shared by the reader, the coordinator and the sweep.
#[derive(Debug)]
pub struct Watermark {
    /// Commit time (Unix seconds, source clock) of the newest acknowledged position; 0 = none yet.
    acked: AtomicU32,
    /// Since when the binlog path is down, while it is down.
    down: Mutex<Option<Outage>>,
    /// Wakes the sweep when an outage begins, so its takeover does not wait for
    /// the next slow period.
    outage_began: Notify,
    /// Ids of rows the sweep claimed ahead of the binlog path that it has not met yet.
    taken_over: Mutex<RememberedIds>,
    /// Whether `taken_over` holds any id: the binlog path's every event asks.
    any_taken_over: AtomicBool,
}

/// An outage of the binlog path.
#[derive(Debug, Clone, Copy)]
struct Outage {
    since: Instant,
    /// It cannot heal by itself: the sweep takes over without waiting.
    broken: bool,
}

impl Watermark {
    /// Starts from the checkpoint's commit time, if it has one.
    pub fn new(acked: Option<u32>) -> Self {
        Self {
            acked: AtomicU32::new(acked.unwrap_or(0)),
            down: Mutex::new(None),
            outage_began: Notify::new(),
            taken_over: Mutex::new(RememberedIds::new(TAKEN_OVER_MAX)),
            any_taken_over: AtomicBool::new(false),
        }
    }

    /// The sweep claimed `ids` ahead of the binlog path: while it had taken over, rows
    /// a released key left behind (which the binlog path may meet again after a
    /// restart or while its source lags), or a full sweep's rows committed after the
    /// binlog path's start position was read. Beyond [`TAKEN_OVER_MAX`] ids the oldest
    /// are forgotten (those rows, if met after all, are published once more).
    pub fn swept_ahead(&self, ids: impl IntoIterator<Item = u64>) {
        let mut taken = self.taken_over();
        let forgotten = taken.extend(ids);
        if forgotten > 0 {
            tracing::warn!(forgotten, kept = TAKEN_OVER_MAX, "too many rows swept ahead of the binlog path to remember: the oldest are forgotten; the binlog path may publish those once more");
        }
        self.any_taken_over.store(!taken.is_empty(), Ordering::Release);
    }

    /// Whether the binlog path's event `id` was claimed by the sweep ahead of it (and so
    /// is already sent or being sent); it is forgotten once asked for.
    pub fn swept_already(&self, id: u64) -> bool {
        if !self.any_taken_over.load(Ordering::Acquire) {
            return false;
        }
        let mut taken = self.taken_over();
        let met = taken.take(id);
        self.any_taken_over.store(!taken.is_empty(), Ordering::Release);
        met
    }

    fn taken_over(&self) -> MutexGuard<'_, RememberedIds> {
        self.taken_over.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The binlog path resumes where it will not meet the rows swept during a takeover
    /// (a lost position, tailed again from the current one): forget them.
    pub fn forget_takeover(&self) {
        self.taken_over().clear();
        self.any_taken_over.store(false, Ordering::Release);
    }

    /// The pipeline acknowledged everything up to a commit at `commit_time`. Release:
    /// whoever sees the new value also sees the SENT write-backs queued before it.
    pub fn acknowledged(&self, commit_time: u32) {
        self.acked.fetch_max(commit_time, Ordering::Release);
    }

    /// The binlog connection is lost (the first call of an outage counts).
    pub fn source_down(&self) {
        self.outage().get_or_insert(Outage { since: Instant::now(), broken: false });
        self.outage_began.notify_one();
    }

    /// The binlog path stopped for a cause a reconnect cannot fix.
    pub fn source_broken(&self) {
        self.outage().get_or_insert(Outage { since: Instant::now(), broken: true }).broken = true;
        self.outage_began.notify_one();
    }

    /// Returns once the binlog path reports it is down (at once if it did meanwhile).
    pub async fn outage_began(&self) {
        self.outage_began.notified().await;
    }

    /// The binlog connection streams again.
    pub fn source_up(&self) {
        *self.outage() = None;
    }

    /// Whether the binlog path is down now.
    pub fn is_down(&self) -> bool {
        self.outage().is_some()
    }

    /// Whether the binlog path has acknowledged a commit made after `at` (Unix
    /// seconds on the database's clock): everything committed before `at` is behind
    /// it. Commit times are whole seconds, so the next second must have been seen.
    pub fn passed(&self, at: f64) -> bool {
        f64::from(self.acked.load(Ordering::Acquire)) > at.floor()
    }

    /// The sweep's cutoff now.
    pub fn cutoff(&self, grace: Duration, takeover_after: Duration) -> Cutoff {
        let acked = Some(self.acked.load(Ordering::Acquire)).filter(|&t| t > 0);
        let down_for = self.outage().map(|o| if o.broken { Duration::MAX } else { o.since.elapsed() });
        cutoff_for(acked, down_for, grace, takeover_after)
    }

    fn outage(&self) -> std::sync::MutexGuard<'_, Option<Outage>> {
        self.down.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The cutoff for a binlog path acknowledged up to `acked` and down for `down_for`.
pub fn cutoff_for(acked: Option<u32>, down_for: Option<Duration>, grace: Duration, takeover_after: Duration) -> Cutoff {
    if down_for.is_some_and(|down| down >= takeover_after) {
        return Cutoff::OlderThan(grace);
    }
    match acked {
        Some(commit_time) => Cutoff::Before(f64::from(commit_time) - grace.as_secs_f64()),
        // Nothing acknowledged yet: the start-up full sweep covers what came before.
        None => Cutoff::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(60);
    const TAKEOVER: Duration = Duration::from_secs(120);

    #[test]
    fn rows_older_than_the_acknowledged_commit_minus_grace() {
        assert_eq!(cutoff_for(Some(1_000), None, GRACE, TAKEOVER), Cutoff::Before(940.0));
        assert_eq!(cutoff_for(Some(1_000), Some(Duration::from_secs(119)), GRACE, TAKEOVER), Cutoff::Before(940.0));
    }

    #[test]
    fn a_binlog_path_down_past_takeover_hands_everything_older_than_grace_to_the_sweep() {
        assert_eq!(cutoff_for(Some(1_000), Some(TAKEOVER), GRACE, TAKEOVER), Cutoff::OlderThan(GRACE));
        assert_eq!(cutoff_for(None, Some(Duration::from_secs(600)), GRACE, TAKEOVER), Cutoff::OlderThan(GRACE));
    }

    #[test]
    fn nothing_before_the_first_acknowledgement() {
        assert_eq!(cutoff_for(None, None, GRACE, TAKEOVER), Cutoff::Nothing);
        assert_eq!(Watermark::new(None).cutoff(GRACE, TAKEOVER), Cutoff::Nothing);
    }

    #[test]
    fn the_watermark_only_moves_forward_and_clears_the_outage() {
        let w = Watermark::new(Some(500));
        w.acknowledged(1_000);
        w.acknowledged(900);
        assert_eq!(w.cutoff(GRACE, TAKEOVER), Cutoff::Before(940.0));
        w.source_down();
        assert_eq!(w.cutoff(GRACE, Duration::ZERO), Cutoff::OlderThan(GRACE), "down, takeover at once");
        w.source_up();
        assert_eq!(w.cutoff(GRACE, Duration::ZERO), Cutoff::Before(940.0));
    }

    #[test]
    fn a_fence_is_passed_once_a_later_second_was_acknowledged() {
        let w = Watermark::new(Some(1_000));
        assert!(!w.passed(1_000.4), "the same second may still hold commits before the fence");
        w.acknowledged(1_001);
        assert!(w.passed(1_000.4));
        assert!(!w.passed(1_001.0));
    }

    #[test]
    fn rows_swept_in_a_takeover_are_skipped_once_by_the_binlog_path() {
        let w = Watermark::new(Some(1_000));
        assert!(!w.swept_already(7), "nothing taken over");
        w.swept_ahead([7, 8]);
        assert!(w.swept_already(7));
        assert!(!w.swept_already(7), "met once, then forgotten");
        assert!(!w.swept_already(9));
        w.forget_takeover();
        assert!(!w.swept_already(8), "forgotten after a lost position");
    }

    #[test]
    fn a_broken_binlog_path_hands_over_at_once() {
        let w = Watermark::new(Some(1_000));
        w.source_down();
        assert_eq!(w.cutoff(GRACE, TAKEOVER), Cutoff::Before(940.0), "a transient outage waits for takeover_after");
        w.source_broken();
        assert!(w.is_down());
        assert_eq!(w.cutoff(GRACE, TAKEOVER), Cutoff::OlderThan(GRACE));
        w.source_up();
        assert!(!w.is_down());
    }
}
