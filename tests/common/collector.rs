//! A real push consumer that records every message it receives, for assertions.

use std::sync::{Arc, Mutex};

use outbox_relay::publish::rocketmq::{client_config, ClientHost, PROPERTY_BIZ_KEY, PROPERTY_EVENT_ID};
use rocketmq_client_rust::{
    ClientResult, ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, DefaultMQPushConsumer, MQPushConsumer,
    MessageListenerConcurrently,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;

/// One delivered message, reduced to what the tests compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub keys: String,
    pub event_id: String,
    pub biz_key: String,
    pub body: Vec<u8>,
    pub queue_id: i32,
    /// Position in the queue: the broker's storage order.
    pub queue_offset: i64,
    /// Above 0 when the consumer got it back through its retry topic: queue id and
    /// offset are then the retry queue's, not where the relay stored it.
    pub reconsume_times: i32,
}

/// A started consumer and the messages it has seen so far.
pub struct Collector {
    consumer: DefaultMQPushConsumer,
    host: ClientHost,
    seen: Arc<Mutex<Vec<Received>>>,
}

struct Recorder(Arc<Mutex<Vec<Received>>>);

impl MessageListenerConcurrently for Recorder {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        _context: &ConsumeConcurrentlyContext,
    ) -> ClientResult<ConsumeConcurrentlyStatus> {
        let property = |m: &MessageExt, key: &str| {
            m.properties().iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v.to_string()).unwrap_or_default()
        };
        let mut seen = self.0.lock().expect("collector lock");
        for m in msgs {
            seen.push(Received {
                keys: property(m, "KEYS"),
                event_id: property(m, PROPERTY_EVENT_ID),
                biz_key: property(m, PROPERTY_BIZ_KEY),
                body: m.body().map(|b| b.to_vec()).unwrap_or_default(),
                queue_id: m.queue_id(),
                queue_offset: m.queue_offset(),
                reconsume_times: m.reconsume_times(),
            });
        }
        Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
    }
}

impl Collector {
    /// Subscribes a fresh consumer group to `topic`, from messages stored since a
    /// minute before now (earlier tests' messages on the shared topic are skipped).
    pub async fn start(namesrv: &str, topic: &str, group: &str) -> Self {
        let since = (chrono::Local::now() - chrono::Duration::seconds(60)).format("%Y%m%d%H%M%S").to_string();
        let host = ClientHost::start("test-consumer").expect("client runtime");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut consumer = DefaultMQPushConsumer::builder(host.runtime())
            .client_config(client_config(namesrv))
            .name_server_addr(namesrv.to_owned())
            .consumer_group(group.to_owned())
            .consume_from_where(ConsumeFromWhere::ConsumeFromTimestamp)
            .consume_timestamp(since)
            .build();
        consumer.subscribe(topic, "*").await.expect("subscribe");
        consumer.register_message_listener_concurrently(Recorder(Arc::clone(&seen)));
        consumer.start().await.expect("consumer start");
        Collector { consumer, host, seen }
    }

    /// Everything received so far whose event_id satisfies `keep`.
    pub fn received(&self, keep: impl Fn(&str) -> bool) -> Vec<Received> {
        self.seen.lock().expect("collector lock").iter().filter(|r| keep(&r.event_id)).cloned().collect()
    }

    pub async fn shutdown(mut self) {
        self.consumer.shutdown().await;
        self.host.shutdown().await;
    }
}
