//! A standby: tries to take the lease a few times a second until it gets it or the
//! relay stops. Cheap for the primary: a try that finds the lease held changes no row.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::Term;
use crate::health::{Health, Part};
use crate::store::LeaseStore;

pub(crate) use crate::health::Role;

/// How often a standby tries to take the lease: a released lease is taken within this.
const TRY_EVERY: Duration = Duration::from_millis(250);

/// Waits until this instance (`holder`) holds the lease; `None` when `shutdown` came first.
pub(crate) async fn wait_for_lease(
    lease: &LeaseStore,
    holder: &str,
    length: Duration,
    health: &Health,
    shutdown: &CancellationToken,
) -> Option<Term> {
    let mut announced = false;
    loop {
        health.beat();
        let asked = Instant::now();
        match lease.acquire(holder, length).await {
            Ok(Some(term)) => {
                health.clear(&Part::Lease);
                return Some(Term::new(term, length, asked));
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
        tokio::select! {
            () = tokio::time::sleep(TRY_EVERY) => {}
            () = shutdown.cancelled() => return None,
        }
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
