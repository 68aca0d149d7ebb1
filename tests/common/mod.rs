//! Shared test support: where the local stack is (from `scripts/stack env`, with the
//! stack's defaults), a polling `eventually` instead of sleeps (and `throughout` for
//! what must hold over a stretch of time), a real RocketMQ consumer that records what
//! it receives, and the `Scenario` that puts one test's parts together.
#![allow(dead_code)] // each test binary uses a different part of this module

pub mod collector;
pub mod command;
pub mod consumer_db;
pub mod events;
pub mod load;
pub mod mqadmin;
pub mod otlp;
pub mod outbox;
pub mod relay;
pub mod scenario;

use std::future::Future;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Pool;
use outbox_relay::config::DbUrl;

/// Addresses of the stack `scripts/stack up` started.
pub struct Stack {
    /// Root on the private MariaDB primary (tests set up schemas with it).
    pub root_url: String,
    /// Root on its replica, whose binlog the relay tails.
    pub replica_root_url: String,
    /// The replication user on the replica (the relay's `source.url`).
    pub repl_url: String,
    /// The replication user on the primary (a failover target for `source.url`).
    pub primary_repl_url: String,
    pub writer_url: String,
    pub namesrv: String,
}

/// A topic the stack creates with 8 queues, reserved for tests.
pub const TEST_TOPIC: &str = "t-relay-test";
pub const TEST_TOPIC_QUEUES: u32 = 8;

impl Stack {
    pub fn from_env() -> Self {
        let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
        Stack {
            root_url: var("OUTBOX_RELAY_TEST_DB_URL", "mysql://root@127.0.0.1:13306/app"),
            replica_root_url: var("OUTBOX_RELAY_TEST_REPLICA_ROOT_URL", "mysql://root@127.0.0.1:13307/app"),
            repl_url: var("OUTBOX_RELAY_TEST_REPL_URL", "mysql://outbox_repl:repl-secret@127.0.0.1:13307/app"),
            primary_repl_url: var(
                "OUTBOX_RELAY_TEST_PRIMARY_REPL_URL",
                "mysql://outbox_repl:repl-secret@127.0.0.1:13306/app",
            ),
            writer_url: var("OUTBOX_RELAY_TEST_WRITER_URL", "mysql://outbox_writer:writer-secret@127.0.0.1:13306/app"),
            namesrv: var("OUTBOX_RELAY_TEST_NAMESRV", "127.0.0.1:19876"),
        }
    }

    /// A started producer in a fresh group `{group}_...` (tests check and send with it).
    pub async fn producer(&self, group: &str) -> outbox_relay::rocketmq::Producer {
        outbox_relay::rocketmq::Producer::start(outbox_relay::rocketmq::ProducerSettings {
            namesrv: self.namesrv.clone(),
            group: unique(group),
            send_timeout: Duration::from_secs(5),
        })
        .await
        .unwrap_or_else(|e| panic!("producer: {e}\n(start the stack first: scripts/stack up)"))
    }

    /// A root pool on the stack's MariaDB primary; panics with the fix when the stack is down.
    pub async fn root_pool(&self) -> Pool {
        pool(&self.root_url).await
    }

    /// A root pool on the replica the relay tails.
    pub async fn replica_pool(&self) -> Pool {
        pool(&self.replica_root_url).await
    }

    /// Waits until the replica has applied everything the primary committed so far
    /// (tables and users a test just created exist there too).
    pub async fn replica_caught_up(&self) {
        let primary = self.root_pool().await;
        let replica = self.replica_pool().await;
        let gtid: String = primary
            .get_conn()
            .await
            .expect("primary")
            .query_first("SELECT @@gtid_binlog_pos")
            .await
            .expect("gtid_binlog_pos")
            .unwrap_or_default();
        let waited: Option<i32> = replica
            .get_conn()
            .await
            .expect("replica")
            .exec_first("SELECT MASTER_GTID_WAIT(?, 60)", (&gtid,))
            .await
            .expect("MASTER_GTID_WAIT");
        assert_eq!(waited, Some(0), "the replica did not reach {gtid} within 60 s (scripts/stack status)");
        primary.disconnect().await.ok();
        replica.disconnect().await.ok();
    }
}

async fn pool(url: &str) -> Pool {
    outbox_relay::db::connect("test", &DbUrl::new(url), 4)
        .await
        .unwrap_or_else(|e| panic!("{e}\n(start the stack first: scripts/stack up)"))
}

/// Polls `check` until it returns `Some`, or panics after `deadline` naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let waited = outbox_test_support::until(what, deadline, || {
        let checked = check();
        async move { Ok(checked.await) }
    });
    waited.await.unwrap_or_else(|e| panic!("{e:#}"))
}

/// Checks `violations` every quarter second for `period` and fails at the first
/// check that finds any: for what must hold over a stretch of time (rows that must stay
/// as they are while the relay runs several periods), where no event marks its end.
pub async fn throughout<V, F, Fut>(what: &str, period: Duration, mut violations: F)
where
    V: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Vec<V>>,
{
    let until = tokio::time::Instant::now() + period;
    loop {
        let found = violations().await;
        assert!(found.is_empty(), "{what}: not so for {found:?}");
        if tokio::time::Instant::now() >= until {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A new topic with `TEST_TOPIC_QUEUES` queues, so a test's consumer reads only its
/// own messages (a consumer of a shared topic would wade through other tests' load).
pub async fn fresh_topic(stack: &Stack) -> String {
    let topic = unique("t");
    outbox_relay::ops::admin::create_topic(
        outbox_relay::ops::admin::NameServer::unsigned(&stack.namesrv),
        "DefaultCluster",
        &topic,
        TEST_TOPIC_QUEUES,
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("create topic {topic}: {e}"));
    topic
}

pub use outbox_test_support::unique;
