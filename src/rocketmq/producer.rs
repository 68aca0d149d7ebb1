//! A started RocketMQ producer that sends synchronous batches, prepared and encoded
//! in advance (see `prepared`), to one chosen queue.
//!
//! Queue choice is the caller's (the lanes route by `hash(biz_key) % queue_count`),
//! so the client's own retries to "another queue" are turned off: a retry to another
//! queue would break per-key order. A send counts only when the broker answers
//! SEND_OK; everything else is a [`PublishError`]. With ACL credentials every request
//! is signed by the client's ACL hook (the secret key signs, it is never sent).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rocketmq_client_rust::{AclClientRPCHook, ClientConfig, ClientRuntime, DefaultMQProducer, SessionCredentials};
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_queue::MessageQueue;
use rocketmq_model::result::SendStatus;

use super::prepared::Wire;
use super::{client_config, prepare, ClientHost, Prepared, PublishError};
use crate::config::AclCredentials;
use crate::event::OutboxEvent;

/// What the producer needs to connect.
#[derive(Debug, Clone)]
pub struct ProducerSettings {
    /// NameServer list, `host:port;host:port`.
    pub namesrv: String,
    pub group: String,
    pub send_timeout: Duration,
}

/// Proof of a SEND_OK: the message ids (each message's `UNIQ_KEY`, fixed before the
/// first attempt), one per event in send order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendReceipt {
    pub msg_ids: Vec<String>,
    pub queue_offset: u64,
}

/// A started producer, with the client runtime it runs on when that is its own.
pub struct Producer {
    /// Its own client runtime, stopped with it; `None` on a runtime it shares.
    host: Option<ClientHost>,
    producer: DefaultMQProducer,
    settings: ProducerSettings,
}

impl Producer {
    /// Starts a producer without ACL credentials; fails with the NameServer address
    /// when it cannot.
    pub async fn start(settings: ProducerSettings) -> Result<Self, PublishError> {
        Self::start_with(settings, None).await
    }

    /// Starts a producer, on a client runtime of its own, that signs its requests
    /// with `acl` when given.
    pub async fn start_with(settings: ProducerSettings, acl: Option<&AclCredentials>) -> Result<Self, PublishError> {
        let host = ClientHost::start("rocketmq-producer")?;
        let client = host.runtime();
        Self::start_in(Some(host), client, settings, acl).await
    }

    /// Starts a producer on `client`, a client runtime it shares (and does not stop).
    pub async fn start_on(
        client: Arc<ClientRuntime>,
        settings: ProducerSettings,
        acl: Option<&AclCredentials>,
    ) -> Result<Self, PublishError> {
        Self::start_in(None, client, settings, acl).await
    }

    async fn start_in(
        host: Option<ClientHost>,
        client: Arc<ClientRuntime>,
        settings: ProducerSettings,
        acl: Option<&AclCredentials>,
    ) -> Result<Self, PublishError> {
        let builder = DefaultMQProducer::builder(client)
            .client_config(producer_config(client_config(&settings.namesrv)))
            .producer_group(settings.group.clone())
            .name_server_addr(settings.namesrv.clone())
            .send_msg_timeout(millis_u32(settings.send_timeout))
            .retry_times_when_send_failed(0)
            .retry_another_broker_when_not_store_ok(false)
            // Batches are never compressed; single messages are not either, so every
            // consumer sees the bodies the way the application wrote them.
            .compress_msg_body_over_howmuch(u32::MAX);
        let builder = match acl {
            Some(acl) => builder.rpc_hook(Arc::new(AclClientRPCHook::new(SessionCredentials::with_keys(
                acl.access_key.as_str(),
                acl.secret_key.expose(),
            )))),
            None => builder,
        };
        let mut producer = builder.build();
        if let Err(e) = producer.start().await {
            if let Some(host) = host {
                host.shutdown().await;
            }
            return Err(PublishError::from_client("start producer", &e));
        }
        Ok(Self { host, producer, settings })
    }

    /// The topic's writable queues in a stable order (broker name, queue id), checked
    /// against the pinned count: index `i` is the queue that `hash % count == i` goes to.
    pub async fn pinned_queues(&self, topic: &str, pinned: u32) -> Result<Vec<MessageQueue>, PublishError> {
        let queues = self.route_queues(topic).await.map_err(|e| missing_topic_or(topic, pinned, e))?;
        if queues.is_empty() {
            return Err(PublishError::TopicMissing { topic: topic.to_owned(), queue_count: pinned });
        }
        if queues.len() != pinned as usize {
            return Err(PublishError::QueueCountMismatch { topic: topic.to_owned(), pinned, live: queues.len() });
        }
        Ok(queues)
    }

    /// The topic's writable queues as the NameServer reports them now, sorted by
    /// (broker name, queue id). A topic without a route is `TopicMissing`.
    pub async fn live_queues(&self, topic: &str) -> Result<Vec<MessageQueue>, PublishError> {
        self.route_queues(topic).await.map_err(|e| missing_topic_or(topic, DEFAULT_QUEUE_COUNT, e))
    }

    async fn route_queues(&self, topic: &str) -> Result<Vec<MessageQueue>, PublishError> {
        // The client's admin calls take `&mut`; a clone shares the started producer.
        let mut queues = self
            .producer
            .clone()
            .fetch_publish_message_queues(topic)
            .await
            .map_err(|e| PublishError::from_client("fetch topic route", &e))?;
        queues.sort_by(|a, b| (a.broker_name(), a.queue_id()).cmp(&(b.broker_name(), b.queue_id())));
        Ok(queues)
    }

    /// Creates (or updates) `topic` with `queue_count` read and write queues on every
    /// broker that serves the existing topic `key`. Every broker registers a topic
    /// named after its cluster (e.g. `DefaultCluster`), which works even with
    /// `autoCreateTopicEnable = false`, when the usual `TBW102` key does not exist.
    pub async fn create_topic(&self, key: &str, topic: &str, queue_count: u32) -> Result<(), PublishError> {
        let count = i32::try_from(queue_count).unwrap_or(i32::MAX);
        self.producer
            .clone()
            .create_topic(key, topic, count, HashMap::new())
            .await
            .map_err(|e| PublishError::from_client("create topic", &e))
    }

    /// Sends `events` to `queue` in one synchronous send. `Ok` only on SEND_OK.
    pub async fn send_batch(&self, queue: &MessageQueue, events: &[OutboxEvent]) -> Result<SendReceipt, PublishError> {
        self.send(queue, &prepare(events, None)?).await
    }

    /// Sends a prepared batch to `queue` (again, on a retry). `Ok` only on SEND_OK.
    pub async fn send(&self, queue: &MessageQueue, batch: &Prepared) -> Result<SendReceipt, PublishError> {
        let timeout = u64::try_from(self.settings.send_timeout.as_millis()).unwrap_or(u64::MAX);
        let sent = match &batch.wire {
            Wire::Single(message) => {
                self.producer.send_to_queue_with_timeout(message.clone(), queue.clone(), timeout).await
            }
            Wire::Batch(encoded) => {
                self.producer.send_to_queue_with_timeout(encoded.clone(), queue.clone(), timeout).await
            }
        };
        let result = sent
            .map_err(|e| PublishError::from_client("send", &e))?
            .ok_or_else(|| PublishError::NotSendOk { status: "no result".to_owned() })?;
        if result.send_status != SendStatus::SendOk {
            return Err(PublishError::NotSendOk { status: result.send_status.to_string() });
        }
        Ok(SendReceipt { msg_ids: batch.msg_ids.clone(), queue_offset: result.queue_offset })
    }

    /// Reads `topic`'s route and asks the broker of its first queue for that queue's
    /// offset: proof that this producer reaches the broker, without storing anything.
    pub async fn reach(&self, topic: &str) -> Result<(), PublishError> {
        let queues = self.live_queues(topic).await?;
        let queue =
            queues.first().ok_or_else(|| PublishError::TopicMissing { topic: topic.to_owned(), queue_count: 0 })?;
        self.producer
            .clone()
            .max_offset(queue)
            .await
            .map_err(|e| PublishError::from_client("read queue max offset", &e))?;
        Ok(())
    }

    /// How many messages `topic` holds: the sum of its queues' max offsets (as long as
    /// the broker has not expired any). Operators compare it with SENT rows.
    pub async fn stored_count(&self, topic: &str) -> Result<i64, PublishError> {
        let mut total = 0;
        for queue in self.live_queues(topic).await? {
            total += self
                .producer
                .clone()
                .max_offset(&queue)
                .await
                .map_err(|e| PublishError::from_client("read queue max offset", &e))?;
        }
        Ok(total)
    }

    /// Messages of `topic` whose KEYS hold `key`, from the broker's key index (what
    /// `mqadmin queryMsgByKey` does): proof that an event reached the broker.
    pub async fn find_by_key(&self, topic: &str, key: &str) -> Result<Vec<MessageExt>, PublishError> {
        let end = u64::try_from(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis(),
        )
        .unwrap_or(u64::MAX)
        .saturating_add(60_000);
        let result = self
            .producer
            .clone()
            .query_message(topic, key, 32, 0, end)
            .await
            .map_err(|e| PublishError::from_client("query message by key", &e))?;
        Ok(result.message_list().clone())
    }

    /// Stops the producer, and its client runtime when that is its own.
    pub async fn shutdown(mut self) {
        self.producer.shutdown().await;
        if let Some(host) = self.host {
            host.shutdown().await;
        }
    }
}

/// `shared` with one pull worker instead of one per core (at most 8). The client
/// starts its consumers' pull service in a producer's client too, and the service's
/// loop and every pull worker wake whenever any request gives back its share of the
/// runtime's resource budget (three times per send). A producer pulls nothing and
/// keeps one worker; the client allows no fewer.
fn producer_config(shared: ClientConfig) -> ClientConfig {
    ClientConfig { pull_message_service_shards: 1, ..shared }
}

/// Queue count suggested when a topic that is not pinned in the config is missing.
const DEFAULT_QUEUE_COUNT: u32 = 8;

fn missing_topic_or(topic: &str, pinned: u32, error: PublishError) -> PublishError {
    match &error {
        PublishError::Client { detail, .. }
            if ["No route", "route info", "Can not find Message Queue"].iter().any(|m| detail.contains(m)) =>
        {
            PublishError::TopicMissing { topic: topic.to_owned(), queue_count: pinned }
        }
        _ => error,
    }
}

fn millis_u32(duration: Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_producer_keeps_one_pull_worker_and_the_shared_settings() {
        let shared = ClientConfig { pull_message_service_shards: 4, ..client_config("10.0.0.1:9876") };
        let config = producer_config(shared);
        assert_eq!(config.pull_message_service_shards, 1);
        assert_eq!(config.namesrv_addr.as_ref().map(|a| a.as_str()), Some("10.0.0.1:9876"));
    }
}
