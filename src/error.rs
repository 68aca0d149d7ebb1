//! Why the relay stopped or could not start: one enum over every class of cause, so
//! `exit` can map each to the exit code a supervisor and a person can act on.

use crate::checkpoint::{CheckpointError, WriterStopped};
use crate::config::ConfigError;
use crate::db::DbError;
use crate::rocketmq::PublishError;
use crate::source::binlog::{ColumnError, PreflightError};

/// Why the relay stopped (or could not start).
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    #[error(transparent)]
    Columns(#[from] ColumnError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    CheckpointWriter(#[from] WriterStopped),
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// Something about the environment that only a person can fix.
    #[error("{0}")]
    Environment(String),
    /// A task panicked: a bug.
    #[error("task {task} panicked: {message}; this is a bug, please report it with this log. The relay stopped after draining and checkpointing; restarting is safe (what was not acknowledged is sent again)")]
    Panic { task: &'static str, message: String },
    /// An internal failure that is not a panic.
    #[error("{0}")]
    Internal(String),
}
