//! One test's world in a few lines: the stack, an outbox table of its own, a topic and
//! event ids of its own, a consumer of that topic, and the relay processes it starts.
//! A test reads as its setup (`Scenario::new`, `relay`), its action (inserts, faults)
//! and its assertions (`all_sent`, `consumed`, order), and ends with `finish`.

use std::time::Duration;

use outbox_kit::consumer::Delivery;

use super::collector::Collector;
use super::events::{all_sent, assert_per_key_order, consumed_all, Events};
use super::outbox::TestOutbox;
use super::relay::{RelayOptions, RelayProcess};
use super::{unique, Stack};

/// How long a scenario waits for rows to be SENT or consumed unless told otherwise.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub struct Scenario {
    pub stack: Stack,
    pub outbox: TestOutbox,
    pub events: Events,
    /// A consumer of the scenario's topic, when asked for one.
    pub collector: Option<Collector>,
}

impl Scenario {
    /// A scenario named `name` (its event ids start with it) without a consumer.
    pub async fn new(name: &str) -> Self {
        let stack = Stack::from_env();
        let outbox = TestOutbox::create(&stack).await;
        let events = Events::new(&stack, name).await;
        Self { stack, outbox, events, collector: None }
    }

    /// A scenario with a consumer of its topic, started before anything is published.
    pub async fn consumed(name: &str) -> Self {
        let mut scenario = Self::new(name).await;
        let group = unique(&format!("{name}_consumer"));
        scenario.collector = Some(Collector::start(&scenario.stack.namesrv, &scenario.events.topic, &group).await);
        scenario
    }

    /// The relay options for the scenario's table (fresh checkpoint, stack addresses).
    pub fn options(&self) -> RelayOptions {
        RelayOptions::new(self.outbox.name())
    }

    /// Starts a relay with the default options and waits until it is ready.
    pub async fn relay(&self) -> RelayProcess {
        self.relay_with(&self.options()).await
    }

    /// Starts a relay with `options` and waits until it is ready.
    pub async fn relay_with(&self, options: &RelayOptions) -> RelayProcess {
        let mut relay = RelayProcess::start(&self.stack, options);
        relay.wait_ready().await;
        relay
    }

    /// Waits until the table holds `expected` rows, every one SENT with a msg_id.
    pub async fn all_sent(&self, expected: usize) {
        all_sent(&self.outbox, expected, DEADLINE).await;
    }

    /// Waits until the consumer got `expected` distinct events; all their deliveries.
    pub async fn received(&self, expected: usize) -> Vec<Delivery> {
        consumed_all(self.collector(), &self.events, expected, DEADLINE).await
    }

    /// Every key's events arrived in commit order, in the key's queue.
    pub async fn assert_per_key_order(&self, deliveries: &[Delivery]) {
        assert_per_key_order(&self.stack, &self.events.topic, deliveries).await;
    }

    /// How many messages the broker stores in the scenario's topic (its queues' max
    /// offsets): every publish, duplicates included, whether consumed or not.
    pub async fn stored(&self) -> i64 {
        let producer = self.stack.producer(&format!("{}_check", self.events.prefix)).await;
        let stored = producer.stored_count(&self.events.topic).await.expect("queue offsets");
        producer.shutdown().await;
        stored
    }

    pub fn collector(&self) -> &Collector {
        self.collector.as_ref().expect("a scenario made with Scenario::consumed has a consumer")
    }

    /// Stops `relay` (it must exit 0), then the consumer.
    pub async fn finish(self, mut relay: RelayProcess) {
        assert_eq!(relay.stop(), Some(0), "the relay stops cleanly");
        self.close().await;
    }

    /// Stops the consumer, for a test whose relays have stopped already.
    pub async fn close(self) {
        if let Some(collector) = self.collector {
            collector.shutdown().await;
        }
    }
}
