//! The message on the wire, as the relay sends it and consumers read it: the topic
//! from the row, KEYS = event_id (the broker indexes KEYS, so `queryMsgByKey` finds
//! it), the user properties below, and the payload bytes as the body.

/// User property holding the event id (consumers deduplicate on it).
pub const PROPERTY_EVENT_ID: &str = "event_id";
/// User property holding the ordering key.
pub const PROPERTY_BIZ_KEY: &str = "biz_key";
/// User property holding the leader term of the relay instance that sent the
/// message: at most one term publishes at a time, so it tells which instance did.
pub const PROPERTY_RELAY_TERM: &str = "relay_term";
