//! A steady write load on a test's outbox table, for tests that disturb the relay
//! while rows keep arriving.

use std::time::Duration;

use outbox_kit::RowStatus;

use super::events::Events;
use super::eventually;
use super::outbox::{Row, TestOutbox};

/// Rows written one per transaction, keys round-robin, until stopped: per key,
/// sequence numbers follow commit order.
pub struct Load {
    stop: tokio::sync::watch::Sender<bool>,
    writer: tokio::task::JoinHandle<usize>,
}

impl Load {
    /// Starts writing rows of `keys` keys and returns once `first` rows are SENT.
    pub async fn started(outbox: &TestOutbox, events: &Events, keys: usize, first: usize) -> Self {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (pool, table) = (outbox.pool.clone(), outbox.table.clone());
        let rows: Vec<Row> = (0..100_000).map(|i| events.row(&format!("key{}", i % keys), i / keys)).collect();
        let writer = tokio::spawn(async move {
            let outbox = TestOutbox { pool, table };
            let mut written = 0;
            for chunk in rows.chunks(keys) {
                if *stopped.borrow() {
                    break;
                }
                for row in chunk {
                    outbox.insert_tx(std::slice::from_ref(row)).await;
                }
                written += chunk.len();
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            written
        });
        eventually("the first rows SENT", Duration::from_secs(60), || async {
            (outbox.count_status(RowStatus::Sent).await >= first).then_some(())
        })
        .await;
        Self { stop, writer }
    }

    /// Stops writing; how many rows were written.
    pub async fn finish(self) -> usize {
        self.stop.send(true).expect("stop the load");
        self.writer.await.expect("load")
    }
}
