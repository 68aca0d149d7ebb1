//! The cases, one per file.

pub mod bigtx;
pub mod drain;
pub mod latency;
pub mod raw;
pub mod retention;
