//! outbox-relay: relays transactional-outbox rows from the MySQL/MariaDB binlog to
//! RocketMQ. Applications commit a business change and an outbox row in one local
//! transaction; the relay publishes each row synchronously (only SEND_OK counts),
//! routes by `hash(biz_key)` so one key stays ordered, and checkpoints its binlog
//! position only after the acknowledgement. A polling sweep over the table is the
//! fallback that guarantees no loss (and the whole relay in poll mode).
//! Applications do not depend on this crate: they use `outbox-kit`.
//!
//! The binary `outbox-relay` is a thin shell (its `cli` module) over the public part:
//! - [`config`]: the typed, validated configuration;
//! - [`relay`]: runs the relay ([`relay::run`]);
//! - [`route`]: the documented `hash(biz_key) % queue_count`;
//! - [`store`]: the data path's SQL on the primary, including `migrate`;
//! - [`rocketmq`]: the synchronous producer (SEND_OK only);
//! - [`ops`]: what operators run: checks, position, manual actions, status, reconcile,
//!   topics and test sends;
//! - [`telemetry`]: the spans of traced sends, exported over OTLP;
//! - [`db`], [`event`], [`exit`]: connections, the outbox event, exit codes.
//!
//! One event's path, folder by folder: `source` (binlog reader or sweep, hand-off
//! under the in-flight budget) → `coordinator` (ack tracker, routing) → `lanes`
//! (one ordered sender per queue) → `rocketmq` (SEND_OK) → `lanes` (the report) →
//! `coordinator` (the acknowledged prefix: `checkpoint`) → `write_back` (SENT,
//! batched) → `store` (the SQL). `relay` wires them per leader term; `leader` holds the
//! lease whose term fences every write.
//!
//! Imports point down this list, never up (`tests/structure.rs` checks it; the binary's
//! `cli` sits above them all): `exit` → `relay` → `ops` → `coordinator` → `supervise` → `http` → `error` →
//! `checkpoint` → `source` → `lanes` → `write_back` → `leader` → `health` → `store` →
//! `metrics` → `rocketmq` → `telemetry` → the leaves (`fault`, `findings`, `server`, `db`, `event`,
//! `config`, `backoff`, `time`, `said_once`). A stage imports the types of the stages it hands to,
//! so the pipeline's last stages sit lowest.

#![recursion_limit = "512"]

pub(crate) mod backoff;
pub(crate) mod checkpoint;
pub mod config;
pub(crate) mod coordinator;
pub mod db;
mod error;
pub mod event;
pub mod exit;
mod fault;
pub(crate) mod findings;
pub(crate) mod health;
pub(crate) mod http;
pub(crate) mod lanes;
pub(crate) mod leader;
pub(crate) mod metrics;
pub mod ops;
pub mod relay;
pub mod rocketmq;
pub(crate) mod said_once;
pub(crate) mod server;
pub(crate) mod source;
pub mod store;
mod supervise;
pub mod telemetry;
pub(crate) mod time;
pub(crate) mod write_back;

pub use coordinator::route;
pub use metrics::process::ProcessStats;
