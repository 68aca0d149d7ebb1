//! Cleanup of old dedup rows.
//!
//! A dedup row must outlive every possible redelivery of its event, or a late copy
//! is processed again. Copies come from the broker (messages are kept for
//! `fileReservedTime`, 72 h by default, and can be re-consumed by resetting offsets),
//! from the relay (a resend after a crash, minutes), and from manual DLQ replays. So
//! keep dedup rows longer than the broker's retention: the default is 7 days.
//! REJECTED rows are kept like the rest; their quarantine rows are never deleted here.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Pool;

/// Default dedup retention: comfortably longer than the broker's 72 h default.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Deletes dedup rows older than `retention`, `batch` rows per statement (small
/// transactions, no long locks). Returns how many were deleted.
pub async fn cleanup_dedup(pool: &Pool, retention: Duration, batch: usize) -> Result<u64, mysql_async::Error> {
    let mut conn = pool.get_conn().await?;
    let seconds = retention.as_secs();
    let mut deleted = 0;
    loop {
        conn.exec_drop(
            "DELETE FROM event_dedup WHERE created_at < NOW(3) - INTERVAL ? SECOND ORDER BY created_at LIMIT ?",
            (seconds, batch.max(1)),
        )
        .await?;
        let affected = conn.affected_rows();
        deleted += affected;
        if affected < batch.max(1) as u64 {
            return Ok(deleted);
        }
    }
}
