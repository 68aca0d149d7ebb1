//! outbox-kit: what applications need around outbox-relay, without the relay.
//!
//! - Producer side: [`enqueue`] an event in the application's own transaction (the
//!   one that writes the business change), so both commit or neither does.
//! - Consumer side: [`consumer`], idempotent consumption (dedup mark and business
//!   write in one transaction), ordered per queue, with version and state guards.
//! - What both sides agree on: the [`wire`] form of a message, the [`RowStatus`] of
//!   an outbox row and the [`OutboxTable`] it lives in.
//!
//! It depends on mysql_async and the RocketMQ client, never on RocksDB, the HTTP
//! server or the command line parser.

mod client;
pub mod consumer;
mod enqueue;
mod metrics;
mod status;
mod table;
mod text;
pub mod wire;

pub use client::{client_config, full_message, ClientError, ClientHost};
pub use enqueue::{enqueue, new_event_id, EnqueueError, NewEvent, NewExtras};
pub use metrics::render as render_metrics;
pub use status::RowStatus;
pub use table::OutboxTable;
pub use text::truncate_utf8;
