//! The message on the wire, as the relay sends it and consumers read it: the topic
//! from the row, KEYS = event_id and biz_key (the broker indexes each key, so
//! `queryMsgByKey` finds the message by either), the user properties below, and the
//! payload bytes as the body. From the row's optional columns: TAGS = `tag`, the
//! `event_type` property, each entry of `headers` as a user property of its own name
//! (a W3C `traceparent` / `tracestate` among them), and `deliver_at` as the broker's
//! delivery time.

/// User property holding the event id (consumers deduplicate on it).
pub const PROPERTY_EVENT_ID: &str = "event_id";
/// User property holding the ordering key.
pub const PROPERTY_BIZ_KEY: &str = "biz_key";
/// User property holding the leader term of the relay instance that sent the
/// message: at most one term publishes at a time, so it tells which instance did.
pub const PROPERTY_RELAY_TERM: &str = "relay_term";
/// User property holding the event's type (the outbox row's `event_type` column).
pub const PROPERTY_EVENT_TYPE: &str = "event_type";

/// Property names a header may not take besides the RocketMQ client's own reserved set:
/// those the relay writes, and the delivery time of RocketMQ's proxy and cloud brokers,
/// which that set leaves out.
pub const RESERVED_PROPERTIES: [&str; 5] =
    [PROPERTY_EVENT_ID, PROPERTY_BIZ_KEY, PROPERTY_EVENT_TYPE, PROPERTY_RELAY_TERM, "__STARTDELIVERTIME"];
