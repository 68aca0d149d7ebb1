//! Several events of one topic as the body of one batch message, encoded straight from
//! the events in the layout the client's own batch encoder writes, so that no message,
//! property map or property string is built per event.
//!
//! Per message: total size, magic code 0, body CRC 0 and flag 0 (four bytes each), the
//! body with its four-byte length, then the properties with their two-byte length, as
//! `name 0x01 value 0x02` pairs. The broker splits the body into its messages.

use bytes::{BufMut, Bytes, BytesMut};

use super::message::{check_body, illegal, Properties};
use super::PublishError;
use crate::event::OutboxEvent;

/// Total size, magic code, body CRC, flag and body length: four bytes each.
const FIXED_FIELDS: usize = 20;
/// The properties' length.
const PROPERTIES_LENGTH_FIELD: usize = 2;

/// The body of the batch message that carries `events` (all of `topic`), with message
/// ids `ids`, sent under `term`.
pub(super) fn batch_body(
    topic: &str,
    events: &[&OutboxEvent],
    term: Option<&str>,
    ids: &[String],
) -> Result<Bytes, PublishError> {
    let messages = events
        .iter()
        .zip(ids)
        .map(|(event, id)| {
            if event.topic != topic {
                return Err(illegal(event, format!("its topic {} is not the batch's, {topic}", event.topic)));
            }
            if event.is_timed() {
                return Err(illegal(
                    event,
                    "a timed event goes alone: the broker reads no delivery time in a batch".into(),
                ));
            }
            check_body(event)?;
            Properties::of(event, term, id)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let size = events
        .iter()
        .zip(&messages)
        .map(|(event, properties)| message_len(event.payload.len(), properties.encoded_len()))
        .sum();
    let mut body = BytesMut::with_capacity(size);
    for (event, properties) in events.iter().zip(&messages) {
        encode(event, properties, &mut body)?;
    }
    Ok(body.freeze())
}

/// The bytes a message takes in the batch, from its payload's and properties' bytes.
fn message_len(payload_len: usize, properties_len: usize) -> usize {
    FIXED_FIELDS + payload_len + PROPERTIES_LENGTH_FIELD + properties_len
}

/// Appends `event`'s message, with `properties` (which fit the two-byte length
/// field: [`Properties::of`] refuses more), to `body`.
fn encode(event: &OutboxEvent, properties: &Properties<'_>, body: &mut BytesMut) -> Result<(), PublishError> {
    let properties_len = properties.encoded_len();
    let properties_field = i16::try_from(properties_len)
        .map_err(|_| illegal(event, format!("its properties take {properties_len} bytes, over 32,767")))?;
    let over_2_gib = |_| illegal(event, format!("its payload of {} bytes is over 2 GiB", event.payload.len()));
    let total = i32::try_from(message_len(event.payload.len(), properties_len)).map_err(over_2_gib)?;
    let payload_len = i32::try_from(event.payload.len()).map_err(over_2_gib)?;
    body.put_i32(total);
    body.put_i32(0);
    body.put_u32(0);
    body.put_i32(0);
    body.put_i32(payload_len);
    body.put_slice(&event.payload);
    body.put_i16(properties_field);
    properties.write(body);
    Ok(())
}

#[cfg(test)]
mod tests {
    use rocketmq_model::common::message::message_client_id_setter::MessageClientIDSetter;
    use rocketmq_model::common::message::message_single::Message;
    use rocketmq_model::common::message::MessageTrait;
    use rocketmq_protocol::common::message::message_decoder::{decode_messages, encode_messages};

    use super::*;
    use crate::rocketmq::message::tests::{client_message, event, property_map};

    fn ids(count: usize) -> Vec<String> {
        (0..count).map(|_| crate::rocketmq::msg_id::next()).collect()
    }

    #[test]
    fn a_batch_body_decodes_to_what_the_client_encodes_for_the_same_messages() {
        let events = [event(1), event(2), event(3)];
        let ids = ids(3);
        let mut ours = batch_body("t", &events.iter().collect::<Vec<_>>(), Some("7"), &ids).expect("batch");
        let messages: Vec<Message> =
            events.iter().zip(&ids).map(|(event, id)| client_message(event, Some("7"), id)).collect();
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
    fn events_of_another_topic_are_refused_not_sent_to_the_first_ones() {
        let other = OutboxEvent { topic: "u".into(), ..event(2) };
        let error = batch_body("t", &[&event(1), &other], None, &ids(2)).err().expect("refused");
        assert!(error.to_string().contains("event e2: its topic u is not the batch's, t"), "{error}");
    }
}
