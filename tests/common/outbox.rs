//! A test's own outbox table on the stack's MariaDB (schema `app`, where the relay's
//! least-privilege users have their grants), and the queries the tests assert with.

use std::collections::HashMap;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Pool};
use outbox_kit::{OutboxTable, RowStatus};
use outbox_relay::store::{migrate, PartitionPlan};
use outbox_test_support::rows::insert_sql;
pub use outbox_test_support::rows::Row;

use super::{unique, Stack};

/// A fresh outbox table and a root pool on it.
pub struct TestOutbox {
    pub pool: Pool,
    pub table: OutboxTable,
}

impl TestOutbox {
    pub async fn create(stack: &Stack) -> Self {
        let pool = stack.root_pool().await;
        let table = OutboxTable { schema: "app".to_owned(), table: unique("outbox") };
        migrate(&pool, &table, PartitionPlan::AsItIs).await.expect("migrate test outbox");
        stack.replica_caught_up().await;
        Self { pool, table }
    }

    pub fn name(&self) -> &str {
        &self.table.table
    }

    /// Inserts `rows` as one multi-row INSERT in one committed transaction.
    pub async fn insert_tx(&self, rows: &[Row]) {
        self.write_tx(rows, true, None).await;
    }

    /// Inserts `rows` in one committed transaction of a session whose time zone is
    /// `zone` (`'+13:00'`): its `created_at` and `next_retry_at` defaults read that clock.
    pub async fn insert_tx_in_zone(&self, rows: &[Row], zone: &str) {
        self.write_tx(rows, true, Some(zone)).await;
    }

    /// Inserts `rows` in a transaction that is rolled back.
    pub async fn insert_rolled_back(&self, rows: &[Row]) {
        self.write_tx(rows, false, None).await;
    }

    async fn write_tx(&self, rows: &[Row], commit: bool, zone: Option<&str>) {
        let mut conn = self.pool.get_conn().await.expect("conn");
        if let Some(zone) = zone {
            conn.query_drop(format!("SET time_zone = '{zone}'")).await.expect("set the session's time zone");
        }
        let mut tx = conn.start_transaction(Default::default()).await.expect("begin");
        for chunk in rows.chunks(1_000) {
            let (sql, params) = self.insert_params(chunk);
            tx.exec_drop(sql, params).await.expect("insert outbox rows");
        }
        if commit {
            tx.commit().await.expect("commit");
        } else {
            tx.rollback().await.expect("rollback");
        }
        if zone.is_some() {
            conn.query_drop("SET time_zone = DEFAULT").await.expect("reset the session's time zone");
        }
    }

    /// A multi-row INSERT of `rows` into this table.
    pub fn insert_params(&self, rows: &[Row]) -> (String, mysql_async::Params) {
        insert_sql(&self.table, rows.iter().cloned())
    }

    /// Runs `steps` in one transaction on one connection, then commits it.
    pub async fn commit_steps(&self, steps: &[Step]) {
        let mut conn = self.pool.get_conn().await.expect("conn");
        conn.query_drop("BEGIN").await.expect("begin");
        for step in steps {
            self.run(&mut conn, step).await;
        }
        conn.query_drop("COMMIT").await.expect("commit");
    }

    /// `XA START` .. `XA PREPARE` of `rows` as XA transaction `xid`, on a connection
    /// of its own that keeps it prepared until it is decided.
    pub async fn prepare_xa(&self, xid: &str, rows: &[Row]) -> PreparedXa {
        let mut conn = self.pool.get_conn().await.expect("conn");
        self.write_xa(&mut conn, xid, rows).await;
        conn.query_drop(format!("XA PREPARE '{xid}'")).await.expect("xa prepare");
        PreparedXa { conn, xid: xid.to_owned() }
    }

    /// `rows` as XA transaction `xid`, committed with `XA COMMIT .. ONE PHASE`.
    pub async fn commit_xa_one_phase(&self, xid: &str, rows: &[Row]) {
        let mut conn = self.pool.get_conn().await.expect("conn");
        self.write_xa(&mut conn, xid, rows).await;
        conn.query_drop(format!("XA COMMIT '{xid}' ONE PHASE")).await.expect("xa commit one phase");
    }

    async fn write_xa(&self, conn: &mut Conn, xid: &str, rows: &[Row]) {
        conn.query_drop(format!("XA START '{xid}'")).await.expect("xa start");
        self.run(conn, &Step::Insert(rows.to_vec())).await;
        conn.query_drop(format!("XA END '{xid}'")).await.expect("xa end");
    }

    async fn run(&self, conn: &mut Conn, step: &Step) {
        match step {
            Step::Insert(rows) => {
                let (sql, params) = self.insert_params(rows);
                conn.exec_drop(sql, params).await.expect("insert outbox rows");
            }
            Step::Sql(sql) => conn.query_drop(sql).await.expect(sql),
        }
    }

    /// event_id -> (status, msg_id) of every row.
    pub async fn statuses(&self) -> HashMap<String, (u8, Option<String>)> {
        let mut conn = self.pool.get_conn().await.expect("conn");
        let rows: Vec<(String, u8, Option<String>)> = conn
            .query(format!("SELECT event_id, status, msg_id FROM {}", self.table.qualified()))
            .await
            .expect("select statuses");
        rows.into_iter().map(|(id, status, msg)| (id, (status, msg))).collect()
    }

    /// Number of rows with `status`.
    pub async fn count_status(&self, status: RowStatus) -> usize {
        self.statuses().await.values().filter(|(s, _)| *s == status.code()).count()
    }

    /// The id of the row with `event_id`.
    pub async fn id_of(&self, event_id: &str) -> u64 {
        let mut conn = self.pool.get_conn().await.expect("conn");
        let id: Option<u64> = conn
            .exec_first(format!("SELECT id FROM {} WHERE event_id = ?", self.table.qualified()), (event_id,))
            .await
            .expect("id");
        id.unwrap_or_else(|| panic!("no row {event_id}"))
    }

    /// The status of row `id`.
    pub async fn status_of(&self, id: u64) -> u8 {
        let mut conn = self.pool.get_conn().await.expect("conn");
        let status: Option<u8> = conn
            .exec_first(format!("SELECT status FROM {} WHERE id = ?", self.table.qualified()), (id,))
            .await
            .expect("status");
        status.unwrap_or_else(|| panic!("no row {id}"))
    }

    /// Whether row `id`'s booked retry is due on the database's clock.
    pub async fn due(&self, id: u64) -> bool {
        let mut conn = self.pool.get_conn().await.expect("conn");
        let sql = format!("SELECT next_retry_at <= NOW(3) FROM {} WHERE id = ?", self.table.qualified());
        let due: Option<bool> = conn.exec_first(sql, (id,)).await.expect("next_retry_at");
        due.unwrap_or_else(|| panic!("no row {id}"))
    }

    /// Runs one statement as root.
    pub async fn exec(&self, sql: &str) {
        self.pool.get_conn().await.expect("conn").query_drop(sql).await.expect(sql);
    }
}

/// One step of a transaction written statement by statement.
#[derive(Clone)]
pub enum Step {
    /// Outbox rows, in one INSERT.
    Insert(Vec<Row>),
    /// Any statement (SAVEPOINT, ROLLBACK TO, a write to another table).
    Sql(String),
}

/// A prepared XA transaction waiting for its decision on its own connection.
pub struct PreparedXa {
    conn: Conn,
    xid: String,
}

impl PreparedXa {
    pub async fn commit(mut self) {
        self.conn.query_drop(format!("XA COMMIT '{}'", self.xid)).await.expect("xa commit");
    }

    pub async fn rollback(mut self) {
        self.conn.query_drop(format!("XA ROLLBACK '{}'", self.xid)).await.expect("xa rollback");
    }
}
