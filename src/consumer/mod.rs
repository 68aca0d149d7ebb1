//! The consumer side of the outbox: subscribing to what the relay publishes.
//!
//! [`Subscription`] is a RocketMQ push consumer reduced to what an outbox consumer
//! needs: each message as a [`Delivery`] (event_id, biz_key, body, where it was
//! stored) handed to a handler that answers [`Ack::Done`] or [`Ack::Later`].

mod subscription;

pub use subscription::{Ack, Delivery, Handler, StartFrom, Subscription};
