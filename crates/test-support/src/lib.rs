//! Shared by the relay's integration tests and `outbox-bench`: the relay binary as a
//! child process ([`relay`]), outbox rows to insert ([`rows`]) and unique names.
//! Every wait polls a condition (`/readyz`, the process state) against a deadline.

pub mod relay;
pub mod rows;

/// A name unique to this run, for tables, topics, groups and event ids.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}
