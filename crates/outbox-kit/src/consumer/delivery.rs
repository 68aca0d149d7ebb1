//! What an outbox consumer sees of one message ([`Delivery`]), and what its handler
//! answers ([`Ack`]).

use std::collections::BTreeMap;

use bytes::Bytes;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::STRING_HASH_SET;

use crate::wire::{PROPERTY_BIZ_KEY, PROPERTY_EVENT_ID, PROPERTY_EVENT_TYPE, PROPERTY_RELAY_TERM, RESERVED_PROPERTIES};

/// The W3C trace context header a producer's trace continues under.
pub const TRACEPARENT: &str = "traceparent";

/// One message as an outbox consumer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The `event_id` property (falls back to the first of KEYS): the deduplication key.
    pub event_id: String,
    pub biz_key: String,
    /// KEYS as sent: the event id and the business key, separated by a space.
    pub keys: String,
    /// The message's tag (the outbox row's `tag`), which subscriptions select by.
    pub tag: Option<String>,
    /// The outbox row's `event_type`.
    pub event_type: Option<String>,
    /// The outbox row's `headers`: every user property that is neither RocketMQ's
    /// own nor one of the relay's (`event_id`, `biz_key`, `event_type`, `relay_term`).
    pub headers: BTreeMap<String, String>,
    pub body: Bytes,
    /// The producer's message id (`UNIQ_KEY`).
    pub msg_id: String,
    /// The broker that stored it: with several brokers, a queue is (broker, queue id).
    pub broker_name: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    /// Above 0 for a redelivery: under `Consumption::Orderly` the number of times
    /// this consumer already retried it in place (same queue id and offset); under
    /// `Consumption::Concurrent` a delivery through the consumer group's retry topic
    /// (queue id and offset are then the retry queue's).
    pub reconsume_times: i32,
    /// The leader term of the relay instance that sent it (`relay_term`), if any.
    pub relay_term: Option<u64>,
    /// When the broker stored it, Unix milliseconds on the broker's clock.
    pub store_timestamp: i64,
}

impl Delivery {
    /// The delivery of `message`.
    pub(super) fn from_message(message: &MessageExt) -> Self {
        let property = |key: &str| {
            message.properties().iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v.to_string()).unwrap_or_default()
        };
        let keys = property("KEYS");
        let first_key = keys.split(' ').next().unwrap_or_default().to_owned();
        let event_id = Some(property(PROPERTY_EVENT_ID)).filter(|id| !id.is_empty()).unwrap_or(first_key);
        let optional = |key: &str| Some(property(key)).filter(|value| !value.is_empty());
        Delivery {
            event_id,
            biz_key: property(PROPERTY_BIZ_KEY),
            keys,
            tag: optional("TAGS"),
            event_type: optional(PROPERTY_EVENT_TYPE),
            headers: message
                .properties()
                .iter()
                .filter(|(name, _)| is_header(name.as_str()))
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
            body: message.body().unwrap_or_default(),
            msg_id: property("UNIQ_KEY"),
            broker_name: message.broker_name().to_owned(),
            queue_id: message.queue_id(),
            queue_offset: message.queue_offset(),
            reconsume_times: message.reconsume_times(),
            relay_term: property(PROPERTY_RELAY_TERM).parse().ok(),
            store_timestamp: message.store_timestamp(),
        }
    }
}

impl Delivery {
    /// The producer's trace context (the `traceparent` header), to continue its trace.
    pub fn traceparent(&self) -> Option<&str> {
        self.headers.get(TRACEPARENT).map(String::as_str)
    }
}

/// Whether a property came from the row's `headers`.
fn is_header(name: &str) -> bool {
    !STRING_HASH_SET.contains(name) && !RESERVED_PROPERTIES.contains(&name)
}

/// What the handler decided about one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// Processed (or a duplicate): do not deliver again.
    Done,
    /// Not processed: deliver it again (when and how is the `Consumption`'s rule).
    Later,
}

/// Handles deliveries; called from the client's consume threads.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, delivery: &Delivery) -> Ack;
}

impl<F> Handler for F
where
    F: Fn(&Delivery) -> Ack + Send + Sync + 'static,
{
    fn handle(&self, delivery: &Delivery) -> Ack {
        self(delivery)
    }
}
