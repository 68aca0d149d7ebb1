//! What keeps the outbox table's size bounded, on the leader's schedule. The table's
//! layout, read again at every tick (so a table converted while the relay runs is
//! picked up), decides how:
//! - unpartitioned: SENT rows past the retention are deleted in paced batches (`rows`)
//!   every `cleanup.interval_ms`, when that is set;
//! - partitioned by the relay: partitions are added ahead, and whole partitions past
//!   the retention are dropped (`partitions`): a file deletion instead of a binlog
//!   event, an index change and a purge per row.

mod partitions;
mod rows;

use std::time::{Duration, Instant};

use mysql_async::Pool;
use outbox_kit::OutboxTable;
use tokio_util::sync::CancellationToken;

use super::manual::{Manual, Operator};
use crate::config::{CleanupConfig, PartitionPeriod};
use crate::metrics::UpkeepMetrics;
use crate::store::partitions::{read, Partitioning};
use crate::store::TermFence;

/// The longest wait between two looks at the table's layout.
const MOST_EVERY: Duration = Duration::from_secs(60);

/// The leader's retention job for one term.
pub struct Retention {
    pub primary: Pool,
    pub outbox: OutboxTable,
    pub fence: TermFence,
    /// Who the audit names: the relay instance.
    pub instance: String,
    pub cleanup: CleanupConfig,
    /// The period the configuration expects (`outbox.partition`).
    pub expected: Option<PartitionPeriod>,
    pub metrics: UpkeepMetrics,
}

impl Retention {
    /// Looks at the table and does what its layout calls for, until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        let by = |reason: &str| Operator { name: self.instance.clone(), reason: reason.to_owned() };
        let mut upkeep = partitions::Upkeep::new(by("partition retention (cleanup.retention_secs)"));
        let manual = Manual::fenced(self.primary.clone(), self.outbox.clone(), self.fence.clone());
        let cleaner = by("scheduled cleanup (cleanup.interval_ms)");
        let mut last_cleanup = Instant::now();
        let mut warned = false;
        loop {
            let every = match self.read_layout().await {
                Ok(Partitioning::Periods(layout)) => {
                    upkeep.tick(&self, &layout).await;
                    partitions::Upkeep::every(&self, layout.period)
                }
                Ok(other) => {
                    self.metrics.forget();
                    warned = warned || self.warn_unpartitioned(&other);
                    if self.cleanup_due(last_cleanup) {
                        tokio::select! {
                            () = rows::delete_expired(&manual, &self.cleanup, &cleaner) => {}
                            () = stop.cancelled() => return,
                        }
                        last_cleanup = Instant::now();
                    }
                    self.cleanup_every()
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot read the outbox table's partitions; trying again");
                    self.cleanup_every()
                }
            };
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = stop.cancelled() => return,
            }
        }
    }

    async fn read_layout(&self) -> Result<Partitioning, mysql_async::Error> {
        read(&mut self.primary.get_conn().await?, &self.outbox).await
    }

    /// Says once that the table is not what `outbox.partition` expects; whether it did.
    fn warn_unpartitioned(&self, layout: &Partitioning) -> bool {
        let Some(period) = self.expected else { return false };
        tracing::warn!(%period, layout = ?layout, "outbox.partition = {period} but the table is not partitioned by the relay; fix: `outbox-relay migrate --partition {period} --convert` (docs/operations.md), or unset outbox.partition");
        true
    }

    fn cleanup_due(&self, last: Instant) -> bool {
        self.cleanup.interval_ms > 0 && last.elapsed() >= Duration::from_millis(self.cleanup.interval_ms)
    }

    /// How soon to look again: at the next cleanup, and within a minute.
    fn cleanup_every(&self) -> Duration {
        match self.cleanup.interval_ms {
            0 => MOST_EVERY,
            ms => Duration::from_millis(ms).min(MOST_EVERY),
        }
    }
}
