//! The wire form of an outbox event: KEYS = event_id (indexed by the broker, so
//! `queryMsgByKey` finds it), user properties `event_id`, `biz_key` and (from the
//! relay) `relay_term`, the leader term that sent it; body = payload.

use rocketmq_model::common::message::message_builder::MessageBuilder;
use rocketmq_model::common::message::message_client_id_setter::MessageClientIDSetter;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_model::common::message::MessageTrait;

use outbox_kit::wire::{PROPERTY_BIZ_KEY, PROPERTY_EVENT_ID, PROPERTY_RELAY_TERM};

use super::PublishError;
use crate::event::OutboxEvent;

/// A batch ready to send, with the message id of each message fixed in advance.
///
/// The id is the producer's unique id (the `UNIQ_KEY` property consumers see as the
/// message id). It is assigned here, once, so every retry of the batch carries the
/// same ids and the id stored as `msg_id` is exactly what consumers and
/// `queryMsgById` see (a batch's SendResult names the batch, not its messages).
#[derive(Clone)]
pub struct Prepared {
    pub messages: Vec<Message>,
    pub msg_ids: Vec<String>,
}

/// Builds the messages for `events`, sent under leader `term` when there is one, and
/// assigns their ids.
pub fn prepare<'a>(
    events: impl IntoIterator<Item = &'a OutboxEvent>,
    term: Option<u64>,
) -> Result<Prepared, PublishError> {
    let mut messages = Vec::new();
    let mut msg_ids = Vec::new();
    for event in events {
        let mut message = to_message(event)?;
        if let Some(term) = term {
            message.put_property(PROPERTY_RELAY_TERM.into(), term.to_string().into());
        }
        MessageClientIDSetter::set_uniq_id(&mut message);
        let id = MessageClientIDSetter::get_uniq_id(&message).map(|id| id.to_string()).unwrap_or_default();
        msg_ids.push(id);
        messages.push(message);
    }
    Ok(Prepared { messages, msg_ids })
}

/// Builds the message for `event`.
pub fn to_message(event: &OutboxEvent) -> Result<Message, PublishError> {
    MessageBuilder::new()
        .topic(event.topic.as_str())
        .key(event.event_id.as_str())
        .body(event.payload.clone())
        .raw_property(PROPERTY_EVENT_ID, event.event_id.as_str())
        .and_then(|b| b.raw_property(PROPERTY_BIZ_KEY, event.biz_key.as_str()))
        .and_then(MessageBuilder::build)
        .map_err(|e| PublishError::Client {
            operation: "build message",
            code: None,
            detail: format!("event {}: {e}", event.event_id),
            class: super::ErrorClass::Event,
            unreachable: false,
        })
}

/// Rejects a body the broker would refuse, before it can poison a whole batch.
pub fn check_size(event: &OutboxEvent, limit: usize) -> Result<(), PublishError> {
    if event.payload.len() > limit {
        return Err(PublishError::BodyTooLarge { event_id: event.event_id.clone(), size: event.payload.len(), limit });
    }
    Ok(())
}
