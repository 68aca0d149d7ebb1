//! The wire form of an outbox event: KEYS = event_id (indexed by the broker, so
//! `queryMsgByKey` finds it), user properties `event_id`, `biz_key` and (from the
//! relay) `relay_term`, the leader term that sent it; body = payload.
//!
//! One event goes to the broker as a plain message: its payload as the request's
//! body and its properties encoded here; several go as one batch message (see
//! `batch`), with the same properties.

use bytes::BytesMut;
use cheetah_string::CheetahString;
use rocketmq_model::common::message::MessageConst;

use outbox_kit::wire::{PROPERTY_BIZ_KEY, PROPERTY_EVENT_ID, PROPERTY_RELAY_TERM};

use super::PublishError;
use crate::event::OutboxEvent;

/// The properties of `event`'s message with id `id`: KEYS (indexed by the broker),
/// the kit's event_id, biz_key and relay_term, and the wait for the store's answer.
pub(super) fn properties<'a>(
    event: &'a OutboxEvent,
    term: Option<&'a str>,
    id: &'a str,
) -> impl Iterator<Item = (&'static str, &'a str)> + Clone {
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

/// The bytes `pairs` take on the wire.
pub(super) fn encoded_len<'a>(pairs: impl Iterator<Item = (&'static str, &'a str)>) -> usize {
    pairs.map(|(name, value)| name.len() + NAME_VALUE_SEPARATOR.len() + value.len() + PROPERTY_SEPARATOR.len()).sum()
}

/// Between a property's name and its value (RocketMQ's `NAME_VALUE_SEPARATOR`).
const NAME_VALUE_SEPARATOR: &str = "\u{1}";
/// After a property's value (RocketMQ's `PROPERTY_SEPARATOR`).
const PROPERTY_SEPARATOR: &str = "\u{2}";

/// Where properties are written: a request header's text or a batch's body. Both
/// append without a check that can fail.
pub(super) trait PropertiesOut {
    fn append(&mut self, text: &str);
}

impl PropertiesOut for String {
    fn append(&mut self, text: &str) {
        self.push_str(text);
    }
}

impl PropertiesOut for BytesMut {
    fn append(&mut self, text: &str) {
        self.extend_from_slice(text.as_bytes());
    }
}

/// Appends `pairs` to `out` the way RocketMQ writes properties: `name 0x01 value 0x02`.
pub(super) fn write_properties<'a>(pairs: impl Iterator<Item = (&'static str, &'a str)>, out: &mut impl PropertiesOut) {
    for (name, value) in pairs {
        out.append(name);
        out.append(NAME_VALUE_SEPARATOR);
        out.append(value);
        out.append(PROPERTY_SEPARATOR);
    }
}

/// `pairs` as the properties field of a request header.
pub(super) fn properties_text<'a>(pairs: impl Iterator<Item = (&'static str, &'a str)> + Clone) -> CheetahString {
    let mut text = String::with_capacity(encoded_len(pairs.clone()));
    write_properties(pairs, &mut text);
    CheetahString::from_string(text)
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
    use rocketmq_model::common::message::message_builder::MessageBuilder;
    use rocketmq_model::common::message::message_single::Message;
    use rocketmq_model::common::message::MessageTrait;
    use rocketmq_protocol::common::message::message_decoder::string_to_message_properties;

    use super::*;

    /// An event of key "k" on topic "t" with a small JSON body.
    pub(crate) fn event(id: u64) -> OutboxEvent {
        OutboxEvent { payload: Bytes::from(format!("{{\"n\":{id}}}")), ..OutboxEvent::for_test(id) }
    }

    /// The message the RocketMQ client itself would build for `event` with id `id`.
    pub(crate) fn client_message(event: &OutboxEvent, term: Option<&str>, id: &str) -> Message {
        let mut message =
            MessageBuilder::new().topic(event.topic.as_str()).body(event.payload.clone()).build().expect("message");
        for (name, value) in properties(event, term, id) {
            message.put_property(name.into(), value.into());
        }
        message
    }

    /// A message's properties, as plain strings.
    pub(crate) fn property_map(message: &Message) -> HashMap<String, String> {
        message.properties().as_map().iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_properties_text_decodes_to_the_id_keys_and_properties() {
        let text = properties_text(properties(&event(1), Some("7"), "ID1"));
        let decoded = string_to_message_properties(Some(&text));
        let property = |name: &str| decoded.get(name).map(|value| value.as_str());
        assert_eq!(property(MessageConst::PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), Some("ID1"));
        assert_eq!(property(MessageConst::PROPERTY_KEYS), Some("e1"));
        assert_eq!(property(PROPERTY_EVENT_ID), Some("e1"));
        assert_eq!(property(PROPERTY_BIZ_KEY), Some("k"));
        assert_eq!(property(PROPERTY_RELAY_TERM), Some("7"));
        assert_eq!(property(MessageConst::PROPERTY_WAIT_STORE_MSG_OK), Some("true"));
        assert_eq!(decoded.len(), 6);
        assert_eq!(text.len(), encoded_len(properties(&event(1), Some("7"), "ID1")));
    }
}
