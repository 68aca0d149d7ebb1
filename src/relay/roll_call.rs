//! This instance's line in the fleet's roll call (`outbox_relay_instances`): its role,
//! term and readiness every few seconds and as they change, and `stopped` as it
//! exits, so `outbox-relay status` run anywhere shows every instance of the fleet. A
//! primary that refuses the write (a missing grant) costs one warning, never the relay.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::health::{Health, Role};
use crate::metrics::RelayMetrics;
use crate::store::{InstanceReport, InstanceRole, Instances, REPORT_EVERY};

/// How often the instance looks whether what it reports changed.
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// The least time between two writes for a change: a flapping readiness costs the
/// primary at most one write a second.
const CHANGE_EVERY: Duration = Duration::from_secs(1);
/// How long a report may take: a primary that does not answer must not hold up a stop.
const REPORT_WITHIN: Duration = Duration::from_secs(2);

/// Who reports, and where its figures come from.
pub(super) struct RollCall {
    pub instances: Instances,
    /// The name it holds the lease under.
    pub instance: String,
    /// Where its endpoints answer.
    pub http: String,
    pub health: Health,
    pub metrics: RelayMetrics,
}

impl RollCall {
    fn report(&self, stopped: bool) -> InstanceReport {
        let readiness = self.health.readiness();
        let role = match (stopped, readiness.role) {
            (true, _) => InstanceRole::Stopped,
            (false, Role::Leader) => InstanceRole::Leader,
            (false, Role::Standby) => InstanceRole::Standby,
        };
        InstanceReport {
            instance: self.instance.clone(),
            http: self.http.clone(),
            role,
            term: u64::try_from(self.metrics.leader_term.get()).unwrap_or_default(),
            ready: readiness.ready && !stopped,
            reason: readiness.reason,
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

/// Reports every [`REPORT_EVERY`], and when its role, term or readiness changes
/// (looked at every [`LOOK_EVERY`], written at most every [`CHANGE_EVERY`]), until
/// `stop`; then once more as stopped.
pub(super) async fn roll_call(call: RollCall, stop: CancellationToken) {
    let mut look = tokio::time::interval(LOOK_EVERY);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut written: Option<(InstanceReport, Instant)> = None;
    let mut refused = false;
    loop {
        let stopped = tokio::select! {
            () = stop.cancelled() => true,
            _ = look.tick() => false,
        };
        let report = call.report(stopped);
        let due = written.as_ref().is_none_or(|(last, at)| {
            at.elapsed() >= REPORT_EVERY || (changed(last, &report) && at.elapsed() >= CHANGE_EVERY)
        });
        if !due && !stopped {
            continue;
        }
        let reported = tokio::time::timeout(REPORT_WITHIN, call.instances.report(&report)).await;
        // A failed write waits for the next period too: a refusing primary is asked
        // every few seconds, not four times a second.
        written = Some((report, Instant::now()));
        match reported.unwrap_or_else(|_| Err(mysql_async::Error::Other("no answer within 2 s".into()))) {
            Ok(()) => refused = false,
            Err(error) if !refused => {
                refused = true;
                tracing::warn!(%error, "cannot write this instance to outbox_relay_instances (run `outbox-relay migrate`; the primary user needs SELECT, INSERT, UPDATE, DELETE on it): `outbox-relay status` does not list this instance");
            }
            Err(error) => tracing::debug!(%error, "cannot write this instance to outbox_relay_instances"),
        }
        if stopped {
            return;
        }
    }
}

/// Whether the roll call's reader would see another instance than `last` said.
fn changed(last: &InstanceReport, now: &InstanceReport) -> bool {
    (last.role, last.term, last.ready) != (now.role, now.term, now.ready)
}
