//! The consumer kit: at-least-once delivery is only half of the design; this is the
//! other half, so consumers get idempotency right by default.
//!
//! - [`Subscription`]: a RocketMQ push consumer that hands each message on as a
//!   [`Delivery`], each queue in order by default ([`Consumption`]);
//! - [`IdempotentConsumer`]: dedup mark and business write in ONE transaction
//!   (see `idempotent` for the exact rules);
//! - [`guards`]: version and state-machine guards for out-of-order events;
//! - [`schema`]: the kit's tables; [`retention`]: cleanup of old dedup rows;
//! - [`ConsumerMetrics`]: the `outbox_consumer_*_total` counters and the dead-letter topic's
//!   max offset (`dead_letters`).

mod consumption;
mod dead_letters;
mod delivery;
pub mod guards;
mod idempotent;
mod metrics;
pub mod retention;
pub mod schema;
mod subscription;

pub use consumption::Consumption;
pub use delivery::{Ack, Delivery, Handler, TRACEPARENT};
pub use idempotent::{DedupKey, EventHandler, HandlerError, HandlerFuture, IdempotentConsumer, Outcome};
pub use metrics::ConsumerMetrics;
pub use subscription::{StartFrom, Subscribe, Subscription, EVERY_TAG};
