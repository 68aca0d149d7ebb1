//! A started RocketMQ producer that sends synchronous batches, prepared and encoded
//! in advance (see `prepared`), to one chosen queue.
//!
//! Queue choice is the caller's (the lanes route by `hash(biz_key) % queue_count`).
//! A send is one request of the relay's own (see `request`) to that queue's broker,
//! never retried by the client and never moved to another queue, which would break
//! per-key order; the client's producer keeps the routes and connections and serves
//! the admin calls. A send counts only when the broker answers SEND_OK; everything
//! else is a [`PublishError`]. With ACL credentials every request is signed by the
//! client's ACL hook (the secret key signs, it is never sent).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cheetah_string::CheetahString;
use rocketmq_client_rust::{AclClientRPCHook, ClientConfig, ClientRuntime, DefaultMQProducer, SessionCredentials};
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_queue::MessageQueue;

use super::request::{answer, send_request, Destination};
use super::{client_config, prepare, ClientHost, ErrorClass, Prepared, PublishError};
use crate::config::AclCredentials;
use crate::event::OutboxEvent;
use crate::time::unix_millis_now;

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
}

/// A started producer, with the client runtime it runs on when that is its own.
pub struct Producer {
    /// Its own client runtime, stopped with it; `None` on a runtime it shares.
    host: Option<ClientHost>,
    producer: DefaultMQProducer,
    /// The producer group every send request names.
    group: CheetahString,
    timeout_millis: u64,
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
            .send_msg_timeout(millis_u32(settings.send_timeout));
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
        let timeout_millis = crate::time::millis(settings.send_timeout);
        Ok(Self { host, producer, group: CheetahString::from_string(settings.group), timeout_millis })
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

    /// The names of the master brokers of `cluster`, sorted: every broker registers a
    /// topic named after its cluster, whose route lists them.
    pub async fn cluster_brokers(&self, cluster: &str) -> Result<Vec<String>, PublishError> {
        let queues = self.route_queues(cluster).await?;
        let brokers: std::collections::BTreeSet<String> = queues.iter().map(|q| q.broker_name().to_string()).collect();
        Ok(brokers.into_iter().collect())
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
        let batch = prepare(events, None)?;
        self.send(queue, &batch).await?;
        Ok(SendReceipt { msg_ids: batch.msg_ids })
    }

    /// Sends a prepared batch to `queue` (again, on a retry). `Ok` only on SEND_OK; the
    /// batch's message ids are then the ones the broker stored.
    ///
    /// The request is the relay's own (see `request`); the client's instance finds the
    /// queue's broker, connects, signs and waits for the answer.
    pub async fn send(&self, queue: &MessageQueue, batch: &Prepared) -> Result<(), PublishError> {
        self.send_within(queue, batch, Duration::from_millis(self.timeout_millis)).await
    }

    /// [`Producer::send`] that neither writes the request nor waits for its answer past
    /// `within` from now (a leader term's time left): finding the queue's broker (a
    /// route read may take seconds) counts against it, and [`PublishError::NoTimeLeft`]
    /// says nothing was written.
    pub async fn send_within(
        &self,
        queue: &MessageQueue,
        batch: &Prepared,
        within: Duration,
    ) -> Result<(), PublishError> {
        let started = std::time::Instant::now();
        let client = self
            .producer
            .default_mq_producer_impl()
            .ok_or_else(not_started)?
            .get_mq_client_factory()
            .map_err(|e| PublishError::from_client("send", &e))?;
        let mut broker = client.get_broker_name_from_message_queue(queue).await;
        let mut address = client.find_broker_address_in_publish(&broker);
        if address.is_none() {
            // A queue can be sent to before this client has read its route.
            client.update_topic_route_info_from_name_server_topic(&batch.topic).await;
            broker = client.get_broker_name_from_message_queue(queue).await;
            address = client.find_broker_address_in_publish(&broker);
        }
        let address = address.ok_or_else(|| no_address(&broker, &batch.topic))?;
        debug_assert_eq!(queue.topic_str(), batch.topic.as_str(), "a batch goes to a queue of its own topic");
        let destination = Destination { group: &self.group, broker: &broker, queue_id: queue.queue_id() };
        let left = crate::time::millis(within.saturating_sub(started.elapsed())).min(self.timeout_millis);
        if left == 0 {
            return Err(PublishError::NoTimeLeft);
        }
        let response = client
            .get_mq_client_api_impl()
            .map_err(|e| PublishError::from_client("send", &e))?
            .invoke(&address, send_request(batch, &destination), left)
            .await
            .map_err(|e| PublishError::from_client("send", &e))?;
        answer(response.code(), response.remark().map(|remark| remark.as_str()), &address)
    }

    /// Reads `topic`'s route and asks `broker` (through its first queue there) for that
    /// queue's offset: proof that this producer reaches it, without storing anything.
    pub async fn reach(&self, topic: &str, broker: &str) -> Result<(), PublishError> {
        let queues = self.live_queues(topic).await?;
        let queue = queues
            .iter()
            .find(|queue| queue.broker_name().as_str() == broker)
            .ok_or_else(|| no_address(&CheetahString::from(broker), &CheetahString::from(topic)))?;
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
        let end = unix_millis_now().saturating_add(60_000);
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
pub(super) const DEFAULT_QUEUE_COUNT: u32 = 8;

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

fn not_started() -> PublishError {
    PublishError::Client {
        operation: "send",
        code: None,
        detail: "the producer was never started".to_owned(),
        class: ErrorClass::Unknown,
        unreachable: false,
    }
}

/// The NameServer's route names no address for the queue's broker: it is down or
/// not registered, which later sends may find changed.
fn no_address(broker: &CheetahString, topic: &CheetahString) -> PublishError {
    PublishError::Client {
        operation: "send",
        code: None,
        detail: format!("the route of topic {topic} has no master address for broker {broker}: is the broker running and registered with the NameServer, and does the NameServer answer?"),
        class: ErrorClass::Outage,
        unreachable: false,
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

    #[test]
    fn a_broker_without_an_address_is_an_outage_that_names_it() {
        let error = no_address(&CheetahString::from_static_str("broker-a"), &CheetahString::from_static_str("orders"));
        assert_eq!(error.class(), ErrorClass::Outage);
        assert!(!error.unreachable());
        assert!(error.to_string().contains("orders has no master address for broker broker-a"), "{error}");
    }
}
