//! outbox-chaos: the fault-injection harness. It runs the real stack and one to
//! three relay processes, a load generator and an independent consumer, injects a
//! seeded schedule of faults (relay kills and pauses, broker, NameServer and primary
//! kills, a stopped replica SQL thread, binlog purges, a deleted checkpoint, a crowd of
//! relays, a source switch) and judges the run from the database and the consumer's
//! records.
//!
//! The library holds the harness; `src/main.rs` is its command line. [`FaultKind`]
//! names every fault, so tests can check a report for each.

// The RocketMQ client's futures are deep.
#![recursion_limit = "512"]

mod consumer;
mod faults;
mod fleet;
mod load;
mod options;
mod relay_config;
mod report;
mod rng;
mod run;
mod schedule;
mod stack;
mod verdict;

pub use options::Options;
pub use run::{run, Outcome};
pub use schedule::FaultKind;
