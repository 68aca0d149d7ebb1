//! A consumer's database of its own, with the consumer kit's tables (the dedup table
//! and the rest), as a consuming service would have.

use mysql_async::prelude::Queryable;
use mysql_async::Pool;
use outbox_kit::consumer::schema;

use super::{unique, Stack};

/// A new database with the kit's tables: its name and a root pool on it.
pub async fn consumer_db(stack: &Stack) -> (String, Pool) {
    let name = unique("consumer");
    let root = stack.root_pool().await;
    root.get_conn().await.expect("conn").query_drop(format!("CREATE DATABASE `{name}`")).await.expect("create db");
    let pool = Pool::new(stack.root_url.replacen("/app", &format!("/{name}"), 1).as_str());
    schema::migrate(&pool).await.expect("the kit's tables");
    (name, pool)
}

/// A consumer database with a business table besides, `benefits`: one row per order
/// a benefits service processed, with the event that made it.
pub async fn benefits_db(stack: &Stack) -> Pool {
    let (_, pool) = consumer_db(stack).await;
    pool.get_conn()
        .await
        .expect("conn")
        .query_drop("CREATE TABLE benefits (id BIGINT PRIMARY KEY AUTO_INCREMENT, order_id BIGINT NOT NULL, event_id VARCHAR(64) NOT NULL)")
        .await
        .expect("benefits table");
    pool
}

/// The number the counting query `sql` returns on `pool` (0 for no row).
pub async fn count(pool: &Pool, sql: &str) -> u64 {
    pool.get_conn().await.expect("conn").query_first::<u64, _>(sql).await.expect(sql).unwrap_or(0)
}
