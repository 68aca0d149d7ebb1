//! A standby: tries to take the lease a few times a second until it gets it or the
//! relay stops, and keeps its connection to the source warm meanwhile. Cheap for the
//! primary: a try first reads the lease row without locking it, and changes nothing
//! while another instance holds it.

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Pool;
use tokio_util::sync::CancellationToken;

use super::{Term, TermTiming};
use crate::health::{Health, Part};
use crate::store::LeaseStore;

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
}

/// Waits until this instance holds the lease; `None` when `shutdown` came first.
pub(crate) async fn wait_for_lease(standby: Standby<'_>, shutdown: &CancellationToken) -> Option<Term> {
    let Standby { lease, holder, timing, source, health } = standby;
    let mut announced = false;
    let mut attempt = 0u32;
    loop {
        attempt = attempt.wrapping_add(1);
        health.beat();
        let asked = Instant::now();
        match lease.acquire(holder, timing.lease).await {
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
