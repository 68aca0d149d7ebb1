//! Exit codes a supervisor or a person at 3 a.m. can act on.
//!
//! | code | meaning | what to do |
//! |------|---------|-----------|
//! | 0 | clean exit (including SIGTERM / Ctrl-C) | |
//! | 1 | unexpected internal error | read the log line, file a bug |
//! | 2 | bad configuration or usage | fix the key the message names |
//! | 3 | a dependency is unreachable (database, broker) | start it / fix the address; restarting is safe |
//! | 4 | the environment is wrong (MySQL settings, privileges, topic, table) | fix what the message names |
//! | 5 | the local checkpoint is unreadable | move the checkpoint directory aside (the message says what follows) |

use crate::config::ConfigError;
use crate::db::DbError;
use crate::publish::rocketmq::PublishError;
use crate::relay::RelayError;
use crate::source::binlog::SourceError;

/// The process exit code for a failure, found by walking the error chain.
pub fn code_for(error: &(dyn std::error::Error + 'static)) -> u8 {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(code) = direct_code(e) {
            return code;
        }
        current = e.source();
    }
    1
}

fn direct_code(e: &(dyn std::error::Error + 'static)) -> Option<u8> {
    if e.is::<ConfigError>() {
        return Some(2);
    }
    if let Some(db) = e.downcast_ref::<DbError>() {
        return Some(db_code(db));
    }
    if let Some(publish) = e.downcast_ref::<PublishError>() {
        return Some(publish_code(publish));
    }
    let relay = e.downcast_ref::<RelayError>()?;
    Some(match relay {
        RelayError::Db(db) => db_code(db),
        RelayError::Publish(publish) => publish_code(publish),
        RelayError::Checkpoint(_) => 5,
        RelayError::Source(SourceError::Fatal(_)) => 3,
        RelayError::Config(_) => 2,
        RelayError::Preflight(_) | RelayError::Columns(_) | RelayError::Source(_) | RelayError::State(_) => 4,
    })
}

fn db_code(error: &DbError) -> u8 {
    match error {
        DbError::Unreachable { .. } => 3,
        DbError::Query { .. } => 4,
    }
}

fn publish_code(error: &PublishError) -> u8 {
    match error {
        PublishError::TopicMissing { .. } | PublishError::QueueCountMismatch { .. } => 4,
        _ => 3,
    }
}
