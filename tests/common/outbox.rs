//! A test's own outbox table on the stack's MariaDB (schema `app`, where the relay's
//! least-privilege users have their grants), and the queries the tests assert with.

use std::collections::HashMap;

use mysql_async::prelude::Queryable;
use mysql_async::Pool;
use outbox_kit::{OutboxTable, RowStatus};
use outbox_relay::store::migrate;
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
            let (sql, params) = self.insert_params(chunk);
            tx.exec_drop(sql, params).await.expect("insert outbox rows");
        }
        if commit {
            tx.commit().await.expect("commit");
        } else {
            tx.rollback().await.expect("rollback");
        }
    }

    /// A multi-row INSERT of `rows` into this table.
    pub fn insert_params(&self, rows: &[Row]) -> (String, mysql_async::Params) {
        insert_sql(&self.table, rows.iter().cloned())
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

    /// Runs one statement as root.
    pub async fn exec(&self, sql: &str) {
        self.pool.get_conn().await.expect("conn").query_drop(sql).await.expect(sql);
    }
}
