//! The wire form of an outbox event: KEYS = event_id (indexed by the broker, so
//! `queryMsgByKey` finds it), user properties `event_id`, `biz_key` and (from the
//! relay) `relay_term`, the leader term that sent it; body = payload.
//!
//! A batch of several events is encoded once, when it is prepared, straight from the
//! events into the body of one batch message, in the layout the client's own batch
//! encoder writes: a retry sends the same bytes, and no message, property map or
//! property string is built per event, nor copied, checked and encoded again by the
//! client on every attempt.

use bytes::{BufMut, Bytes, BytesMut};
use rocketmq_model::common::message::message_batch::MessageBatch;
use rocketmq_model::common::message::message_builder::MessageBuilder;
use rocketmq_model::common::message::message_client_id_setter::MessageClientIDSetter;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_model::common::message::{MessageConst, MessageTrait};
use rocketmq_protocol::common::message::message_decoder::{NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR};

use outbox_kit::wire::{PROPERTY_BIZ_KEY, PROPERTY_EVENT_ID, PROPERTY_RELAY_TERM};

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

/// Per-message header of the batch layout: total size, magic code, body CRC, flag
/// and body length, four bytes each.
const BATCH_MESSAGE_HEADER: usize = 20;

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
fn properties<'a>(
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
fn to_message(event: &OutboxEvent, term: Option<&str>, id: &str) -> Result<Message, PublishError> {
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

/// `events` as one batch message, under an id of its own (each message inside keeps
/// its own), answered only once they are stored.
fn batch_of(events: &[&OutboxEvent], term: Option<&str>, ids: &[String]) -> Result<MessageBatch, PublishError> {
    let mut batch = MessageBatch::default();
    if let Some(first) = events.first() {
        batch.set_topic(first.topic.as_str().into());
    }
    batch.set_wait_store_msg_ok(true);
    MessageClientIDSetter::set_uniq_id(&mut batch);
    batch.set_body(encode_batch(events, term, ids)?);
    Ok(batch)
}

/// The body of a batch message: each event as the client's batch encoder writes a
/// message (total size, magic code 0, body CRC 0, flag 0, body length, body,
/// properties length, properties as `name 0x01 value 0x02` pairs).
fn encode_batch(events: &[&OutboxEvent], term: Option<&str>, ids: &[String]) -> Result<Bytes, PublishError> {
    let mut body = BytesMut::with_capacity(events.iter().map(|e| e.payload.len() + 256).sum());
    for (event, id) in events.iter().zip(ids) {
        check_body(event)?;
        let too_large = || illegal(event, "its message is over 2 GiB or its properties over 32 KiB".to_owned());
        let properties_len: usize = properties(event, term, id).map(|(name, value)| name.len() + value.len() + 2).sum();
        let properties_len = i16::try_from(properties_len).map_err(|_| too_large())?;
        let payload_len = i32::try_from(event.payload.len()).map_err(|_| too_large())?;
        let total = payload_len.checked_add((BATCH_MESSAGE_HEADER + 2) as i32 + i32::from(properties_len));
        body.put_i32(total.ok_or_else(too_large)?);
        body.put_i32(0);
        body.put_u32(0);
        body.put_i32(0);
        body.put_i32(payload_len);
        body.put_slice(&event.payload);
        body.put_i16(properties_len);
        for (name, value) in properties(event, term, id) {
            body.put_slice(name.as_bytes());
            body.put_u8(NAME_VALUE_SEPARATOR as u8);
            body.put_slice(value.as_bytes());
            body.put_u8(PROPERTY_SEPARATOR as u8);
        }
    }
    Ok(body.freeze())
}

/// Refuses an empty payload: the broker takes no message without a body (the client
/// checks single messages for it, not those inside a batch).
fn check_body(event: &OutboxEvent) -> Result<(), PublishError> {
    if event.payload.is_empty() {
        return Err(illegal(event, "the payload is empty and a message needs a body: write a payload".to_owned()));
    }
    Ok(())
}

/// An event the broker can never take, for `reason`.
fn illegal(event: &OutboxEvent, reason: String) -> PublishError {
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
mod tests {
    use std::collections::HashMap;

    use bytes::Bytes;
    use rocketmq_protocol::common::message::message_decoder::{decode_messages, encode_messages};

    use super::*;

    fn event(id: u64) -> OutboxEvent {
        OutboxEvent { payload: Bytes::from(format!("{{\"n\":{id}}}")), ..OutboxEvent::for_test(id) }
    }

    fn property_map(message: &Message) -> HashMap<String, String> {
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
    fn a_batch_body_decodes_to_what_the_client_encodes_for_the_same_messages() {
        let events = [event(1), event(2), event(3)];
        let prepared = prepare(&events, Some(7)).expect("prepared");
        let Wire::Batch(batch) = &prepared.wire else { panic!("a single message for three events") };
        let messages: Vec<Message> = events
            .iter()
            .zip(&prepared.msg_ids)
            .map(|(event, id)| to_message(event, Some("7"), id).expect("message"))
            .collect();
        let mut ours = batch.get_body().cloned().expect("an encoded body");
        let mut clients = encode_messages(&messages);
        assert_eq!(ours.len(), clients.len());

        let (ours, clients) = (decode_messages(&mut ours), decode_messages(&mut clients));
        assert_eq!(ours.len(), 3);
        for ((mine, theirs), id) in ours.iter().zip(&clients).zip(&prepared.msg_ids) {
            assert_eq!(mine.get_body(), theirs.get_body());
            assert_eq!(mine.flag(), theirs.flag());
            assert_eq!(property_map(mine), property_map(theirs));
            assert_eq!(MessageClientIDSetter::get_uniq_id(mine).map(|i| i.to_string()).as_ref(), Some(id));
        }
    }

    #[test]
    fn a_batch_has_the_topic_the_wait_for_the_store_and_an_id_of_its_own() {
        let events = [event(1), event(2)];
        let prepared = prepare(&events, None).expect("prepared");
        let Wire::Batch(batch) = &prepared.wire else { panic!("a single message for two events") };
        assert_eq!(batch.topic().as_str(), "t");
        assert!(batch.is_wait_store_msg_ok());
        let batch_id = MessageClientIDSetter::get_uniq_id(batch).map(|id| id.to_string());
        assert!(batch_id.is_some_and(|id| !prepared.msg_ids.contains(&id)), "the batch has an id of its own");
        assert_ne!(prepared.msg_ids[0], prepared.msg_ids[1]);
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
