//! `outbox-relay check`: every check the relay makes before it runs, and a few it only
//! warns about, in one report instead of one refusal at a time.
//!
//! Each check gives one [`Finding`]: ok, warn (the relay works, but less well than it
//! could) or FAIL (the relay refuses to start, or would stop, until it is fixed), what
//! was found and, unless ok, the fix. The source's settings are judged by the same
//! functions the relay's start uses (`source::binlog::settings`); grants are read from
//! `SHOW GRANTS`, never by trying statements, so the check changes nothing.
//!
//! Groups, in report order: the source's settings ([`source`]), the two users' grants
//! ([`grants`]), the outbox and relay tables ([`table`], with the outbox's [`partitions`]),
//! the broker and the configured topics ([`broker`]).

mod broker;
mod grant_parser;
mod grants;
mod partitions;
mod source;
mod table;

use mysql_async::Pool;
use serde::Serialize;

use crate::config::{Config, Mode};
use crate::db;
pub use crate::findings::{Finding, Group, Level};

/// Every finding, in check order.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct Report {
    pub findings: Vec<Finding>,
}

impl Report {
    /// How many checks failed: any makes `outbox-relay check` exit 4.
    pub fn failures(&self) -> usize {
        self.findings.iter().filter(|f| f.level == Level::Fail).count()
    }
}

/// Runs every check against the servers and the broker `config` names. Nothing
/// is changed anywhere; a server that does not answer is a FAIL of its group.
pub async fn run(config: &Config) -> Report {
    let outbox = config.outbox_table();
    let mut findings = Vec::new();
    let source = match (config.mode, &config.source) {
        (Mode::Binlog, Some(source)) => Some(source),
        _ => None,
    };
    let source_pool = match source {
        Some(settings) => match db::connect_with("source", &settings.url, &settings.tls, 1, &[]).await {
            Ok(pool) => Some(pool),
            Err(error) => {
                findings.push(Finding::fail(
                    Group::Source,
                    "connection",
                    error.to_string(),
                    "start the source or fix source.url / source.tls as the message says; its checks (settings, grants, columns) did not run",
                ));
                None
            }
        },
        None => {
            findings.push(Finding::ok(Group::Source, "mode", "poll: no binlog source to check"));
            None
        }
    };
    let primary_pool = match db::connect_with("primary", &config.primary.url, &config.primary.tls, 1, &[]).await {
        Ok(pool) => Some(pool),
        Err(error) => {
            findings.push(Finding::fail(
                Group::Table,
                "primary connection",
                error.to_string(),
                "start the primary or fix primary.url / primary.tls as the message says; its checks (grants, tables) did not run",
            ));
            None
        }
    };
    if let (Some(pool), Some(settings)) = (&source_pool, source) {
        findings.extend(source::findings(pool, settings).await);
        findings.extend(grants::of_source(pool, &outbox).await);
    }
    if let Some(pool) = &primary_pool {
        findings.extend(grants::of_primary(pool, config, &outbox).await);
        findings.extend(table::on_primary(pool, config, &outbox).await);
    }
    if let Some(pool) = &source_pool {
        findings.push(table::on_source(pool, &outbox).await);
    }
    findings.extend(broker::findings(config).await);
    for pool in [source_pool, primary_pool].into_iter().flatten() {
        disconnect(pool).await;
    }
    Report { findings }
}

/// Closes a pool; a close that fails changes nothing about the report.
async fn disconnect(pool: Pool) {
    if let Err(error) = pool.disconnect().await {
        tracing::debug!(%error, "closing a check connection failed");
    }
}

/// A server error or value as one line of the report.
fn one_line(text: impl std::fmt::Display) -> String {
    text.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
}
