//! outbox-relay: relays transactional-outbox rows from the MySQL/MariaDB binlog to
//! RocketMQ. Applications commit a business change and an outbox row in one local
//! transaction; the relay publishes each row synchronously (only SEND_OK counts),
//! routes by `hash(biz_key)` so one key stays ordered, and checkpoints its binlog
//! position only after the acknowledgement. A polling sweep over the table is the
//! fallback that guarantees no loss (and the whole relay in poll mode).
//!
//! The binary `outbox-relay` is a thin shell over this library:
//! - [`config`]: the typed, validated configuration;
//! - [`db`]: the source and primary connections;
//! - [`source`]: the binlog reader and decoder (committed outbox INSERTs);
//! - [`sweep`]: the polling sweep (claims with leases, full sweeps, the watermark);
//! - [`route`]: `hash(biz_key) % queue_count`;
//! - [`publish`]: the RocketMQ producer and the ordered per-queue lanes;
//! - [`ack`]: the acknowledged prefix that the [`checkpoint`] may advance to;
//! - [`store`]: SQL on the primary (schema migrations, status updates, claims);
//! - [`relay`]: the pipeline's wiring;
//! - [`metrics`] and [`http`]: Prometheus metrics, /metrics and /healthz;
//! - [`backoff`]: the one exponential backoff;
//! - [`outbox`]: the producer helper (enqueue in the caller's transaction);
//! - [`consumer`]: the idempotent consumer kit;
//! - [`admin`]: operator actions on the broker (create topic, test send);
//! - [`exit`]: which exit code an error maps to.

#![recursion_limit = "512"]

pub mod ack;
pub mod admin;
pub mod backoff;
pub mod checkpoint;
pub mod config;
pub mod consumer;
pub mod db;
pub mod event;
pub mod exit;
pub mod http;
pub mod metrics;
pub mod outbox;
pub mod publish;
pub mod relay;
pub mod route;
pub mod source;
pub mod store;
pub mod sweep;
pub mod text;
