//! This instance's line in the fleet's roll call (`outbox_relay_instances`): its role,
//! term and readiness every few seconds, and `stopped` as it exits, so `outbox-relay
//! status` run anywhere shows every instance of the fleet. A primary that refuses the
//! write (a missing grant) costs one warning, never the relay.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::health::{Health, Role};
use crate::metrics::RelayMetrics;
use crate::store::{InstanceReport, InstanceRole, Instances};

/// How often the instance reports.
const REPORT_EVERY: Duration = Duration::from_secs(5);
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

/// Reports every [`REPORT_EVERY`] until `stop`, then once more as stopped.
pub(super) async fn roll_call(call: RollCall, stop: CancellationToken) {
    let mut tick = tokio::time::interval(REPORT_EVERY);
    let mut refused = false;
    loop {
        let stopped = tokio::select! {
            () = stop.cancelled() => true,
            _ = tick.tick() => false,
        };
        let reported = tokio::time::timeout(REPORT_WITHIN, call.instances.report(&call.report(stopped))).await;
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
