//! outbox-relay: relays transactional-outbox rows from the MySQL/MariaDB binlog to
//! RocketMQ. Applications commit a business change and an outbox row in one local
//! transaction; the relay publishes each row synchronously (only SEND_OK counts),
//! routes by `hash(biz_key)` so one key stays ordered, and checkpoints its binlog
//! position only after the acknowledgement. A polling sweep over the table is the
//! fallback that guarantees no loss (and the whole relay in poll mode).
//! Applications do not depend on this crate: they use `outbox-kit`.
//!
//! The binary `outbox-relay` is a thin shell over the public part:
//! - [`config`]: the typed, validated configuration;
//! - [`relay`]: runs the relay ([`relay::run`]); its [`relay::route`] is the documented
//!   `hash(biz_key) % queue_count`;
//! - [`store`]: SQL on the primary, including `migrate`;
//! - [`position`]: the relay's binlog position as an operator sees and sets it;
//! - [`rocketmq`]: the synchronous producer (SEND_OK only);
//! - [`admin`]: operator actions on the broker (create topic, find by key, test send);
//! - [`check`]: every check the relay makes at start, in one report (`outbox-relay check`);
//! - [`probe`]: a running relay's own account over its HTTP endpoint (for `status`);
//! - [`db`], [`event`], [`exit`]: connections, the outbox event, exit codes.
//!
//! The pipeline inside, upstream to downstream (imports point only that way):
//! `source` (binlog reader, sweep, hand-off under the in-flight budget) →
//! `relay` (coordinator, routing, ack tracker) → `lanes` (ordered senders over
//! `rocketmq`) → `checkpoint` (RocksDB + mirror) and `store` (status write-back);
//! above them all `leader` (the lease: one instance publishes, the term checked
//! before every send and checkpoint and fencing every write in `store`);
//! beside them `supervise` (owns every task), `health` (readiness and liveness),
//! `http`, `metrics`, `backoff` and `fault` (test-only faults).

#![recursion_limit = "512"]

pub mod admin;
pub(crate) mod backoff;
pub mod check;
pub(crate) mod checkpoint;
pub mod config;
pub mod db;
mod error;
pub mod event;
pub mod exit;
mod fault;
pub(crate) mod health;
pub(crate) mod http;
pub(crate) mod lanes;
pub(crate) mod leader;
pub(crate) mod metrics;
pub use metrics::process::ProcessStats;
pub mod probe;
pub mod relay;
pub mod rocketmq;
pub(crate) mod source;
pub mod store;
pub use checkpoint::position;
mod supervise;
