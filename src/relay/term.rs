//! One leader term. The lease keeper and the reader of operators' orders run for all
//! of it; the pipeline runs while the fleet is not paused. A pause stops the pipeline
//! the way a shutdown does (in-flight sends end, the position is saved) but keeps the
//! lease, so no standby publishes either; a resume starts it again in the same term.
//! A handover order stops it and ends the term with the lease given to a standby.

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::pipeline::{self, TermRun};
use super::{ok, release_claims, Warm};
use crate::config::Config;
use crate::error::RelayError;
use crate::fault::{self, Slow};
use crate::health::{Health, Part};
use crate::leader::{keep, read_orders, Keeper, OrdersSeen, Term, TermTiming};
use crate::metrics::RelayMetrics;
use crate::store::Orders;
use crate::supervise::Supervisor;

/// What one term leads with.
pub(super) struct Leading<'a> {
    pub config: &'a Config,
    pub warm: &'a Warm,
    pub term: &'a Term,
    pub timing: TermTiming,
    pub metrics: &'a RelayMetrics,
    pub health: &'a Health,
    pub shutdown: &'a CancellationToken,
}

/// How a term ended, as far as the leader itself decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TermEnd {
    /// Stopped, the lease lost, or a task failed (the result says which).
    Over,
    /// An operator ordered a handover: everything drained; the lease goes to a standby.
    HandedOver,
}

/// What the orders say to do next.
enum Next {
    Publish,
    HandOver,
    Stop,
}

/// Leads one term until shutdown, a failure, the loss of the lease or a handover. The
/// keeper and the orders' reader run until the pipeline has stopped (drain and final
/// checkpoint included), under a supervisor of their own: a panic stops the term too.
pub(super) async fn lead(leading: &Leading<'_>) -> Result<TermEnd, RelayError> {
    let Leading { warm, term, health, .. } = leading;
    let stop = leading.shutdown.child_token();
    let done = CancellationToken::new();
    let keeping = Supervisor::new(stop.clone(), (*health).clone());
    let keeper = Keeper {
        term: (*term).clone(),
        lease: warm.lease.clone(),
        timing: leading.timing,
        pipeline: stop.clone(),
        health: (*health).clone(),
    };
    keeping.spawn("lease keeper", ok(keep(keeper, done.clone())));
    let (seen_tx, mut seen) = watch::channel(None);
    keeping.spawn("operators' orders", ok(read_orders(warm.lease.clone(), (*term).clone(), seen_tx, done.clone())));
    fault::slow(Slow::TermStart).await;
    let led = publish_between_pauses(leading, &stop, &mut seen).await;
    stop.cancel();
    done.cancel();
    let kept = keeping.join().await;
    leading.metrics.paused.set(0);
    health.clear(&Part::Paused);
    led.and_then(|end| kept.map(|()| end))
}

/// Runs the pipeline whenever the orders allow, until they or `stop` end the term.
async fn publish_between_pauses(
    leading: &Leading<'_>,
    stop: &CancellationToken,
    seen: &mut OrdersSeen,
) -> Result<TermEnd, RelayError> {
    loop {
        match next(leading, stop, seen).await {
            Next::Publish => run_pipeline(leading, stop, seen).await?,
            Next::HandOver => return Ok(TermEnd::HandedOver),
            Next::Stop => return Ok(TermEnd::Over),
        }
    }
}

/// Waits for the first orders, and while paused (said in `/readyz`, the metric and one
/// log line each way).
async fn next(leading: &Leading<'_>, stop: &CancellationToken, seen: &mut OrdersSeen) -> Next {
    let mut said_paused = false;
    loop {
        if stop.is_cancelled() {
            return Next::Stop;
        }
        let orders = seen.borrow_and_update().clone();
        match orders {
            Some(Orders { handover: true, .. }) => return Next::HandOver,
            Some(Orders { paused: Some(paused), .. }) => {
                if !said_paused {
                    said_paused = true;
                    tracing::warn!(by = %paused.by, since = %paused.since, "paused by an operator: publishing nothing, the position kept, the lease held; `outbox-relay resume` resumes");
                    leading.metrics.paused.set(1);
                    leading.health.problem(
                        Part::Paused,
                        format!("paused by {} since {} UTC (`outbox-relay resume` resumes)", paused.by, paused.since),
                    );
                }
            }
            Some(Orders { paused: None, .. }) => {
                if said_paused {
                    tracing::info!("resumed by an operator: publishing again");
                }
                leading.metrics.paused.set(0);
                leading.health.clear(&Part::Paused);
                return Next::Publish;
            }
            None => {}
        }
        // A paused leader is waiting, not wedged: liveness keeps beating.
        let woke = leading.health.alive_while(async {
            tokio::select! {
                changed = seen.changed() => changed.is_ok(),
                () = stop.cancelled() => false,
            }
        });
        if !woke.await {
            return Next::Stop;
        }
    }
}

/// Runs the term's pipeline until `stop`, a failure, or an order to pause or hand over.
async fn run_pipeline(
    leading: &Leading<'_>,
    stop: &CancellationToken,
    seen: &mut OrdersSeen,
) -> Result<(), RelayError> {
    let Leading { config, warm, term, metrics, health, .. } = leading;
    let run = stop.child_token();
    let claims = warm.claims.under(warm.lease.fence(term.number()));
    let supervisor = Supervisor::new(run.clone(), (*health).clone());
    let term_run =
        TermRun { config, warm, claims: &claims, term, supervisor: &supervisor, metrics: (*metrics).clone(), health };
    // A start that waits on a dead primary or broker gives way to a stop, a lost lease
    // or an operator's order.
    let started = tokio::select! {
        started = pipeline::start(term_run) => started,
        () = run.cancelled() => Ok(()),
        () = halt_ordered(seen) => Ok(()),
    };
    if started.is_ok() {
        tokio::select! {
            () = run.cancelled() => {}
            () = halt_ordered(seen) => tracing::info!("ordered to stop publishing: draining in-flight sends, then saving the position"),
        }
    }
    if leading.shutdown.is_cancelled() && !health.has_problem(&Part::Stopping) {
        health.problem(Part::Stopping, "stopping: draining in-flight sends, then checkpointing");
    }
    run.cancel();
    let joined = supervisor.join().await;
    release_claims(&claims).await;
    health.forget_pipeline(warm.binlog.is_some());
    metrics.pipeline_stopped();
    started.and(joined)
}

/// Returns once the orders say pause or hand over.
async fn halt_ordered(seen: &mut OrdersSeen) {
    loop {
        if seen.borrow_and_update().as_ref().is_some_and(|o| o.paused.is_some() || o.handover) {
            return;
        }
        if seen.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}
