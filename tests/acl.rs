//! A RocketMQ cluster that enforces ACL (`scripts/stack acl-up`: a NameServer and one
//! broker of their own, apart from the stack's open cluster): the relay with the right
//! keys signs every request and sends; with a wrong secret it stops at start with exit
//! code 4 and a line naming the access key, and no row becomes FAILED; `admin` signs
//! with the configured keys and is refused without them.
#![recursion_limit = "512"]

mod common;

use std::process::Command;
use std::time::Duration;

use common::outbox::TestOutbox;
use common::relay::{RelayOptions, RelayProcess};
use common::{unique, Stack};
use outbox_kit::RowStatus;
use outbox_relay::config::{AclCredentials, Secret};
use outbox_relay::ops::admin::{create_topic, find, NameServer};

/// The ACL cluster's name and the queues the tests' topics get.
const CLUSTER: &str = "AclCluster";
const QUEUES: u32 = 4;

/// The ACL cluster: started once per test binary, shared by its tests.
static STARTED: tokio::sync::Mutex<bool> = tokio::sync::Mutex::const_new(false);

/// The topic config/relay.toml pins, which the relay waits for on any cluster.
const CONFIGURED_TOPIC: (&str, u32) = ("t-order-event", 8);

struct AclCluster {
    namesrv: String,
    keys: AclCredentials,
}

impl AclCluster {
    /// The cluster, started (with the configured topic) by the first test that asks.
    async fn up() -> Self {
        let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} (eval \"$(scripts/stack env)\")"));
        let keys = AclCredentials {
            access_key: var("OUTBOX_RELAY_TEST_ACL_ACCESS_KEY"),
            secret_key: Secret::new(var("OUTBOX_RELAY_TEST_ACL_SECRET_KEY")),
        };
        let cluster = Self { namesrv: var("OUTBOX_RELAY_TEST_ACL_NAMESRV"), keys };
        let mut started = STARTED.lock().await;
        if !*started {
            let stack = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/stack");
            let status = Command::new(stack).arg("acl-up").status().expect("run scripts/stack acl-up");
            assert!(status.success(), "scripts/stack acl-up failed");
            let (topic, queues) = CONFIGURED_TOPIC;
            create_topic(cluster.signed(), CLUSTER, topic, queues, None).await.expect("a signed create-topic");
            *started = true;
        }
        cluster
    }

    fn signed(&self) -> NameServer<'_> {
        NameServer { address: &self.namesrv, acl: Some(&self.keys) }
    }

    /// A new topic on the cluster, created with the keys.
    async fn topic(&self) -> String {
        let topic = unique("t_acl");
        create_topic(self.signed(), CLUSTER, &topic, QUEUES, None).await.expect("a signed create-topic");
        topic
    }

    /// Relay options for `outbox`'s table against this cluster, signing with `secret`.
    fn relay_options(&self, outbox: &TestOutbox, topic: &str, secret: &str) -> RelayOptions {
        RelayOptions::new(outbox.name())
            .env("OUTBOX_RELAY__ROCKETMQ__NAMESRV", &self.namesrv)
            .env("OUTBOX_RELAY__ROCKETMQ__ACCESS_KEY", &self.keys.access_key)
            .env("OUTBOX_RELAY__ROCKETMQ__SECRET_KEY", secret)
            .env(&format!("OUTBOX_RELAY__ROCKETMQ__TOPICS__{topic}__QUEUE_COUNT"), QUEUES)
    }
}

fn rows(topic: &str, prefix: &str, count: usize) -> Vec<common::outbox::Row> {
    (0..count)
        .map(|i| common::outbox::Row {
            event_id: format!("{prefix}-{i}"),
            biz_key: format!("key-{}", i % 3),
            topic: topic.to_owned(),
            payload: format!(r#"{{"i":{i}}}"#),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_with_the_right_keys_signs_every_request_and_its_events_are_stored() {
    let cluster = AclCluster::up().await;
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let topic = cluster.topic().await;
    let options = cluster.relay_options(&outbox, &topic, cluster.keys.secret_key.expose());
    let mut relay = RelayProcess::start(&stack, &options);
    relay.wait_ready().await;
    let prefix = unique("acl");
    outbox.insert_tx(&rows(&topic, &prefix, 10)).await;
    common::events::all_sent(&outbox, 10, Duration::from_secs(60)).await;
    let found = find(cluster.signed(), &topic, &format!("{prefix}-3")).await.expect("a signed look-up");
    assert_eq!(found.len(), 1, "the broker stored the event once: {found:?}");
    assert_eq!(relay.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_with_a_wrong_secret_stops_at_start_naming_the_key_and_fails_nothing() {
    let cluster = AclCluster::up().await;
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let topic = cluster.topic().await;
    outbox.insert_tx(&rows(&topic, &unique("acl_wrong"), 5)).await;
    let options = cluster.relay_options(&outbox, &topic, "not-the-secret");
    let mut relay = RelayProcess::start(&stack, &options);
    let code = relay.wait_exit(Duration::from_secs(60)).await;
    let log = relay.log_text();
    assert_eq!(code, Some(4), "exit code 4 (the environment: credentials):\n{log}");
    let refusal = format!("refused the relay's credentials, access key {}", cluster.keys.access_key);
    assert!(log.lines().any(|line| line.contains(&refusal) && line.contains("rocketmq.secret_key")), "{log}");
    assert!(!log.contains("not-the-secret"), "the secret is never logged:\n{log}");
    assert_eq!(outbox.count_status(RowStatus::Failed).await, 0, "no row FAILED");
    assert_eq!(outbox.count_status(RowStatus::Pending).await, 5, "every row waits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_without_the_keys_is_refused_and_with_them_creates_the_topic() {
    let cluster = AclCluster::up().await;
    let topic = unique("t_acl_admin");
    let unsigned = create_topic(NameServer::unsigned(&cluster.namesrv), CLUSTER, &topic, QUEUES, None).await;
    let refused = unsigned.expect_err("an unsigned create-topic");
    assert!(refused.credentials_refused(), "refused for its credentials: {refused}");
    create_topic(cluster.signed(), CLUSTER, &topic, QUEUES, None).await.expect("a signed create-topic");
}
