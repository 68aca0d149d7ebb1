//! The leader's lease renewal: three times per term, for as long as the term's
//! pipeline runs (its drain and final checkpoint included).

use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::{Term, TermTiming};
use crate::health::{Health, Part};
use crate::store::LeaseStore;

/// What the keeper needs.
pub(crate) struct Keeper {
    pub term: Term,
    pub lease: LeaseStore,
    pub timing: TermTiming,
    /// Cancelled to stop the term's pipeline when the lease is lost.
    pub pipeline: CancellationToken,
    pub health: Health,
}

/// Renews until `done`; when the lease is lost (not renewed before the term's local
/// deadline, or taken over) it ends the term and stops the pipeline.
pub(crate) async fn keep(keeper: Keeper, done: CancellationToken) {
    let Keeper { term, lease, timing, pipeline, health } = keeper;
    let mut tick = tokio::time::interval(timing.renew_every());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let lost = loop {
        tokio::select! {
            () = done.cancelled() => return,
            () = tokio::time::sleep(term.remaining()) => break "it was not renewed in time".to_owned(),
            _ = tick.tick() => {
                let asked = Instant::now();
                match tokio::time::timeout(term.remaining(), lease.renew(term.number(), timing.lease)).await {
                    Ok(Ok(true)) => {
                        term.renewed(asked);
                        health.clear(&Part::Lease);
                    }
                    Ok(Ok(false)) => break "another instance took it over, or it had run out".to_owned(),
                    Ok(Err(error)) => {
                        tracing::warn!(%error, term = term.number(), remaining = ?term.remaining(), "cannot renew the leader lease; retrying");
                        health.problem(Part::Lease, format!("leader lease: cannot renew it on the primary ({error}); publishing stops when it runs out"));
                    }
                    Err(_) => break "the renewal did not answer before it ran out".to_owned(),
                }
            }
        }
    };
    tracing::error!(term = term.number(), reason = %lost, "lost the leader lease: publishing and checkpointing stopped at once; becoming a standby");
    term.end();
    pipeline.cancel();
}
