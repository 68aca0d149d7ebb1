//! A standby: watches the lease a few times a second until it takes it or the relay
//! stops, and keeps its connection to the source warm meanwhile. It takes a lease its
//! leader released at once, and any other only after seeing the same record unchanged
//! for a whole lease on its own monotonic clock: no clock's reading, the primary's
//! included, can make it take over while a leader may still publish. Cheap for the
//! primary: a try reads the lease row without locking it, and changes nothing while
//! another instance holds it.

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Pool;
use tokio_util::sync::CancellationToken;

use super::{Term, TermTiming};
use crate::health::{Health, Part};
use crate::store::{LeaseRecord, LeaseStore, HANDOVER_GRACE};

/// How often a standby tries to take the lease: a released lease is taken within this.
const TRY_EVERY: Duration = Duration::from_millis(250);

/// How often a standby checks that the source still answers (every 20th try, 5 s).
const SOURCE_CHECK_EVERY: u32 = 20;

/// What a standby waits with.
pub(crate) struct Standby<'a> {
    pub lease: &'a LeaseStore,
    /// The name this instance holds the lease under.
    pub holder: &'a str,
    pub timing: TermTiming,
    /// The binlog source (binlog mode), checked while waiting so a standby that could
    /// not take over says so before it has to.
    pub source: Option<&'a Pool>,
    pub health: &'a Health,
    /// Not before this instant (this instance handed the lease over and leaves it to
    /// the others a while).
    pub not_before: Option<Instant>,
}

/// The lease record a standby watches, and since when (its own clock) unchanged.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    seen: Option<(LeaseRecord, Instant)>,
    not_before: Option<Instant>,
    /// The name this instance holds the lease under.
    me: String,
}

impl Watch {
    /// A watch for the instance named `me` that takes nothing before `not_before`.
    pub(crate) fn new(me: &str, not_before: Option<Instant>) -> Self {
        Self { seen: None, not_before, me: me.to_owned() }
    }

    /// Whether `record`, read at `at`, may be taken: released by its leader, or the
    /// same record seen for at least `lease`. A changed record starts the watch anew.
    pub(crate) fn may_take(&mut self, record: &LeaseRecord, at: Instant, lease: Duration) -> bool {
        let unchanged_for = match &self.seen {
            Some((seen, since)) if seen == record => at.saturating_duration_since(*since),
            _ => {
                self.seen = Some((record.clone(), at));
                Duration::ZERO
            }
        };
        // A lease an operator ordered handed over from this instance goes to the others
        // first, even when this instance lost it before it saw the order (and so did
        // not release it, nor start its own grace): it takes it back only after the
        // grace beyond a whole lease, released or not.
        let free = if record.handed_over && record.holder == self.me {
            unchanged_for >= lease + HANDOVER_GRACE
        } else {
            record.released || unchanged_for >= lease
        };
        free && self.not_before.is_none_or(|not_before| at >= not_before)
    }
}

/// Waits until this instance holds the lease; `None` when `shutdown` came first.
pub(crate) async fn wait_for_lease(standby: Standby<'_>, shutdown: &CancellationToken) -> Option<Term> {
    let Standby { lease, holder, timing, source, health, not_before } = standby;
    let mut announced = false;
    let mut attempt = 0u32;
    let mut watch = Watch::new(holder, not_before);
    loop {
        attempt = attempt.wrapping_add(1);
        health.beat();
        let asked = Instant::now();
        match try_take(lease, holder, timing.lease, &mut watch).await {
            Ok(Some(term)) => {
                health.clear(&Part::Lease);
                return Some(Term::new(term, timing.holds_for(), asked));
            }
            Ok(None) => {
                health.clear(&Part::Lease);
                if !announced {
                    announced = true;
                    announce_standby(lease).await;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot try the leader lease on the primary; retrying");
                health.problem(Part::Lease, format!("leader lease: the primary does not answer ({error})"));
            }
        }
        if let Some(source) = source.filter(|_| attempt % SOURCE_CHECK_EVERY == 1) {
            check_source(source, health).await;
        }
        tokio::select! {
            () = tokio::time::sleep(TRY_EVERY) => {}
            () = shutdown.cancelled() => return None,
        }
    }
}

/// Reads the lease row and takes it if it may (see [`Watch::may_take`]); the new term.
/// The record counts as seen when its read has returned, never earlier: a slow read
/// may return a renewal written after it was asked for.
async fn try_take(
    lease: &LeaseStore,
    holder: &str,
    duration: Duration,
    watch: &mut Watch,
) -> Result<Option<u64>, mysql_async::Error> {
    let record = lease.observe().await?;
    if !watch.may_take(&record, Instant::now(), duration) {
        return Ok(None);
    }
    lease.take(holder, duration, &record).await
}

/// Reports a source that does not answer (and clears the report when it does).
async fn check_source(source: &Pool, health: &Health) {
    let answered = tokio::time::timeout(TRY_EVERY * 4, async { source.get_conn().await?.ping().await }).await;
    match answered {
        Ok(Ok(())) => health.clear(&Part::BinlogSource),
        Ok(Err(error)) => health.problem(
            Part::BinlogSource,
            format!("binlog source: a standby cannot reach it ({error}); it could not take over"),
        ),
        Err(_) => health.problem(
            Part::BinlogSource,
            "binlog source: a standby's check did not answer within 1 s; it could not take over",
        ),
    }
}

/// Logs who leads while this instance waits.
async fn announce_standby(lease: &LeaseStore) {
    match lease.holder().await {
        Ok(Some(now)) => {
            tracing::info!(leader = %now.holder, term = now.term, lease_remaining_ms = now.remaining_ms, "standby: another instance holds the leader lease; waiting")
        }
        _ => tracing::info!("standby: waiting for the leader lease"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(term: u64, stamp: &str, released: bool) -> LeaseRecord {
        LeaseRecord::new("relay-a".into(), term, stamp.into(), released)
    }

    const LEASE: Duration = Duration::from_secs(10);

    #[test]
    fn a_held_lease_is_taken_only_after_the_same_record_was_seen_for_a_whole_lease() {
        let t0 = Instant::now();
        let mut watch = Watch::default();
        let held = record(7, "2026-12-07 10:00:10.000", false);
        assert!(!watch.may_take(&held, t0, LEASE), "first seen: the watch starts");
        assert!(!watch.may_take(&held, t0 + LEASE - Duration::from_millis(1), LEASE));
        assert!(watch.may_take(&held, t0 + LEASE, LEASE), "unchanged for a whole lease");
    }

    #[test]
    fn a_renewal_or_a_new_term_starts_the_watch_anew_whatever_the_stamp_says() {
        let t0 = Instant::now();
        let mut watch = Watch::default();
        assert!(!watch.may_take(&record(7, "2026-12-07 10:00:10.000", false), t0, LEASE));
        // The primary's clock stepped back an hour: the stamp reads as long expired.
        let renewed = record(7, "2026-12-07 09:00:12.000", false);
        assert!(!watch.may_take(&renewed, t0 + LEASE, LEASE), "a new record is watched from scratch");
        let bumped = record(8, "2026-12-07 09:00:12.000", false);
        assert!(!watch.may_take(&bumped, t0 + LEASE * 2 - Duration::from_millis(1), LEASE), "an operator's term end");
        assert!(watch.may_take(&bumped, t0 + LEASE * 3, LEASE));
    }

    #[test]
    fn a_released_lease_is_taken_at_once_but_not_by_the_instance_that_handed_it_over_before_its_grace() {
        let t0 = Instant::now();
        let released = record(7, "1970-01-02 00:00:00.000", true);
        assert!(Watch::default().may_take(&released, t0, LEASE));
        let mut handed_over = Watch::new("relay-a", Some(t0 + HANDOVER_GRACE));
        assert!(!handed_over.may_take(&released, t0, LEASE));
        assert!(handed_over.may_take(&released, t0 + HANDOVER_GRACE, LEASE));
    }

    #[test]
    fn a_lease_ordered_handed_over_goes_to_the_others_first_even_if_its_holder_lost_it_unreleased() {
        let t0 = Instant::now();
        let ordered = record(7, "2026-12-07 10:00:10.000", false).handed_over();
        let mut other = Watch::new("relay-b", None);
        assert!(!other.may_take(&ordered, t0, LEASE));
        assert!(other.may_take(&ordered, t0 + LEASE, LEASE), "another instance: after a whole lease");
        let mut former = Watch::new("relay-a", None);
        assert!(!former.may_take(&ordered, t0, LEASE));
        assert!(!former.may_take(&ordered, t0 + LEASE, LEASE), "its own holder waits longer");
        assert!(former.may_take(&ordered, t0 + LEASE + HANDOVER_GRACE, LEASE), "but takes it back if no one does");
        let released = record(7, "1970-01-02 00:00:00.000", true).handed_over();
        assert!(!Watch::new("relay-a", None).may_take(&released, t0, LEASE), "released after a restart, too");
    }
}
