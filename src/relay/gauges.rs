//! The leader's two pollers for what only the databases know: the outbox table's
//! backlog and row counts (on the primary), and how the source stands (its own
//! replication lag, the binlog after the reader, how long it keeps binlog files).
//!
//! A poll that fails leaves its gauges NaN (unknown) rather than a stale number, and
//! says why in the log once, not every poll; the relay itself goes on either way.

use std::time::Duration;

use mysql_async::Pool;
use tokio_util::sync::CancellationToken;

use crate::health::{Health, Part};
use crate::metrics::RelayMetrics;
use crate::source::binlog::{bytes_after, expire_seconds, replication, Replication};
use crate::store::StatusStore;
use crate::time::unix_millis_now;

/// How often the backlog is measured for `outbox_oldest_pending_seconds`.
const OUTBOX_POLL: Duration = Duration::from_secs(5);
/// Every this many backlog polls, SENT rows are counted too (they are the table's
/// bulk: the retention window).
const SENT_COUNT_EVERY: u32 = 12;
/// How often the source is asked.
const SOURCE_POLL: Duration = Duration::from_secs(2);

/// Keeps the outbox gauges current until `stop`.
pub async fn watch_outbox(status: StatusStore, metrics: RelayMetrics, stop: CancellationToken) {
    let mut tick = tokio::time::interval(OUTBOX_POLL);
    let mut failing = Failing::default();
    let mut clock_failing = Failing::default();
    for poll in 0u32.. {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        probe_clock(&status, &metrics, &mut clock_failing).await;
        let measured = async {
            let backlog = status.backlog().await?;
            let counts = status.row_counts(poll % SENT_COUNT_EVERY == 0).await?;
            Ok::<_, mysql_async::Error>((backlog, counts))
        };
        match measured.await {
            Ok((backlog, counts)) => {
                failing.over("the outbox backlog");
                metrics.oldest_pending_seconds.set(backlog.oldest_waiting_secs);
                metrics.outbox_rows(&counts);
            }
            Err(error) => {
                failing.once(
                    "the outbox backlog on the primary (fix: the primary must answer; /readyz names the problem)",
                    &error,
                );
                metrics.oldest_pending_seconds.set(f64::NAN);
                metrics.forget_outbox_rows();
            }
        }
    }
}

/// Reads how far the primary's clock is ahead of this host's, which turns `created_at`
/// into `relay_commit_to_ack_seconds`; a failed probe keeps the offset known before.
async fn probe_clock(status: &StatusStore, metrics: &RelayMetrics, failing: &mut Failing) {
    const WHAT: &str = "the primary's clock offset (relay_commit_to_ack_seconds observes nothing until it is first known, then keeps the last one)";
    match status.db_ahead_us().await {
        Ok(ahead) => {
            failing.over(WHAT);
            if let Some(ahead) = ahead {
                metrics.lag.db_ahead(ahead);
            }
        }
        Err(error) => failing.once(WHAT, &error),
    }
}

/// Keeps the source gauges current until `stop`; readiness says so while the source's
/// own replication is more than `lag_limit` behind (events committed since wait for it,
/// and so does the sweep).
pub async fn watch_source(
    source: Pool,
    metrics: RelayMetrics,
    health: Health,
    lag_limit: Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(SOURCE_POLL);
    let mut replica = ReplicaClock::default();
    let mut failing = Failing::default();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        match poll_source(&source, &metrics).await {
            Ok(stands) => {
                failing.over("the source's replication and binlog");
                let lag = replica.lag(stands, unix_millis_now());
                metrics.source_replica_lag_seconds.set(lag);
                report_lag(&health, stands, lag, lag_limit);
            }
            Err(error) => {
                failing.once("the source's replication and binlog (grant REPLICATION CLIENT and, on MariaDB 10.5+, SLAVE MONITOR to the source user for these metrics)", &error);
                metrics.source_replica_lag_seconds.set(f64::NAN);
                metrics.binlog_behind_bytes.set(f64::NAN);
                // Unknown now: an old lag is not kept as the reason the relay is not ready.
                health.clear(&Part::ReplicaLag);
            }
        }
    }
}

/// A replica further behind than `limit` is a readiness problem, named with its cause.
fn report_lag(health: &Health, stands: Replication, lag: f64, limit: Duration) {
    if lag <= limit.as_secs_f64() {
        health.clear(&Part::ReplicaLag);
        return;
    }
    let how = match stands {
        Replication::Stopped => "its replication is stopped",
        Replication::Behind(_) | Replication::NotAReplica => "it is applying slowly",
    };
    health.problem(
        Part::ReplicaLag,
        format!("binlog source: the replica the relay reads is {lag:.0} s behind its primary ({how}): events committed since wait for it to apply them, and the sweep waits too rather than publish them twice (relay_source_replica_lag_seconds)"),
    );
}

/// One poll of the source; sets the binlog gauges, returns its replication.
async fn poll_source(source: &Pool, metrics: &RelayMetrics) -> Result<Replication, mysql_async::Error> {
    let mut conn = source.get_conn().await?;
    metrics.lag.expire_after(expire_seconds(&mut conn).await?);
    let behind = match metrics.lag.read_position() {
        Some((file, pos)) => bytes_after(&mut conn, &file, pos).await?,
        None => None,
    };
    metrics.binlog_behind_bytes.set(behind.map_or(f64::NAN, |bytes| bytes as f64));
    replication(&mut conn).await
}

/// How far the source's replication is behind, also while it is stopped: from the
/// last lag it reported, growing with the time since.
#[derive(Debug, Default)]
struct ReplicaClock {
    /// The primary time (unix ms) the replica was last known to be current to.
    current_to_ms: Option<u64>,
}

impl ReplicaClock {
    fn lag(&mut self, replication: Replication, now_ms: u64) -> f64 {
        match replication {
            Replication::NotAReplica => {
                self.current_to_ms = None;
                0.0
            }
            Replication::Behind(secs) => {
                self.current_to_ms = Some(now_ms.saturating_sub((secs * 1000.0) as u64));
                secs
            }
            Replication::Stopped => {
                let current_to = *self.current_to_ms.get_or_insert(now_ms);
                now_ms.saturating_sub(current_to) as f64 / 1000.0
            }
        }
    }
}

/// Whether a poll is failing, so its cause is logged when it starts and when it ends.
#[derive(Debug, Default)]
struct Failing(bool);

impl Failing {
    fn once(&mut self, what: &str, error: &mysql_async::Error) {
        if !std::mem::replace(&mut self.0, true) {
            tracing::warn!(%error, "cannot measure {what}: its metrics are NaN until it works again");
        }
    }

    fn over(&mut self, what: &str) {
        if std::mem::replace(&mut self.0, false) {
            tracing::info!("measuring {what} works again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_replica_falls_behind_from_its_last_known_lag() {
        let mut clock = ReplicaClock::default();
        assert_eq!(clock.lag(Replication::Behind(2.0), 10_000), 2.0);
        assert_eq!(clock.lag(Replication::Stopped, 15_000), 7.0, "2 s behind, then stopped for 5 s");
        assert_eq!(clock.lag(Replication::Behind(0.0), 16_000), 0.0, "caught up");
        assert_eq!(clock.lag(Replication::NotAReplica, 17_000), 0.0);
        assert_eq!(clock.lag(Replication::Stopped, 20_000), 0.0, "stopped since first seen");
        assert_eq!(clock.lag(Replication::Stopped, 21_500), 1.5);
    }
}
