//! Exit codes a supervisor or a person at 3 a.m. can act on.
//!
//! | code | meaning | what to do |
//! |------|---------|-----------|
//! | 0 | clean exit (including SIGTERM / Ctrl-C) | |
//! | 1 | a bug: a task panicked, or an unexpected internal error | read the log line, file a bug; restarting is safe |
//! | 2 | bad configuration or usage | fix the key the message names |
//! | 3 | a dependency is unreachable (database, broker) | start it / fix the address; restarting is safe |
//! | 4 | the environment is wrong (credentials, database name, MySQL settings, privileges, topic, table) | fix what the message names; restarting before that cannot help |
//! | 5 | the local checkpoint is unreadable | move the checkpoint directory aside (the message says what follows) |

use crate::config::ConfigError;
use crate::db::DbError;
use crate::error::RelayError;
use crate::rocketmq::PublishError;

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
        RelayError::Checkpoint(_) | RelayError::CheckpointWriter(_) => 5,
        RelayError::Config(_) => 2,
        RelayError::Preflight(_) | RelayError::Columns(_) | RelayError::Environment(_) => 4,
        RelayError::Panic { .. } | RelayError::Internal(_) => 1,
    })
}

fn db_code(error: &DbError) -> u8 {
    match error {
        DbError::Unreachable { .. } => 3,
        DbError::AccessDenied { .. } | DbError::UnknownDatabase { .. } | DbError::Query { .. } => 4,
    }
}

fn publish_code(error: &PublishError) -> u8 {
    match error {
        PublishError::TopicMissing { .. } | PublishError::QueueCountMismatch { .. } => 4,
        _ => 3,
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
        let missing = DbError::UnknownDatabase { role: "source", address: "db:3306".into(), database: "nope".into() };
        assert_eq!(code(RelayError::Db(missing)), 4);
        let down = DbError::Unreachable { role: "primary", address: "db:3306".into(), reason: "refused".into() };
        assert_eq!(code(RelayError::Db(down)), 3);
        assert_eq!(code(RelayError::Environment("queue count changed".into())), 4);
    }
}
