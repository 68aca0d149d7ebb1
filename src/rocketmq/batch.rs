//! Several events of one topic as one batch message, encoded straight from the events
//! in the layout the client's own batch encoder writes, so that no message, property
//! map or property string is built per event.
//!
//! Per message: total size, magic code 0, body CRC 0 and flag 0 (four bytes each), the
//! body with its four-byte length, then the properties with their two-byte length, as
//! `name 0x01 value 0x02` pairs. The client sends a batch message as one request and
//! checks the whole of it (topic, size, a body); the broker splits it into its messages.

use bytes::{BufMut, BytesMut};
use rocketmq_model::common::message::message_batch::MessageBatch;
use rocketmq_model::common::message::message_client_id_setter::MessageClientIDSetter;
use rocketmq_model::common::message::MessageTrait;
use rocketmq_protocol::common::message::message_decoder::{NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR};

use super::message::{check_body, illegal, properties};
use super::PublishError;
use crate::event::OutboxEvent;

/// Total size, magic code, body CRC, flag and body length: four bytes each.
const FIXED_FIELDS: usize = 20;
/// The properties' length.
const PROPERTIES_LENGTH_FIELD: usize = 2;
/// The two separators around a property's value.
const SEPARATORS: usize = 2;

/// `events`, with message ids `ids` and sent under `term`, as one batch message under
/// an id of its own (each message inside keeps its own), answered only once stored.
pub(super) fn batch_of(
    events: &[&OutboxEvent],
    term: Option<&str>,
    ids: &[String],
) -> Result<MessageBatch, PublishError> {
    let topic = events.first().map_or("", |first| first.topic.as_str());
    let size = events
        .iter()
        .zip(ids)
        .map(|(event, id)| encoded_len(event.payload.len(), properties_len(event, term, id)))
        .sum();
    let mut body = BytesMut::with_capacity(size);
    for (event, id) in events.iter().zip(ids) {
        if event.topic != topic {
            return Err(illegal(event, format!("its topic {} is not the batch's, {topic}", event.topic)));
        }
        encode(event, term, id, &mut body)?;
    }
    let mut batch = MessageBatch::default();
    batch.set_topic(topic.into());
    batch.set_wait_store_msg_ok(true);
    MessageClientIDSetter::set_uniq_id(&mut batch);
    batch.set_body(body.freeze());
    Ok(batch)
}

/// The bytes of `event`'s properties, with id `id`.
fn properties_len(event: &OutboxEvent, term: Option<&str>, id: &str) -> usize {
    properties(event, term, id).map(|(name, value)| name.len() + value.len() + SEPARATORS).sum()
}

/// The bytes a message takes in the batch, from its payload's and properties' bytes.
fn encoded_len(payload_len: usize, properties_len: usize) -> usize {
    FIXED_FIELDS + payload_len + PROPERTIES_LENGTH_FIELD + properties_len
}

/// Appends `event`'s message, with id `id`, to `body`.
fn encode(event: &OutboxEvent, term: Option<&str>, id: &str, body: &mut BytesMut) -> Result<(), PublishError> {
    check_body(event)?;
    let properties_len = properties_len(event, term, id);
    let properties_field = i16::try_from(properties_len)
        .map_err(|_| illegal(event, format!("its properties take {properties_len} bytes, over 32,767")))?;
    let over_2_gib = |_| illegal(event, format!("its payload of {} bytes is over 2 GiB", event.payload.len()));
    let total = i32::try_from(encoded_len(event.payload.len(), properties_len)).map_err(over_2_gib)?;
    let payload_len = i32::try_from(event.payload.len()).map_err(over_2_gib)?;
    body.put_i32(total);
    body.put_i32(0);
    body.put_u32(0);
    body.put_i32(0);
    body.put_i32(payload_len);
    body.put_slice(&event.payload);
    body.put_i16(properties_field);
    for (name, value) in properties(event, term, id) {
        body.put_slice(name.as_bytes());
        body.put_u8(NAME_VALUE_SEPARATOR as u8);
        body.put_slice(value.as_bytes());
        body.put_u8(PROPERTY_SEPARATOR as u8);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use rocketmq_model::common::message::message_single::Message;
    use rocketmq_protocol::common::message::message_decoder::{decode_messages, encode_messages};

    use super::*;
    use crate::rocketmq::message::tests::{event, property_map};
    use crate::rocketmq::message::to_message;

    fn ids(count: usize) -> Vec<String> {
        (0..count).map(|_| MessageClientIDSetter::create_uniq_id()).collect()
    }

    #[test]
    fn a_batch_body_decodes_to_what_the_client_encodes_for_the_same_messages() {
        let events = [event(1), event(2), event(3)];
        let ids = ids(3);
        let batch = batch_of(&events.iter().collect::<Vec<_>>(), Some("7"), &ids).expect("batch");
        let messages: Vec<Message> =
            events.iter().zip(&ids).map(|(event, id)| to_message(event, Some("7"), id).expect("message")).collect();
        let mut ours = batch.get_body().cloned().expect("an encoded body");
        let mut clients = encode_messages(&messages);
        assert_eq!(ours.len(), clients.len());

        let (ours, clients) = (decode_messages(&mut ours), decode_messages(&mut clients));
        assert_eq!(ours.len(), 3);
        for ((mine, theirs), id) in ours.iter().zip(&clients).zip(&ids) {
            assert_eq!(mine.get_body(), theirs.get_body());
            assert_eq!(mine.flag(), theirs.flag());
            assert_eq!(property_map(mine), property_map(theirs));
            assert_eq!(MessageClientIDSetter::get_uniq_id(mine).map(|i| i.to_string()).as_ref(), Some(id));
        }
    }

    #[test]
    fn a_batch_has_the_topic_the_wait_for_the_store_and_an_id_of_its_own() {
        let events = [event(1), event(2)];
        let ids = ids(2);
        let batch = batch_of(&events.iter().collect::<Vec<_>>(), None, &ids).expect("batch");
        assert_eq!(batch.topic().as_str(), "t");
        assert!(batch.is_wait_store_msg_ok());
        let batch_id = MessageClientIDSetter::get_uniq_id(&batch).map(|id| id.to_string());
        assert!(batch_id.is_some_and(|id| !ids.contains(&id)), "the batch has an id of its own");
    }

    #[test]
    fn events_of_another_topic_are_refused_not_sent_to_the_first_ones() {
        let other = OutboxEvent { topic: "u".into(), ..event(2) };
        let error = batch_of(&[&event(1), &other], None, &ids(2)).err().expect("refused");
        assert!(error.to_string().contains("event e2: its topic u is not the batch's, t"), "{error}");
    }
}
