//! Operator actions on the broker: creating a topic with a pinned queue count, a
//! round-trip test send to every broker (and, when asked, a look-up of it by key),
//! and finding messages by key. They reach the cluster through a [`NameServer`],
//! signing with the relay's ACL keys where the brokers enforce ACL. `scripts/stack`
//! uses them to know the brokers are really ready.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use rocketmq_model::common::message::message_queue::MessageQueue;
use serde::Serialize;

use crate::config::AclCredentials;
use crate::event::OutboxEvent;
use crate::rocketmq::{Producer, ProducerSettings, PublishError};

/// Where the cluster is, and how requests to it are signed.
#[derive(Debug, Clone, Copy)]
pub struct NameServer<'a> {
    pub address: &'a str,
    /// The ACL keys (`rocketmq.access_key` / `secret_key`) of brokers with `aclEnable`.
    pub acl: Option<&'a AclCredentials>,
}

impl<'a> NameServer<'a> {
    /// A NameServer whose brokers enforce no ACL.
    pub fn unsigned(address: &'a str) -> Self {
        Self { address, acl: None }
    }

    async fn producer(&self) -> Result<Producer, PublishError> {
        Producer::start_with(settings(self.address), self.acl).await
    }
}

/// How long a new topic may take to appear in the NameServer's route table.
const ROUTE_DEADLINE: Duration = Duration::from_secs(30);

fn settings(namesrv: &str) -> ProducerSettings {
    ProducerSettings {
        namesrv: namesrv.to_owned(),
        group: "outbox-relay-admin".to_owned(),
        send_timeout: Duration::from_secs(3),
    }
}

/// Creates `topic` with `queues` queues in all, spread evenly over the master brokers
/// of `cluster` (8 over two brokers: 4 on each), and waits until its route shows them
/// all. With `brokers`, the cluster must have that many registered first, so a broker
/// that has not registered yet is waited for rather than left out.
pub async fn create_topic(
    namesrv: NameServer<'_>,
    cluster: &str,
    topic: &str,
    queues: u32,
    brokers: Option<usize>,
) -> Result<(), PublishError> {
    let producer = namesrv.producer().await?;
    let result = create_and_wait(&producer, cluster, topic, queues, brokers).await;
    producer.shutdown().await;
    result
}

async fn create_and_wait(
    producer: &Producer,
    cluster: &str,
    topic: &str,
    queues: u32,
    brokers: Option<usize>,
) -> Result<(), PublishError> {
    let found = producer.cluster_brokers(cluster).await?;
    let spread = Spread { cluster, topic, queues, found: &found };
    if brokers.is_some_and(|wanted| wanted != found.len()) || found.is_empty() || queues as usize % found.len() != 0 {
        return Err(spread.refused(brokers));
    }
    let per_broker = queues / u32::try_from(found.len()).unwrap_or(u32::MAX);
    producer.create_topic(cluster, topic, per_broker).await?;
    let deadline = tokio::time::Instant::now() + ROUTE_DEADLINE;
    loop {
        match producer.pinned_queues(topic, queues).await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// A topic's queues over the brokers of a cluster.
struct Spread<'a> {
    cluster: &'a str,
    topic: &'a str,
    queues: u32,
    found: &'a [String],
}

impl Spread<'_> {
    /// Why the queues cannot be spread as asked.
    fn refused(&self, wanted: Option<usize>) -> PublishError {
        let Spread { cluster, topic, queues, found } = self;
        let detail = match wanted {
            Some(wanted) if wanted != found.len() => format!(
                "cluster {cluster} has {} master brokers registered ({}), not the {wanted} asked for: start the missing ones, or wait until they register with the NameServer",
                found.len(),
                found.join(", ")
            ),
            _ if found.is_empty() => format!("cluster {cluster} has no master broker registered: start one, or name the cluster with --cluster"),
            _ => format!(
                "{queues} queues of topic {topic} cannot be spread evenly over the {} brokers of cluster {cluster} ({}): ask for a multiple of {}",
                found.len(),
                found.join(", "),
                found.len()
            ),
        };
        PublishError::Cluster { detail }
    }
}

/// One probe message's answer: where it went and what the broker said.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    pub broker: String,
    pub queue_id: i32,
    pub key: String,
    pub msg_id: String,
    /// How long the broker's key index took to find it, when asked (`find_within`).
    pub found_after_ms: Option<u128>,
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SEND_OK broker={} queue={} msg_id={} key={}", self.broker, self.queue_id, self.msg_id, self.key)?;
        match self.found_after_ms {
            Some(ms) => write!(f, " found_by_key_after_ms={ms}"),
            None => Ok(()),
        }
    }
}

/// Sends one probe message to the first queue of each broker of `topic`; `Ok` only when
/// every broker answered SEND_OK. With `find_within`, each probe must also be found by
/// its key (the broker's key index, which `find` and the KEYS lookups of operators use)
/// within that time.
pub async fn ping(
    namesrv: NameServer<'_>,
    topic: &str,
    queues: u32,
    find_within: Option<Duration>,
) -> Result<Vec<Probe>, PublishError> {
    let producer = namesrv.producer().await?;
    let result = async {
        let mut probes = Vec::new();
        for queue in first_queue_per_broker(producer.pinned_queues(topic, queues).await?) {
            let key = format!("ping-{}", uuid::Uuid::now_v7());
            let probe = OutboxEvent {
                id: 0,
                event_id: key.clone(),
                biz_key: "ping".to_owned(),
                topic: topic.to_owned(),
                payload: Bytes::from_static(b"{\"ping\":true}"),
                created_local_us: None,
                extras: None,
            };
            let receipt = producer.send_batch(&queue, std::slice::from_ref(&probe)).await?;
            let found_after_ms = match find_within {
                Some(within) => {
                    Some(found_by_key(&producer, topic, &key, queue.broker_name(), within).await?.as_millis())
                }
                None => None,
            };
            let msg_id = receipt.msg_ids.join(",");
            probes.push(Probe {
                broker: queue.broker_name().to_string(),
                queue_id: queue.queue_id(),
                key,
                msg_id,
                found_after_ms,
            });
        }
        Ok(probes)
    }
    .await;
    producer.shutdown().await;
    result
}

/// The first queue of each broker, in route order.
fn first_queue_per_broker(queues: Vec<MessageQueue>) -> Vec<MessageQueue> {
    let mut seen = std::collections::HashSet::new();
    queues.into_iter().filter(|q| seen.insert(q.broker_name().to_string())).collect()
}

/// Waits until the key index finds `key`; how long that took.
async fn found_by_key(
    producer: &Producer,
    topic: &str,
    key: &str,
    broker: &str,
    within: Duration,
) -> Result<Duration, PublishError> {
    let started = std::time::Instant::now();
    loop {
        if producer.find_by_key(topic, key).await.is_ok_and(|found| !found.is_empty()) {
            return Ok(started.elapsed());
        }
        if started.elapsed() >= within {
            return Err(PublishError::Cluster {
                detail: format!("broker {broker} stored probe {key} (SEND_OK) but its key index did not find it within {within:?}: the broker does not index keys (messageIndexEnable = false) or its index dispatch is behind; read the broker's log"),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A message found by key: where it is stored and its ids.
#[derive(Debug, Clone, Serialize)]
pub struct Found {
    pub queue_id: i32,
    pub queue_offset: i64,
    pub msg_id: String,
    pub keys: String,
    pub stored_at_ms: i64,
    pub body_bytes: usize,
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "queue={} offset={} msg_id={} keys={} stored_at_ms={} body_bytes={}",
            self.queue_id, self.queue_offset, self.msg_id, self.keys, self.stored_at_ms, self.body_bytes
        )
    }
}

/// The messages of `topic` whose KEYS hold `key`.
pub async fn find(namesrv: NameServer<'_>, topic: &str, key: &str) -> Result<Vec<Found>, PublishError> {
    let producer = namesrv.producer().await?;
    let result = producer.find_by_key(topic, key).await;
    producer.shutdown().await;
    Ok(result?
        .iter()
        .map(|m| {
            let property = |name: &str| {
                m.properties().iter().find(|(k, _)| k.as_str() == name).map(|(_, v)| v.to_string()).unwrap_or_default()
            };
            Found {
                queue_id: m.queue_id(),
                queue_offset: m.queue_offset(),
                msg_id: property("UNIQ_KEY"),
                keys: property("KEYS"),
                stored_at_ms: m.store_timestamp(),
                body_bytes: m.body().map_or(0, |b| b.len()),
            }
        })
        .collect())
}
