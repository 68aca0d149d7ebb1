//! The producer the lanes send through, replaced by a fresh one after the broker
//! was unreachable.
//!
//! The RocketMQ client guards every broker address with a circuit breaker: after
//! five failed connections it refuses to connect for 30 s, and a failed probe starts
//! the 30 s again, so a broker that is back can stay unused for half a minute. The
//! relay routes around it. A lane that cannot connect to a broker says so here; the
//! probe task then checks the broker every [`PROBE_EVERY`] with a separate producer
//! (replaced before it fails often enough to trip its own breaker): it reads the
//! route of every topic in use and asks the broker for a queue's offset, which stores
//! nothing. Once that works, the probe's producer becomes the lanes' producer and the
//! lanes are told at once; the old one is shut down when its last send has ended. With
//! several brokers, what is unreachable is known per broker: the probe asks each
//! unreachable broker itself (through a queue of it in a topic's route), so the
//! others' confirmed sends neither hide an unreachable broker nor renew the producer
//! while it is still down.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use rocketmq_client_rust::ClientRuntime;
use rocketmq_model::common::message::message_queue::MessageQueue;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::brokers::Brokers;
use super::layout::{resolve, QueueLayout, Resolved};
use super::producer::DEFAULT_QUEUE_COUNT;
use super::{Prepared, Producer, ProducerSettings, PublishError};
use crate::config::AclCredentials;

/// How often an unreachable broker is tried.
pub const PROBE_EVERY: Duration = Duration::from_millis(500);
/// Failed probes one probe producer makes before it is replaced (its breaker opens at five).
const PROBES_PER_PRODUCER: u32 = 4;
/// How long one probe round may wait for the brokers it asks.
const REACH_WITHIN: Duration = Duration::from_secs(3);
/// How long a producer's shutdown may take (it says goodbye to every broker, and one
/// that just came back may not answer yet).
const SHUTDOWN_WITHIN: Duration = Duration::from_secs(5);

/// The current producer, and what is known about unreachable brokers.
pub struct Publisher {
    /// The client runtime every producer it starts runs on.
    client: Arc<ClientRuntime>,
    settings: ProducerSettings,
    /// ACL credentials every producer it starts signs with.
    acl: Option<AclCredentials>,
    current: RwLock<Arc<Producer>>,
    /// Bumped on every renewal; lanes waiting out an outage watch it.
    renewed: watch::Sender<u64>,
    /// What the lanes' sends showed about each broker.
    brokers: Brokers,
    /// Topics the lanes send to: a new producer must have their routes first.
    topics: Mutex<BTreeSet<String>>,
    /// Replaced producers, shut down once no send uses them.
    retired: Mutex<Vec<Arc<Producer>>>,
}

impl Publisher {
    /// Starts the first producer; it and every later one run on `client`.
    pub async fn start(
        client: Arc<ClientRuntime>,
        settings: ProducerSettings,
        acl: Option<AclCredentials>,
    ) -> Result<Self, PublishError> {
        let producer = Producer::start_on(Arc::clone(&client), settings.clone(), acl.as_ref()).await?;
        Ok(Self {
            client,
            settings,
            acl,
            current: RwLock::new(Arc::new(producer)),
            renewed: watch::Sender::new(0),
            brokers: Brokers::default(),
            topics: Mutex::default(),
            retired: Mutex::default(),
        })
    }

    /// The producer to use now.
    pub fn producer(&self) -> Arc<Producer> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Sends a prepared batch to `queue` with the current producer, writing it and
    /// waiting for the answer only `within` from now (see [`Producer::send_within`]).
    pub async fn send(&self, queue: &MessageQueue, batch: &Prepared, within: Duration) -> Result<(), PublishError> {
        if crate::fault::ack_without_send() {
            return Ok(());
        }
        self.producer().send_within(queue, batch, within).await
    }

    /// `topic`'s live route compared with its pinned `layout`, or with its pinned
    /// `count` while no layout is pinned (see `layout::resolve`). A topic without any
    /// route is `TopicMissing`; a route that contradicts the pin on a broker that is up
    /// is `LayoutChanged`.
    pub async fn resolve(
        &self,
        topic: &str,
        layout: Option<&QueueLayout>,
        count: Option<u32>,
    ) -> Result<Resolved, PublishError> {
        let missing = || PublishError::TopicMissing {
            topic: topic.to_owned(),
            queue_count: count
                .or(layout.map(|l| u32::try_from(l.len()).unwrap_or(u32::MAX)))
                .unwrap_or(DEFAULT_QUEUE_COUNT),
        };
        let live = match self.live_queues(topic).await {
            Ok(live) if live.is_empty() => return Err(missing()),
            Ok(live) => QueueLayout::of(&live),
            Err(PublishError::TopicMissing { .. }) => return Err(missing()),
            Err(error) => return Err(error),
        };
        resolve(layout, count, &live).map_err(|change| PublishError::LayoutChanged { topic: topic.to_owned(), change })
    }

    /// `topic`'s queues as the NameServer reports them now.
    pub async fn live_queues(&self, topic: &str) -> Result<Vec<MessageQueue>, PublishError> {
        self.remember(topic);
        self.producer().live_queues(topic).await
    }

    fn remember(&self, topic: &str) {
        self.topics.lock().unwrap_or_else(PoisonError::into_inner).insert(topic.to_owned());
    }

    /// A send could not connect to `broker`: the probe starts.
    pub fn unreachable(&self, broker: &str) {
        self.brokers.unreachable(broker);
    }

    /// A send to `broker` was confirmed: it is reachable with the current producer and
    /// takes sends.
    pub fn confirmed(&self, broker: &str) {
        self.brokers.confirmed(broker);
    }

    /// `broker` answered a send to `queue` with an error of unknown class; how many of
    /// its queues it has answered so since its last confirmed send.
    pub fn refused(&self, broker: &str, queue: i32) -> usize {
        self.brokers.refused(broker, queue)
    }

    /// A receiver that changes when a new producer takes over.
    pub fn renewals(&self) -> watch::Receiver<u64> {
        self.renewed.subscribe()
    }

    /// While sends cannot connect, probes the broker with a separate producer and
    /// makes it the current one once the broker answers, until `stop`. Replaced
    /// producers are shut down here once no send uses them any more.
    pub async fn probe(self: Arc<Self>, stop: CancellationToken) {
        let mut prober: Option<(Producer, u32)> = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep(PROBE_EVERY) => {}
                () = stop.cancelled() => break,
            }
            // A round waits on brokers that may not answer: a stop does not wait for it
            // (the probe producer it holds is dropped with it).
            let round = async {
                self.shut_down_unused().await;
                self.probe_round(prober.take()).await
            };
            prober = tokio::select! {
                kept = round => kept,
                () = stop.cancelled() => break,
            };
        }
        if let Some((producer, _)) = prober {
            shut_down(producer).await;
        }
    }

    /// One look at the brokers no send could connect to, with the probe producer kept
    /// from the last round (and how often it failed); the producer to keep.
    async fn probe_round(&self, prober: Option<(Producer, u32)>) -> Option<(Producer, u32)> {
        let unreachable = self.brokers.unreachable_now();
        if unreachable.is_empty() {
            if let Some((idle, _)) = prober {
                shut_down(idle).await;
            }
            return None;
        }
        let (producer, failures) = match prober {
            Some(probe) => probe,
            None => match self.new_producer().await {
                Ok(producer) => (producer, 0),
                Err(error) => {
                    tracing::debug!(%error, "probe producer cannot start yet");
                    return None;
                }
            },
        };
        let reached = tokio::time::timeout(REACH_WITHIN, self.reaches_one_of(&producer, &unreachable)).await;
        match reached {
            Ok(Ok(broker)) => {
                self.take_over(producer, &broker);
                None
            }
            _ if failures + 1 >= PROBES_PER_PRODUCER => {
                tracing::debug!(brokers = ?unreachable, "broker still unreachable; replacing the probe producer");
                shut_down(producer).await;
                None
            }
            _ => Some((producer, failures + 1)),
        }
    }

    /// A new producer on the client runtime the first one runs on.
    async fn new_producer(&self) -> Result<Producer, PublishError> {
        Producer::start_on(Arc::clone(&self.client), self.settings.clone(), self.acl.as_ref()).await
    }

    /// The first of `brokers` that `producer` reaches, through a queue of it in the
    /// route of a topic in use (a topic missing from the cluster is not the broker's
    /// fault).
    async fn reaches_one_of(&self, producer: &Producer, brokers: &[String]) -> Result<String, PublishError> {
        let topics = self.topics.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut last = Err(PublishError::Cluster { detail: "no topic in use to reach a broker through".to_owned() });
        for broker in brokers {
            for topic in &topics {
                match producer.reach(topic, broker).await {
                    Ok(()) => return Ok(broker.clone()),
                    Err(error) => last = Err(error),
                }
            }
        }
        last
    }

    /// Makes `fresh` the current producer, which reached `broker`, and tells the lanes;
    /// the old one is shut down once its last send has ended.
    fn take_over(&self, fresh: Producer, broker: &str) {
        let old =
            std::mem::replace(&mut *self.current.write().unwrap_or_else(PoisonError::into_inner), Arc::new(fresh));
        self.retired.lock().unwrap_or_else(PoisonError::into_inner).push(old);
        self.brokers.reached(broker);
        self.renewed.send_modify(|generation| *generation += 1);
        tracing::debug!(broker, "broker reachable again: a new producer took over");
    }

    /// Shuts down the replaced producers that no send uses any more.
    async fn shut_down_unused(&self) {
        let retired = std::mem::take(&mut *self.retired.lock().unwrap_or_else(PoisonError::into_inner));
        let mut still_used = Vec::new();
        for producer in retired {
            match Arc::try_unwrap(producer) {
                Ok(unused) => shut_down(unused).await,
                Err(shared) => still_used.push(shared),
            }
        }
        self.retired.lock().unwrap_or_else(PoisonError::into_inner).extend(still_used);
    }

    /// Shuts every producer down; every lane has ended, so nothing else holds one.
    pub async fn shutdown(self) {
        let retired = self.retired.into_inner().unwrap_or_else(PoisonError::into_inner);
        let current = self.current.into_inner().unwrap_or_else(PoisonError::into_inner);
        for producer in retired.into_iter().chain([current]) {
            match Arc::try_unwrap(producer) {
                Ok(producer) => shut_down(producer).await,
                Err(_) => tracing::error!(
                    "a RocketMQ producer is still in use after every task ended (a bug); it is not shut down cleanly"
                ),
            }
        }
    }
}

/// Shuts `producer` down, at most [`SHUTDOWN_WITHIN`]; one that takes longer is
/// dropped (its connections close with it) and the relay goes on or stops regardless.
async fn shut_down(producer: Producer) {
    if tokio::time::timeout(SHUTDOWN_WITHIN, producer.shutdown()).await.is_err() {
        tracing::warn!("a RocketMQ producer did not shut down within {SHUTDOWN_WITHIN:?} (a broker did not answer its goodbye); it is dropped");
    }
}
