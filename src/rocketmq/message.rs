//! The wire form of an outbox event: KEYS = event_id (indexed by the broker, so
//! `queryMsgByKey` finds it), user properties `event_id`, `biz_key` and (from the
//! relay) `relay_term`, the leader term that sent it; body = payload.
//!
//! One event goes to the broker as a plain message built here; several go as one
//! batch message (see `batch`), with the same properties.

use rocketmq_model::common::message::message_builder::MessageBuilder;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_model::common::message::{MessageConst, MessageTrait};

use outbox_kit::wire::{PROPERTY_BIZ_KEY, PROPERTY_EVENT_ID, PROPERTY_RELAY_TERM};

use super::PublishError;
use crate::event::OutboxEvent;

/// The properties of `event`'s message with id `id`: KEYS (indexed by the broker),
/// the kit's event_id, biz_key and relay_term, and the wait for the store's answer.
pub(super) fn properties<'a>(
    event: &'a OutboxEvent,
    term: Option<&'a str>,
    id: &'a str,
) -> impl Iterator<Item = (&'static str, &'a str)> {
    [
        (MessageConst::PROPERTY_KEYS, event.event_id.as_str()),
        (PROPERTY_EVENT_ID, event.event_id.as_str()),
        (PROPERTY_BIZ_KEY, event.biz_key.as_str()),
        (MessageConst::PROPERTY_WAIT_STORE_MSG_OK, "true"),
        (MessageConst::PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, id),
    ]
    .into_iter()
    .chain(term.map(|term| (PROPERTY_RELAY_TERM, term)))
}

/// The message of `event`, with id `id`.
pub(super) fn to_message(event: &OutboxEvent, term: Option<&str>, id: &str) -> Result<Message, PublishError> {
    check_body(event)?;
    let mut message = MessageBuilder::new()
        .topic(event.topic.as_str())
        .body(event.payload.clone())
        .build()
        .map_err(|e| illegal(event, e.to_string()))?;
    for (name, value) in properties(event, term, id) {
        message.put_property(name.into(), value.into());
    }
    Ok(message)
}

/// Refuses an empty payload: the broker takes no message without a body (the client
/// checks single messages for it, not those inside a batch).
pub(super) fn check_body(event: &OutboxEvent) -> Result<(), PublishError> {
    if event.payload.is_empty() {
        return Err(illegal(event, "the payload is empty and a message needs a body: write a payload".to_owned()));
    }
    Ok(())
}

/// An event the broker can never take, for `reason`.
pub(super) fn illegal(event: &OutboxEvent, reason: String) -> PublishError {
    PublishError::Client {
        operation: "build message",
        code: None,
        detail: format!("event {}: {reason}", event.event_id),
        class: super::ErrorClass::Event,
        unreachable: false,
    }
}

/// Rejects a body the broker would refuse, before it can poison a whole batch.
pub fn check_size(event: &OutboxEvent, limit: usize) -> Result<(), PublishError> {
    if event.payload.len() > limit {
        return Err(PublishError::BodyTooLarge { event_id: event.event_id.clone(), size: event.payload.len(), limit });
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;

    use bytes::Bytes;

    use super::*;

    /// An event of key "k" on topic "t" with a small JSON body.
    pub(crate) fn event(id: u64) -> OutboxEvent {
        OutboxEvent { payload: Bytes::from(format!("{{\"n\":{id}}}")), ..OutboxEvent::for_test(id) }
    }

    /// A message's properties, as plain strings.
    pub(crate) fn property_map(message: &Message) -> HashMap<String, String> {
        message.properties().as_map().iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_message_carries_its_id_keys_properties_and_body() {
        let message = to_message(&event(1), Some("7"), "ID1").expect("message");
        let properties = property_map(&message);
        let property = |name: &str| properties.get(name).map(String::as_str);
        assert_eq!(property(MessageConst::PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), Some("ID1"));
        assert_eq!(property(MessageConst::PROPERTY_KEYS), Some("e1"));
        assert_eq!(property(PROPERTY_EVENT_ID), Some("e1"));
        assert_eq!(property(PROPERTY_BIZ_KEY), Some("k"));
        assert_eq!(property(PROPERTY_RELAY_TERM), Some("7"));
        assert!(message.is_wait_store_msg_ok());
        assert_eq!(message.topic().as_str(), "t");
        assert_eq!(message.get_body(), Some(&event(1).payload));
    }
}
