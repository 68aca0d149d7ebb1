//! `pause`, `resume` and `handover`: operators' orders to whichever instance leads,
//! written to the lease row with their audit row in one transaction. The leader reads
//! its orders a few times a second: paused, it drains its sends, saves its position
//! and publishes nothing (holding the lease, so no standby starts either) until
//! resumed; ordered to hand over, it drains, gives the lease back and leaves it to a
//! standby for a while. `handover` waits until another instance leads and says which.

use std::time::{Duration, Instant};

use mysql_async::{Pool, TxOpts};
use serde::Serialize;

use outbox_kit::OutboxTable;

use super::manual::{audit, AuditEntry, Operator};
use crate::store::{LeaseHolder, LeaseStore, Paused};

/// How often `handover` looks whether another instance leads.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// Why an order could not be given or carried out.
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    #[error(transparent)]
    Db(#[from] mysql_async::Error),
    #[error("no instance leads (the lease ran out or was never taken): there is nothing to hand over; start a relay")]
    NoLeader,
    #[error("{holder} (term {term}) did not hand over within {within:?}: it may be stuck or unable to reach the primary; see its /readyz and log, or stop it (SIGTERM) so a standby takes over")]
    NotHandedOver { holder: String, term: u64, within: Duration },
    #[error("no standby took the lease within {within:?} of {holder} giving it up, so {holder} leads again (term {term}): start a standby first (one more instance with the same config)")]
    NoStandby { holder: String, term: u64, within: Duration },
}

/// An order about publishing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PauseOrder {
    Pause,
    Resume,
}

impl PauseOrder {
    /// Its name, as the audit row and `--json` give it.
    pub fn name(self) -> &'static str {
        match self {
            PauseOrder::Pause => "pause",
            PauseOrder::Resume => "resume",
        }
    }
}

/// What a pause or resume changed (or, with `dry_run`, would change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PauseChange {
    pub action: PauseOrder,
    /// The pause before the order (`None`: it was running).
    pub before: Option<Paused>,
    pub paused: bool,
    pub dry_run: bool,
}

/// A handover that happened: who led, who leads now, how long it took.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Handover {
    pub from: String,
    pub from_term: u64,
    pub to: String,
    pub to_term: u64,
    pub seconds: f64,
    pub dry_run: bool,
}

/// The orders to one fleet (the relays of one outbox table and lease name).
pub struct FleetOrders {
    pool: Pool,
    outbox: OutboxTable,
    lease: LeaseStore,
}

impl FleetOrders {
    pub fn new(pool: Pool, outbox: OutboxTable, lease: LeaseStore) -> Self {
        Self { pool, outbox, lease }
    }

    /// Pauses publishing fleet-wide or resumes it, audited as done by `by`.
    pub async fn order(&self, order: PauseOrder, by: &Operator, dry_run: bool) -> Result<PauseChange, OrderError> {
        let paused = order == PauseOrder::Pause;
        let mut conn = self.pool.get_conn().await?;
        let mut tx = conn.start_transaction(TxOpts::default()).await?;
        let before = self.lease.paused_for_update(&mut tx).await?;
        let change = PauseChange { action: order, before, paused, dry_run };
        if dry_run {
            tx.rollback().await?;
            return Ok(change);
        }
        self.lease.set_paused(&mut tx, paused.then_some(by.name.as_str())).await?;
        let state = |paused: bool| if paused { "paused" } else { "running" }.to_owned();
        let entry = AuditEntry {
            action: order.name(),
            target: format!("leader of {}", self.outbox.qualified()),
            old_state: state(change.before.is_some()),
            new_state: state(paused),
            result: "ordered; the leader follows within a second".to_owned(),
        };
        audit(&mut tx, &self.outbox, by, &entry).await?;
        tx.commit().await?;
        Ok(change)
    }

    /// Orders the leader to hand its lease to a standby and waits up to `within` for
    /// another instance to lead, audited as done by `by`.
    pub async fn handover(&self, by: &Operator, within: Duration, dry_run: bool) -> Result<Handover, OrderError> {
        let mut conn = self.pool.get_conn().await?;
        let mut tx = conn.start_transaction(TxOpts::default()).await?;
        let leader = self.lease.holder_for_update(&mut tx).await?.filter(|l| l.remaining_ms > 0);
        let Some(leader) = leader else {
            tx.rollback().await?;
            return Err(OrderError::NoLeader);
        };
        if dry_run {
            tx.rollback().await?;
            return Ok(handover(&leader, &leader, Duration::ZERO, true));
        }
        self.lease.order_handover(&mut tx, leader.term).await?;
        let entry = AuditEntry {
            action: "handover",
            target: format!("leader of {}", self.outbox.qualified()),
            old_state: format!("{} term {}", leader.holder, leader.term),
            new_state: "a standby".to_owned(),
            result: "ordered; the leader drains and gives the lease up".to_owned(),
        };
        audit(&mut tx, &self.outbox, by, &entry).await?;
        tx.commit().await?;
        drop(conn);
        self.await_new_leader(&leader, within).await
    }

    /// Waits until a term after `leader`'s holds.
    async fn await_new_leader(&self, leader: &LeaseHolder, within: Duration) -> Result<Handover, OrderError> {
        let ordered = Instant::now();
        loop {
            let now = self.lease.holder().await?;
            match now.filter(|now| now.term > leader.term && now.remaining_ms > 0) {
                Some(now) if now.holder == leader.holder => {
                    return Err(OrderError::NoStandby { holder: now.holder, term: now.term, within: ordered.elapsed() })
                }
                Some(now) => return Ok(handover(leader, &now, ordered.elapsed(), false)),
                None if ordered.elapsed() >= within => {
                    return Err(OrderError::NotHandedOver { holder: leader.holder.clone(), term: leader.term, within })
                }
                None => tokio::time::sleep(LOOK_EVERY).await,
            }
        }
    }
}

fn handover(from: &LeaseHolder, to: &LeaseHolder, took: Duration, dry_run: bool) -> Handover {
    Handover {
        from: from.holder.clone(),
        from_term: from.term,
        to: to.holder.clone(),
        to_term: to.term,
        seconds: took.as_secs_f64(),
        dry_run,
    }
}
