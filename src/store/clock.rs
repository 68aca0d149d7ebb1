//! How far the primary's local clock reading is ahead of this host's clock, to a
//! fraction of a millisecond, so an outbox row's `created_at` (the primary's local
//! time, in the zone its sessions write in) becomes an instant of this host's clock.
//!
//! Each probe asks `NOW(6)` a few times on one connection, a statement with nothing
//! else to do, and keeps the sample with the shortest round trip: the database read
//! its clock somewhere inside the round trip, so the middle of the shortest one is the
//! closest guess (the method NTP uses), and a loaded primary's slow answers are left
//! out instead of skewing every latency by half their round trip.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Pool, Value};

use crate::event::local_micros;

/// Round trips per probe.
const SAMPLES: usize = 3;

/// One reading: this host's clock before and after the round trip, and the database's
/// clock read inside it (unix microseconds, the database's as if its local time were UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    asked_us: i64,
    answered_us: i64,
    db_us: i64,
}

impl Sample {
    fn round_trip(&self) -> i64 {
        self.answered_us - self.asked_us
    }

    fn db_ahead_us(&self) -> i64 {
        self.db_us - (self.asked_us + (self.answered_us - self.asked_us) / 2)
    }
}

/// Microseconds the primary's `NOW(6)` reads ahead of this host's clock; `None` if the
/// database answered no date.
pub(super) async fn db_ahead_us(pool: &Pool) -> Result<Option<i64>, mysql_async::Error> {
    let mut conn = pool.get_conn().await?;
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let asked_us = unix_micros_now();
        let now = local_now_us(&mut conn).await?;
        let answered_us = unix_micros_now();
        if let Some(db_us) = now {
            samples.push(Sample { asked_us, answered_us, db_us });
        }
    }
    Ok(shortest_round_trip(&samples).map(|s| s.db_ahead_us()))
}

/// The database's `NOW(6)` in microseconds, read as `created_at` is (as if its local
/// time were UTC); `None` if it answered no date.
pub(super) async fn local_now_us(conn: &mut Conn) -> Result<Option<i64>, mysql_async::Error> {
    // The binary protocol, so NOW(6) comes back as a date, not as text.
    let now: Option<Value> = conn.exec_first("SELECT NOW(6)", ()).await?;
    Ok(now.as_ref().and_then(local_micros))
}

fn shortest_round_trip(samples: &[Sample]) -> Option<Sample> {
    samples.iter().copied().min_by_key(Sample::round_trip)
}

fn unix_micros_now() -> i64 {
    i64::try_from(crate::time::unix_micros_now()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shortest_round_trip_decides_and_its_middle_is_the_databases_instant() {
        let slow = Sample { asked_us: 1_000, answered_us: 9_000, db_us: 3_600_002_000 };
        let quick = Sample { asked_us: 10_000, answered_us: 10_200, db_us: 3_600_010_150 };
        let best = shortest_round_trip(&[slow, quick]);
        assert_eq!(best, Some(quick));
        assert_eq!(quick.db_ahead_us(), 3_600_000_050);
        assert_eq!(slow.db_ahead_us(), 3_599_997_000);
        assert_eq!(shortest_round_trip(&[]), None);
    }
}
