//! A test's own outbox table on the stack's MariaDB (schema `app`, where the relay's
//! least-privilege users have their grants), and the queries the tests assert with.

use std::collections::HashMap;

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Pool, Value};
use outbox_relay::store::{migrate, OutboxTable};

use super::{unique, Stack};

/// One row to insert: event_id, biz_key, topic, payload.
pub struct Row {
    pub event_id: String,
    pub biz_key: String,
    pub topic: String,
    pub payload: String,
}

/// A fresh outbox table and a root pool on it.
pub struct TestOutbox {
    pub pool: Pool,
    pub table: OutboxTable,
}

impl TestOutbox {
    pub async fn create(stack: &Stack) -> Self {
        let pool = stack.root_pool().await;
        let table = OutboxTable { schema: "app".to_owned(), table: unique("outbox") };
        migrate(&pool, &table).await.expect("migrate test outbox");
        Self { pool, table }
    }

    pub fn name(&self) -> &str {
        &self.table.table
    }

    /// Inserts `rows` as one multi-row INSERT in one committed transaction.
    pub async fn insert_tx(&self, rows: &[Row]) {
        self.write_tx(rows, true).await;
    }

    /// Inserts `rows` in a transaction that is rolled back.
    pub async fn insert_rolled_back(&self, rows: &[Row]) {
        self.write_tx(rows, false).await;
    }

    async fn write_tx(&self, rows: &[Row], commit: bool) {
        let mut conn = self.pool.get_conn().await.expect("conn");
        let mut tx = conn.start_transaction(Default::default()).await.expect("begin");
        for chunk in rows.chunks(1_000) {
            let (sql, params) = self.insert_sql(chunk);
            tx.exec_drop(sql, params).await.expect("insert outbox rows");
        }
        if commit {
            tx.commit().await.expect("commit");
        } else {
            tx.rollback().await.expect("rollback");
        }
    }

    /// A multi-row INSERT statement for `rows`.
    pub fn insert_sql(&self, rows: &[Row]) -> (String, Params) {
        let values = vec!["(?, ?, ?, ?)"; rows.len()].join(", ");
        let sql = format!("INSERT INTO {} (event_id, biz_key, topic, payload) VALUES {values}", self.table.qualified());
        let params: Vec<Value> = rows
            .iter()
            .flat_map(|r| {
                [
                    r.event_id.as_str().into(),
                    r.biz_key.as_str().into(),
                    r.topic.as_str().into(),
                    r.payload.as_str().into(),
                ]
            })
            .collect();
        (sql, Params::Positional(params))
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
    pub async fn count_status(&self, status: u8) -> usize {
        self.statuses().await.values().filter(|(s, _)| *s == status).count()
    }

    /// Runs one statement as root.
    pub async fn exec(&self, sql: &str) {
        self.pool.get_conn().await.expect("conn").query_drop(sql).await.expect(sql);
    }
}
