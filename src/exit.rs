//! Exit codes a supervisor or a person at 3 a.m. can act on.
//!
//! | code | meaning | what to do |
//! |------|---------|-----------|
//! | 0 | clean exit (including SIGTERM / Ctrl-C) | |
//! | 1 | a bug: a task panicked, or an unexpected internal error | read the log line, file a bug; restarting is safe |
//! | 2 | bad configuration or usage | fix the key the message names |
//! | 3 | a dependency is unreachable (database, broker), or a leader ordered to hand over did not let go in time | start it / fix the address; restarting is safe |
//! | 4 | the environment is wrong (credentials, database name, MySQL settings, privileges, table (or its partitioning, for `migrate`), a changed pinned queue count; a missing topic for `check` and `admin` only; no leader to hand over, or no standby to take over), or `check` found a FAIL | fix what the message names; restarting before that cannot help |
//! | 5 | the local checkpoint is unreadable | move the checkpoint directory aside (the message says what follows) |
//! | 6 | a second SIGTERM / Ctrl-C during the drain: stopped at once | nothing: the next leader resumes from the last checkpoint (duplicates at most, no loss) |
//! | 7 | `reconcile` found differences between the outbox and the consumer's dedup table, or `verify` found SENT rows the broker does not have | look into the events or rows it lists |

use crate::config::ConfigError;
use crate::db::DbError;
use crate::error::RelayError;
use crate::ops::orders::OrderError;
use crate::ops::position::PositionError;
use crate::ops::reconcile::{DifferencesFound, WindowError};
use crate::ops::verify::NotOnBroker;
use crate::rocketmq::PublishError;
use crate::source::binlog::PreflightError;
use crate::store::PartitionRefused;
use crate::telemetry::TraceExportError;

/// The classes of exit, each with its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ExitClass {
    Clean = 0,
    Bug = 1,
    Config = 2,
    DependencyDown = 3,
    Environment = 4,
    Checkpoint = 5,
    /// A second stop signal cut the drain short.
    Interrupted = 6,
    /// `reconcile` found events on one side only, or `verify` SENT rows not on the broker.
    Differences = 7,
}

impl ExitClass {
    /// The process exit code.
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// The process exit code for a failure, found by walking the error chain.
pub fn code_for(error: &(dyn std::error::Error + 'static)) -> u8 {
    class_for(error).code()
}

/// The class of a failure: the first error in the chain that has one, else a bug.
pub fn class_for(error: &(dyn std::error::Error + 'static)) -> ExitClass {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(class) = direct_class(e) {
            return class;
        }
        current = e.source();
    }
    ExitClass::Bug
}

fn direct_class(e: &(dyn std::error::Error + 'static)) -> Option<ExitClass> {
    if e.is::<ConfigError>() || e.is::<WindowError>() || e.is::<TraceExportError>() {
        return Some(ExitClass::Config);
    }
    if e.is::<DifferencesFound>() || e.is::<NotOnBroker>() {
        return Some(ExitClass::Differences);
    }
    if e.is::<PartitionRefused>() {
        return Some(ExitClass::Environment);
    }
    if let Some(position) = e.downcast_ref::<PositionError>() {
        return Some(position_class(position));
    }
    if let Some(order) = e.downcast_ref::<OrderError>() {
        return Some(order_class(order));
    }
    if let Some(db) = e.downcast_ref::<DbError>() {
        return Some(db_class(db));
    }
    if let Some(publish) = e.downcast_ref::<PublishError>() {
        return Some(publish_class(publish));
    }
    let relay = e.downcast_ref::<RelayError>()?;
    Some(match relay {
        RelayError::Db(db) => db_class(db),
        RelayError::Publish(publish) => publish_class(publish),
        RelayError::Checkpoint(_) | RelayError::CheckpointWriter(_) => ExitClass::Checkpoint,
        RelayError::Config(_) => ExitClass::Config,
        // A query that failed at start without a server answer: the connection broke.
        RelayError::Preflight(PreflightError::Query { .. }) => ExitClass::DependencyDown,
        RelayError::Preflight(_) | RelayError::Columns(_) | RelayError::Environment(_) => ExitClass::Environment,
        RelayError::Panic { .. } | RelayError::Internal(_) => ExitClass::Bug,
    })
}

fn db_class(error: &DbError) -> ExitClass {
    match error {
        DbError::Unreachable { .. } => ExitClass::DependencyDown,
        DbError::Query { source, .. } => query_class(source),
        DbError::AccessDenied { .. }
        | DbError::DatabaseDenied { .. }
        | DbError::UnknownDatabase { .. }
        | DbError::TlsUnavailable { .. }
        | DbError::TlsRequiredByServer { .. }
        | DbError::CertificateRejected { .. }
        | DbError::TlsHostMismatch { .. }
        | DbError::TlsSetup { .. } => ExitClass::Environment,
        DbError::TlsFile { .. } => ExitClass::Config,
    }
}

/// A statement that failed: the server's refusal is the environment's fault, unless it
/// is a lock wait timeout or a deadlock (trying again helps); no answer at all is a
/// dependency down.
fn query_class(error: &mysql_async::Error) -> ExitClass {
    match error {
        mysql_async::Error::Server(e) if [1205, 1213].contains(&e.code) => ExitClass::DependencyDown,
        mysql_async::Error::Server(_) => ExitClass::Environment,
        _ => ExitClass::DependencyDown,
    }
}

fn order_class(error: &OrderError) -> ExitClass {
    match error {
        OrderError::Db(error) => query_class(error),
        OrderError::NoLeader | OrderError::NoStandby { .. } => ExitClass::Environment,
        OrderError::NotHandedOver { .. } => ExitClass::DependencyDown,
    }
}

fn position_class(error: &PositionError) -> ExitClass {
    match error {
        PositionError::PollMode => ExitClass::Config,
        PositionError::LeaderRunning { .. } | PositionError::LocalIsNewer { .. } | PositionError::NoServer => {
            ExitClass::Environment
        }
        PositionError::LocalNotRewritten(_) | PositionError::Checkpoint(_) => ExitClass::Checkpoint,
        PositionError::Db(db) => db_class(db),
    }
}

fn publish_class(error: &PublishError) -> ExitClass {
    match error {
        PublishError::TopicMissing { .. }
        | PublishError::QueueCountMismatch { .. }
        | PublishError::LayoutChanged { .. }
        | PublishError::Cluster { .. } => ExitClass::Environment,
        _ => ExitClass::DependencyDown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(error: RelayError) -> u8 {
        code_for(&error)
    }

    #[test]
    fn a_panic_is_a_bug_and_wrong_credentials_are_the_environment() {
        assert_eq!(code(RelayError::Panic { task: "lane", message: "boom".into() }), 1);
        let denied = DbError::AccessDenied {
            role: "primary",
            address: "db:3306".into(),
            user: "w".into(),
            env_key: "OUTBOX_RELAY__PRIMARY__URL".into(),
            reason: "Access denied".into(),
        };
        assert_eq!(code(RelayError::Db(denied)), 4);
        let missing = DbError::UnknownDatabase {
            role: "source",
            address: "db:3306".into(),
            user: "r".into(),
            database: "nope".into(),
        };
        assert_eq!(code(RelayError::Db(missing)), 4);
        let down = DbError::Unreachable { role: "primary", address: "db:3306".into(), reason: "refused".into() };
        assert_eq!(code(RelayError::Db(down)), 3);
        assert_eq!(code(RelayError::Environment("queue count changed".into())), 4);
    }

    #[test]
    fn a_tls_mismatch_is_the_environment_and_an_unreadable_tls_file_the_configuration() {
        let no_tls =
            DbError::TlsUnavailable { role: "source", address: "db:3306".into(), mode: "required", section: "source" };
        assert_eq!(code(RelayError::Db(no_tls)), 4);
        let rejected = DbError::CertificateRejected {
            role: "primary",
            address: "db:3306".into(),
            ca_file: "/etc/ca.pem".into(),
            reason: "UnknownIssuer".into(),
            section: "primary",
        };
        assert_eq!(code(RelayError::Db(rejected)), 4);
        let unreadable =
            DbError::TlsFile { key: "primary.tls.ca_file".into(), path: "/etc/ca.pem".into(), reason: "denied".into() };
        assert_eq!(code(RelayError::Db(unreadable)), 2);
    }
}
