//! The independent consumer: a plain RocketMQ push consumer of the run's topic, in a
//! fresh group from the first offset, that records every delivery with its queue,
//! offset, the sending relay's term and the broker's store time. It shares no logic
//! with the outbox kit's consumer (only the client runtime plumbing), so the verdict
//! does not rest on the code under test.

use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context;
use outbox_kit::wire::{PROPERTY_EVENT_ID, PROPERTY_RELAY_TERM};
use outbox_kit::{client_config, ClientHost};
use rocketmq_client_rust::{
    ClientResult, ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, DefaultMQPushConsumer, MQPushConsumer,
    MessageListenerConcurrently,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;

use crate::verdict::Received;

type Records = Arc<Mutex<Vec<Received>>>;

/// A started consumer and what it received so far.
pub(crate) struct Consumer {
    consumer: DefaultMQPushConsumer,
    host: ClientHost,
    records: Records,
}

impl Consumer {
    pub(crate) async fn start(namesrv: &str, topic: &str, group: &str) -> anyhow::Result<Self> {
        let host = ClientHost::start("chaos-consumer")?;
        let records = Records::default();
        let mut consumer = DefaultMQPushConsumer::builder(host.runtime())
            .client_config(client_config(namesrv))
            .name_server_addr(namesrv.to_owned())
            .consumer_group(group.to_owned())
            .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
            .build();
        let started = async {
            consumer.subscribe(topic, "*").await?;
            consumer.register_message_listener_concurrently(Recorder(Arc::clone(&records)));
            consumer.start().await
        };
        if let Err(error) = started.await {
            host.shutdown().await;
            return Err(anyhow::anyhow!("{error}")).context(format!("start a consumer of {topic} at {namesrv}"));
        }
        Ok(Self { consumer, host, records })
    }

    /// Every delivery so far.
    pub(crate) fn received(&self) -> Vec<Received> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub(crate) async fn shutdown(mut self) {
        self.consumer.shutdown().await;
        self.host.shutdown().await;
    }
}

struct Recorder(Records);

impl MessageListenerConcurrently for Recorder {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        _context: &ConsumeConcurrentlyContext,
    ) -> ClientResult<ConsumeConcurrentlyStatus> {
        let received = msgs.iter().map(|m| received(m));
        self.0.lock().unwrap_or_else(PoisonError::into_inner).extend(received);
        Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
    }
}

fn received(message: &MessageExt) -> Received {
    let property = |key: &str| message.properties().iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v.to_string());
    Received {
        event_id: property(PROPERTY_EVENT_ID).unwrap_or_default(),
        queue_id: message.queue_id(),
        queue_offset: message.queue_offset(),
        term: property(PROPERTY_RELAY_TERM).and_then(|t| t.parse().ok()),
        stored_ms: message.store_timestamp(),
        redelivered: message.reconsume_times() > 0,
    }
}
