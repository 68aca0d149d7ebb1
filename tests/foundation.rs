//! The real stack works end to end: an outbox row written in a transaction is read
//! back, a rolled-back one is not; a synchronous send to a real topic answers SEND_OK
//! with a msg_id, and a real consumer receives the same body, KEYS and properties.
#![recursion_limit = "512"]

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::collector::Collector;
use common::{eventually, fresh_topic, unique, Stack, TEST_TOPIC, TEST_TOPIC_QUEUES};
use mysql_async::prelude::Queryable;
use outbox_kit::OutboxTable;
use outbox_relay::event::OutboxEvent;
use outbox_relay::rocketmq::{Producer, ProducerSettings};
use outbox_relay::store::{migrate, PartitionPlan};

async fn fresh_outbox(stack: &Stack) -> (mysql_async::Pool, OutboxTable) {
    let pool = stack.root_pool().await;
    let outbox = OutboxTable { schema: unique("found"), table: "outbox_event".to_owned() };
    pool.get_conn()
        .await
        .expect("conn")
        .query_drop(format!("CREATE DATABASE `{}`", outbox.schema))
        .await
        .expect("create db");
    migrate(&pool, &outbox, PartitionPlan::AsItIs).await.expect("migrate");
    (pool, outbox)
}

#[tokio::test]
async fn committed_outbox_row_reads_back_and_rolled_back_row_does_not_exist() {
    let stack = Stack::from_env();
    let (pool, outbox) = fresh_outbox(&stack).await;
    let mut conn = pool.get_conn().await.expect("conn");
    let insert = format!("INSERT INTO {} (event_id, biz_key, topic, payload) VALUES (?, ?, ?, ?)", outbox.qualified());

    let mut tx = conn.start_transaction(Default::default()).await.expect("begin");
    tx.exec_drop(&insert, ("ev-commit", "order-1", TEST_TOPIC, r#"{"amount":42}"#)).await.expect("insert");
    tx.commit().await.expect("commit");
    let mut tx = conn.start_transaction(Default::default()).await.expect("begin");
    tx.exec_drop(&insert, ("ev-rollback", "order-1", TEST_TOPIC, r#"{"amount":1}"#)).await.expect("insert");
    tx.rollback().await.expect("rollback");

    let rows: Vec<(String, String, String, String, u8, Option<String>)> = conn
        .query(format!(
            "SELECT event_id, biz_key, topic, payload, status, msg_id FROM {} ORDER BY id",
            outbox.qualified()
        ))
        .await
        .expect("select");
    assert_eq!(
        rows,
        vec![("ev-commit".into(), "order-1".into(), TEST_TOPIC.into(), r#"{"amount":42}"#.into(), 0, None)]
    );
}

#[tokio::test]
async fn migrate_twice_is_a_no_op_and_upgrades_a_seed_shaped_table() {
    let stack = Stack::from_env();
    let (pool, outbox) = fresh_outbox(&stack).await;
    let again = migrate(&pool, &outbox, PartitionPlan::AsItIs).await.expect("second migrate");
    assert_eq!(again, Default::default(), "second migrate changes nothing");

    // A table created with the seed's DDL alone gets the relay's extra columns.
    let seed = OutboxTable { schema: outbox.schema.clone(), table: "seed_outbox".to_owned() };
    let mut conn = pool.get_conn().await.expect("conn");
    conn.query_drop(format!(
        "CREATE TABLE {} (id BIGINT PRIMARY KEY AUTO_INCREMENT, event_id VARCHAR(64) NOT NULL, biz_key VARCHAR(64) NOT NULL,
         topic VARCHAR(128) NOT NULL, payload JSON NOT NULL, status TINYINT NOT NULL DEFAULT 0,
         retry_count INT NOT NULL DEFAULT 0, next_retry_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
         lease_until DATETIME(3) NULL, created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
         UNIQUE KEY uk_event_id (event_id), KEY idx_pending (status, next_retry_at)) ENGINE=InnoDB",
        seed.qualified()
    ))
    .await
    .expect("seed table");
    let report = migrate(&pool, &seed, PartitionPlan::AsItIs).await.expect("migrate seed table");
    assert_eq!(
        report.added,
        [
            "owner",
            "msg_id",
            "sent_at",
            "last_error",
            "tag",
            "event_type",
            "headers",
            "deliver_at",
            "idx_claim",
            "idx_key_order"
        ]
    );
}

#[tokio::test]
async fn sync_send_is_send_ok_with_msg_id_and_a_real_consumer_gets_body_keys_and_properties() {
    let stack = Stack::from_env();
    let settings = ProducerSettings {
        namesrv: stack.namesrv.clone(),
        group: unique("found_producer"),
        send_timeout: Duration::from_secs(5),
    };
    let producer = Producer::start(settings).await.expect("producer starts");
    // A topic of its own: a consumer reads only this test's message.
    let topic = fresh_topic(&stack).await;
    let queues = producer.pinned_queues(&topic, TEST_TOPIC_QUEUES).await.expect("topic route");
    let event = OutboxEvent {
        id: 1,
        event_id: unique("ev"),
        biz_key: "order-77".to_owned(),
        topic: topic.clone(),
        payload: Bytes::from_static(br#"{"order":77,"paid":true}"#),
        created_local_us: None,
        extras: None,
    };
    let receipt = producer.send_batch(&queues[3], std::slice::from_ref(&event)).await.expect("SEND_OK");
    assert_eq!(receipt.msg_ids.len(), 1);
    assert!(!receipt.msg_ids[0].is_empty());

    let collector = Collector::start(&stack.namesrv, &topic, &unique("found_consumer")).await;
    let got = eventually("the sent message to be consumed", Duration::from_secs(60), || async {
        collector.received(|id| id == event.event_id).into_iter().next()
    })
    .await;
    assert_eq!(got.body, event.payload.to_vec());
    assert_eq!(got.keys, format!("{} {}", event.event_id, event.biz_key), "KEYS: the event id and the business key");
    assert_eq!(got.biz_key, event.biz_key);
    assert_eq!(got.queue_id, 3);
    assert_eq!(got.msg_id, receipt.msg_ids[0], "the consumer sees the message id fixed before the send");

    // The seed's check: the broker's key index finds it (mqadmin queryMsgByKey).
    let found = eventually("the message to be found by KEYS", Duration::from_secs(30), || async {
        producer.find_by_key(&topic, &event.event_id).await.ok().filter(|found| !found.is_empty())
    })
    .await;
    assert_eq!(found.len(), 1, "exactly one message carries this event_id");
    assert_eq!(found[0].body().map(|b| b.to_vec()), Some(event.payload.to_vec()));
    collector.shutdown().await;
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_run_at_once_on_a_new_schema_all_succeed() {
    let stack = Stack::from_env();
    let pool = stack.root_pool().await;
    let schema = unique("parallel");
    pool.get_conn().await.expect("conn").query_drop(format!("CREATE DATABASE `{schema}`")).await.expect("create db");
    // As when several relays (or test binaries) migrate one new database together.
    let runs = (0..4).map(|i| {
        let (pool, outbox) = (pool.clone(), OutboxTable { schema: schema.clone(), table: format!("outbox_{i}") });
        tokio::spawn(async move { migrate(&pool, &outbox, PartitionPlan::AsItIs).await })
    });
    for run in futures_util::future::join_all(runs).await {
        run.expect("task").expect("every parallel migrate succeeds");
    }
    let checked = outbox_relay::store::check_migrated(&pool, &OutboxTable { schema, table: "outbox_0".into() })
        .await
        .expect("query");
    assert!(checked.is_ok(), "{checked:?}");
}

/// A pooled connection is kept between uses and goes back to the pool as it is: the
/// next use gets the same connection, with its setup statement, and does not prepare
/// the statement of the first use again (a new connection or a reset would).
#[tokio::test]
async fn a_pooled_connection_keeps_its_setup_and_its_prepared_statements_between_uses() {
    let stack = Stack::from_env();
    let setup = ["SET SESSION binlog_row_image = 'MINIMAL'"];
    let url = outbox_relay::config::DbUrl::new(&stack.root_url);
    let pool = outbox_relay::db::connect_with("primary", &url, &Default::default(), 1, &setup).await.expect("pool");
    let statement = "SELECT ? + 1";
    let first_id = {
        let mut conn = pool.get_conn().await.expect("conn");
        conn.exec_drop(statement, (1,)).await.expect("first use");
        conn.id()
    };
    let mut conn = pool.get_conn().await.expect("conn again");
    assert_eq!(conn.id(), first_id, "a pool of one connection hands out the same connection");
    let prepared_before = session_status(&mut conn, "Com_stmt_prepare").await;
    conn.exec_drop(statement, (2,)).await.expect("second use");
    let prepared_after = session_status(&mut conn, "Com_stmt_prepare").await;
    assert_eq!(
        prepared_after, prepared_before,
        "the second use prepared the statement again: the connection was reset"
    );
    let image: Option<String> = conn.query_first("SELECT @@SESSION.binlog_row_image").await.expect("read setting");
    assert_eq!(image.as_deref(), Some("MINIMAL"), "the setup statement no longer holds");
    drop(conn);
    pool.disconnect().await.expect("disconnect");
}

async fn session_status(conn: &mut mysql_async::Conn, name: &str) -> u64 {
    // The text protocol: reading the counter must not prepare a statement itself.
    let row: Option<(String, u64)> =
        conn.query_first(format!("SHOW SESSION STATUS LIKE '{name}'")).await.expect("session status");
    row.map(|(_, value)| value).unwrap_or_else(|| panic!("no session status {name}"))
}

/// A test outbox with PENDING rows and a lease term held on it: what a leader's
/// write-backs need.
struct LeasedRows {
    outbox: common::outbox::TestOutbox,
    lease: outbox_relay::store::LeaseStore,
    lease_name: String,
    term: u64,
    /// Every row's id and event_id, in id order.
    rows: Vec<(u64, String)>,
}

impl LeasedRows {
    async fn new(stack: &Stack, name: &str, count: usize) -> Self {
        let outbox = common::outbox::TestOutbox::create(stack).await;
        let events = common::events::Events::new(stack, name).await;
        outbox.insert_tx(&events.rows("k", 0..count)).await;
        let lease_name = unique(name);
        let lease = outbox_relay::store::LeaseStore::new(outbox.pool.clone(), &outbox.table.schema, &lease_name);
        let free = lease.observe().await.expect("the new fleet's lease row");
        assert!(free.released, "a new fleet's lease is free to take");
        let term = lease.take(name, Duration::from_secs(60), &free).await.expect("take").expect("a term");
        let rows = outbox
            .pool
            .get_conn()
            .await
            .expect("conn")
            .query(format!("SELECT id, event_id FROM {} ORDER BY id", outbox.table.qualified()))
            .await
            .expect("rows");
        Self { outbox, lease, lease_name, term, rows }
    }

    fn fence(&self) -> outbox_relay::store::TermFence {
        self.lease.fence(self.term)
    }

    fn write_backs(&self) -> outbox_relay::store::SentStore {
        let table = self.outbox.table.clone();
        outbox_relay::store::SentStore::new(self.outbox.pool.clone(), table, self.fence(), Duration::from_secs(60))
    }
}

/// `rows` as the lane reports them SENT, each with the msg_id `M<id>`.
fn sent_as(rows: &[(u64, String)]) -> Vec<outbox_relay::store::Sent> {
    rows.iter()
        .map(|(id, event_id)| outbox_relay::store::Sent {
            id: *id,
            event_id: event_id.clone(),
            msg_id: format!("M{id}"),
            at: std::time::SystemTime::now(),
        })
        .collect()
}

/// Write-backs are statements written for a power-of-two row count, the last row named
/// again: three rows go as four. Each row still changes once (one retry counted, not
/// two) and counts once, for FAILED and for SENT alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_padded_write_back_changes_each_row_once() {
    use outbox_relay::store::{RowKey, StatusStore};

    let stack = Stack::from_env();
    let leased = LeasedRows::new(&stack, "padded", 6).await;
    let (outbox, rows) = (&leased.outbox, &leased.rows);
    let status = StatusStore::new(outbox.pool.clone(), outbox.table.clone(), leased.fence());
    let write_backs = leased.write_backs();
    let mut conn = outbox.pool.get_conn().await.expect("conn");

    let failing: Vec<RowKey<'_>> = rows[..3].iter().map(|(id, event_id)| RowKey { id: *id, event_id }).collect();
    assert_eq!(status.mark_failed(&failing, "padded").await.expect("mark FAILED"), 3, "three rows changed");
    let sent = sent_as(&rows[3..]);
    let mut held = write_backs.hold(None).await.expect("a write-back connection");
    assert_eq!(held.mark_sent(&sent).await.expect("mark SENT"), 3, "three rows changed");
    assert_eq!(held.mark_sent(&sent).await.expect("mark SENT again"), 0, "rows already SENT are left alone");

    let tries: Vec<(u64, u8, u32, Option<String>)> = conn
        .query(format!("SELECT id, status, retry_count, msg_id FROM {} ORDER BY id", outbox.table.qualified()))
        .await
        .expect("statuses");
    for (id, status, retry_count, msg_id) in &tries[..3] {
        assert_eq!((*status, *retry_count, msg_id.as_deref()), (3, 1, None), "row {id}: FAILED, one retry counted");
    }
    for (id, status, retry_count, msg_id) in &tries[3..] {
        assert_eq!((*status, *retry_count), (2, 0), "row {id}: SENT");
        assert_eq!(msg_id.as_deref(), Some(format!("M{id}").as_str()), "row {id}: its own msg_id");
    }
}

/// A write-back that reaches the database while another transaction is ending its term
/// waits for that transaction, then changes nothing: the fence joins the lease row into
/// the UPDATE, and a multi-table UPDATE reads the rows it joins with a lock. Read from a
/// snapshot, the row would still show the old term and the deposed leader's write would
/// land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_back_racing_the_end_of_its_term_waits_for_it_and_changes_nothing() {
    use outbox_kit::RowStatus;

    let stack = Stack::from_env();
    let leased = LeasedRows::new(&stack, "fence-race", 2).await;
    let outbox = &leased.outbox;
    let write_backs = leased.write_backs();
    let sent = sent_as(&leased.rows);

    let mut ender = outbox.pool.get_conn().await.expect("conn");
    let mut ending = ender.start_transaction(Default::default()).await.expect("begin");
    ending
        .exec_drop(
            format!("UPDATE `{}`.outbox_relay_lease SET term = term + 1 WHERE name = ?", outbox.table.schema),
            (&leased.lease_name,),
        )
        .await
        .expect("end the term, uncommitted");
    let write_back = tokio::spawn(async move {
        let mut held = write_backs.hold(None).await.expect("a write-back connection");
        held.mark_sent(&sent).await
    });
    // Parameters show filled in, so the check's own statement names the table too.
    let statement_on = format!("%{}%", outbox.table.table);
    eventually("the write-back's statement executing on the server", Duration::from_secs(20), || {
        let pool = outbox.pool.clone();
        let statement_on = statement_on.clone();
        async move {
            let mut conn = pool.get_conn().await.ok()?;
            let executing: Option<u64> = conn
                .exec_first(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                     WHERE ID <> CONNECTION_ID() AND COMMAND = 'Execute' AND INFO LIKE ?",
                    (statement_on,),
                )
                .await
                .ok()?;
            executing.filter(|&n| n > 0)
        }
    })
    .await;
    assert!(!write_back.is_finished(), "the write-back did not wait for the transaction ending its term");
    ending.commit().await.expect("commit the term's end");

    let changed = write_back.await.expect("write-back task").expect("the write-back ran");
    assert_eq!(changed, 0, "a write-back of an ended term changed rows");
    assert_eq!(outbox.count_status(RowStatus::Pending).await, 2, "both rows still PENDING");
}

/// A write-back connection held past its lifetime is given back before another is
/// taken: from a pool of one connection (all the writer's connections held), a new
/// one could not come while the old one is kept.
#[tokio::test]
async fn a_write_back_connection_past_its_lifetime_is_given_back_before_another_is_taken() {
    use outbox_relay::store::{LeaseStore, SentStore};

    let stack = Stack::from_env();
    let (_, outbox) = fresh_outbox(&stack).await;
    let url = outbox_relay::config::DbUrl::new(&stack.root_url);
    let pool = outbox_relay::db::connect_with("primary", &url, &Default::default(), 1, &[]).await.expect("pool");
    let lease = LeaseStore::new(pool.clone(), &outbox.schema, &unique("renew"));
    let write_backs = SentStore::new(pool.clone(), outbox, lease.unheld(), Duration::ZERO);
    let held = write_backs.hold(None).await.expect("a write-back connection");
    let renewed = tokio::time::timeout(Duration::from_secs(20), write_backs.hold(Some(held)))
        .await
        .expect("no new connection within 20 s: the old one was kept while a new one was awaited")
        .expect("a new write-back connection");
    drop(renewed);
    pool.disconnect().await.expect("disconnect");
}

/// The kit's `enqueue` writes the outbox row in the application's own transaction: with
/// the business row committed, the relay publishes it and a consumer gets its key and
/// payload under the event id `enqueue` returned; with the business row rolled back,
/// neither row exists and nothing of it is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_commits_and_rolls_back_with_the_business_row() {
    let stack = Stack::from_env();
    let outbox = common::outbox::TestOutbox::create(&stack).await;
    let topic = fresh_topic(&stack).await;
    let collector = Collector::start(&stack.namesrv, &topic, &unique("enqueue_consumer")).await;
    let orders = format!("{}_orders", outbox.name());
    outbox.exec(&format!("CREATE TABLE app.`{orders}` (id BIGINT PRIMARY KEY, state VARCHAR(16))")).await;
    let mut relay = common::relay::RelayProcess::start(&stack, &common::relay::RelayOptions::new(outbox.name()));
    relay.wait_ready().await;

    let mut enqueued = Vec::new();
    for (order, commit) in [(1, true), (2, false)] {
        let mut conn = outbox.pool.get_conn().await.expect("conn");
        let mut tx = conn.start_transaction(mysql_async::TxOpts::default()).await.expect("begin");
        tx.exec_drop(format!("INSERT INTO app.`{orders}` VALUES (?, 'paid')"), (order,)).await.expect("business row");
        let payload = serde_json::json!({ "order": order, "state": "paid" });
        let key = format!("order-{order}");
        let event = outbox_kit::NewEvent::new(&topic, &key, &payload);
        enqueued.push(outbox_kit::enqueue(&mut tx, &outbox.table, event).await.expect("enqueue"));
        if commit {
            tx.commit().await.expect("commit");
        } else {
            tx.rollback().await.expect("rollback");
        }
    }

    common::events::all_sent(&outbox, 1, Duration::from_secs(60)).await;
    let got = collector.wait_distinct(&enqueued[0], 1, Duration::from_secs(60)).await;
    assert_eq!(got[0].biz_key, "order-1");
    let body: serde_json::Value = serde_json::from_slice(&got[0].body).expect("a JSON body");
    assert_eq!(body, serde_json::json!({ "order": 1, "state": "paid" }));
    let statuses = outbox.statuses().await;
    assert!(!statuses.contains_key(&enqueued[1]), "the rolled-back event has no row: {statuses:?}");
    let orders_left: Vec<u64> = outbox
        .pool
        .get_conn()
        .await
        .expect("conn")
        .query(format!("SELECT id FROM app.`{orders}`"))
        .await
        .expect("orders");
    assert_eq!(orders_left, [1], "the business row went with its outbox row");
    assert!(collector.received(|id| id == enqueued[1]).is_empty(), "nothing of the rolled-back event was published");
    assert_eq!(relay.stop(), Some(0));
    collector.shutdown().await;
}
