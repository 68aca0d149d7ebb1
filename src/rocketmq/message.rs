//! The wire form of an outbox event: KEYS = event_id (indexed by the broker, so
//! `queryMsgByKey` finds it), user properties `event_id`, `biz_key` and (from the
//! relay) `relay_term`, the leader term that sent it; body = payload.
//!
//! A batch of several events is encoded once, when it is prepared (see `batch`): a
//! retry sends the same bytes, and the client neither copies, checks nor encodes
//! every message again on every attempt.

use rocketmq_model::common::message::message_batch::MessageBatch;
use rocketmq_model::common::message::message_builder::MessageBuilder;
use rocketmq_model::common::message::message_client_id_setter::MessageClientIDSetter;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_model::common::message::{MessageConst, MessageTrait};

use outbox_kit::wire::{PROPERTY_BIZ_KEY, PROPERTY_EVENT_ID, PROPERTY_RELAY_TERM};

use super::batch::batch_of;
use super::PublishError;
use crate::event::OutboxEvent;

/// A batch ready to send, with the message id of each message fixed in advance.
///
/// The id is the producer's unique id (the `UNIQ_KEY` property consumers see as the
/// message id). It is assigned here, once, so every retry of the batch carries the
/// same ids and the id stored as `msg_id` is exactly what consumers and
/// `queryMsgById` see (the broker's answer to a batch names the batch, not its
/// messages).
#[derive(Clone)]
pub struct Prepared {
    pub(crate) wire: Wire,
    pub msg_ids: Vec<String>,
}

/// What goes to the broker for a prepared batch.
#[derive(Clone)]
pub(crate) enum Wire {
    /// One event, as a plain message: a batch of one would only wrap it.
    Single(Message),
    /// Several events of one topic, encoded as the body of one batch message.
    Batch(MessageBatch),
}

/// Prepares `events` (all of one topic), sent under leader `term` when there is
/// one: assigns their ids and builds their message, or their batch when there are
/// several.
pub fn prepare<'a>(
    events: impl IntoIterator<Item = &'a OutboxEvent>,
    term: Option<u64>,
) -> Result<Prepared, PublishError> {
    let events: Vec<&OutboxEvent> = events.into_iter().collect();
    let term = term.map(|term| term.to_string());
    let msg_ids: Vec<String> = events.iter().map(|_| MessageClientIDSetter::create_uniq_id()).collect();
    let wire = match events.as_slice() {
        [event] => Wire::Single(to_message(event, term.as_deref(), &msg_ids[0])?),
        _ => Wire::Batch(batch_of(&events, term.as_deref(), &msg_ids)?),
    };
    Ok(Prepared { wire, msg_ids })
}

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
    fn one_event_is_a_plain_message_with_its_id_keys_and_properties() {
        let prepared = prepare([&event(1)], Some(7)).expect("prepared");
        let Wire::Single(message) = &prepared.wire else { panic!("a batch of one event") };
        assert_eq!(MessageClientIDSetter::get_uniq_id(message).map(|id| id.to_string()), Some(prepared.msg_ids[0].clone()));
        let properties = property_map(message);
        let property = |name: &str| properties.get(name).map(String::as_str);
        assert_eq!(property(MessageConst::PROPERTY_KEYS), Some("e1"));
        assert_eq!(property(PROPERTY_EVENT_ID), Some("e1"));
        assert_eq!(property(PROPERTY_BIZ_KEY), Some("k"));
        assert_eq!(property(PROPERTY_RELAY_TERM), Some("7"));
        assert!(message.is_wait_store_msg_ok());
        assert_eq!(message.get_body(), Some(&event(1).payload));
    }

    #[test]
    fn an_empty_payload_is_refused_as_an_event_the_broker_can_never_take() {
        let empty = OutboxEvent { payload: Bytes::new(), ..OutboxEvent::for_test(2) };
        for events in [vec![&empty], vec![&empty, &empty]] {
            let error = prepare(events, None).err().expect("refused");
            assert_eq!(error.class(), crate::rocketmq::ErrorClass::Event);
            assert!(error.to_string().contains("event e2: the payload is empty"), "{error}");
        }
    }
}
