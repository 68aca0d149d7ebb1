//! The fleet's roll call: every instance writes its role, term and readiness to
//! `outbox_relay_instances` every few seconds (and `stopped` as it exits), so
//! `outbox-relay status` shows the whole fleet, each instance as it last saw itself,
//! not only the one on its own host. Rows not refreshed for a day are removed.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Pool;
use outbox_kit::truncate_utf8;
use serde::Serialize;

/// How often a running instance reports.
pub(crate) const REPORT_EVERY: Duration = Duration::from_secs(5);
/// An instance not heard from for three reports, that did not say it stopped, is
/// silent: killed, hung, or cut off from the primary.
const SILENT_AFTER: Duration = Duration::from_secs(3 * REPORT_EVERY.as_secs());
/// Rows older than this are removed by the next instance that reports.
const FORGET_AFTER: Duration = Duration::from_secs(86_400);

/// What an instance was doing when it last reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceRole {
    Leader,
    Standby,
    /// It exited (cleanly: it said so on the way out).
    Stopped,
}

impl InstanceRole {
    const ALL: [InstanceRole; 3] = [InstanceRole::Leader, InstanceRole::Standby, InstanceRole::Stopped];

    /// The role as the table and `status` spell it.
    pub fn name(self) -> &'static str {
        match self {
            InstanceRole::Leader => "leader",
            InstanceRole::Standby => "standby",
            InstanceRole::Stopped => "stopped",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|role| role.name() == name)
    }
}

/// What an instance says of itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceReport {
    pub instance: String,
    /// Where its endpoints answer (host:port).
    pub http: String,
    pub role: InstanceRole,
    pub term: u64,
    pub ready: bool,
    /// Why it is not ready.
    pub reason: Option<String>,
    pub version: String,
}

/// An instance as the table shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceSeen {
    #[serde(flatten)]
    pub report: InstanceReport,
    /// Seconds since it last reported (the database's clock).
    pub seen_secs_ago: f64,
    /// It has missed three reports without saying it stopped: what the row says of
    /// it is stale (it was killed, hangs, or cannot reach the primary).
    pub silent: bool,
}

impl InstanceSeen {
    fn new(report: InstanceReport, seen_secs_ago: f64) -> Self {
        let silent = report.role != InstanceRole::Stopped && seen_secs_ago > SILENT_AFTER.as_secs_f64();
        Self { report, seen_secs_ago, silent }
    }
}

/// The roll call of one fleet.
#[derive(Clone)]
pub struct Instances {
    pool: Pool,
    table: String,
    fleet: String,
}

impl Instances {
    pub fn new(pool: Pool, schema: &str, fleet: &str) -> Self {
        Self { pool, table: format!("`{schema}`.`outbox_relay_instances`"), fleet: fleet.to_owned() }
    }

    /// Writes `me` as this instance's row, and removes rows nobody refreshed for a day.
    pub(crate) async fn report(&self, me: &InstanceReport) -> Result<(), mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "INSERT INTO {} (fleet, instance, http, role, term, ready, reason, version, seen_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, NOW(3)) ON DUPLICATE KEY UPDATE http = VALUES(http), \
                 role = VALUES(role), term = VALUES(term), ready = VALUES(ready), reason = VALUES(reason), \
                 version = VALUES(version), seen_at = VALUES(seen_at)",
                self.table
            ),
            (
                &self.fleet,
                truncate_utf8(&me.instance, 255),
                truncate_utf8(&me.http, 255),
                me.role.name(),
                me.term,
                me.ready,
                me.reason.as_deref().map(|r| truncate_utf8(r, 1024)),
                &me.version,
            ),
        )
        .await?;
        conn.exec_drop(
            format!("DELETE FROM {} WHERE fleet = ? AND seen_at < NOW(3) - INTERVAL ? SECOND", self.table),
            (&self.fleet, FORGET_AFTER.as_secs()),
        )
        .await
    }

    /// Every instance of the fleet, the most recently seen first (a row in a role this
    /// relay does not know, written by a newer one, is left out).
    pub async fn list(&self) -> Result<Vec<InstanceSeen>, mysql_async::Error> {
        type Row = (String, String, String, u64, bool, Option<String>, String, f64);
        let rows: Vec<Row> = self
            .pool
            .get_conn()
            .await?
            .exec(
                format!(
                    "SELECT instance, http, role, term, ready, reason, version, \
                     TIMESTAMPDIFF(MICROSECOND, seen_at, NOW(3)) / 1e6 FROM {} WHERE fleet = ? ORDER BY seen_at DESC",
                    self.table
                ),
                (&self.fleet,),
            )
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(instance, http, role, term, ready, reason, version, seen_secs_ago)| {
                let role = InstanceRole::parse(&role)?;
                Some(InstanceSeen::new(
                    InstanceReport { instance, http, role, term, ready, reason, version },
                    seen_secs_ago,
                ))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(role: InstanceRole, secs_ago: f64) -> InstanceSeen {
        let report = InstanceReport {
            instance: "vm:1:1".into(),
            http: "127.0.0.1:9464".into(),
            role,
            term: 3,
            ready: true,
            reason: None,
            version: "0.1.0".into(),
        };
        InstanceSeen::new(report, secs_ago)
    }

    #[test]
    fn an_instance_that_missed_three_reports_is_silent_unless_it_said_it_stopped() {
        assert!(!seen(InstanceRole::Leader, 14.0).silent);
        assert!(seen(InstanceRole::Leader, 16.0).silent);
        assert!(seen(InstanceRole::Standby, 600.0).silent);
        assert!(!seen(InstanceRole::Stopped, 600.0).silent, "a stopped instance said so");
    }
}
