//! The leader's reading of operators' orders (pause, hand over) from its lease row, a
//! few times a second, so an order takes effect within [`READ_EVERY`] plus the drain.
//! The first read comes before the pipeline starts: a standby that takes over a
//! paused fleet never publishes.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Term;
use crate::store::{LeaseStore, Orders};

/// How often the leader reads its orders.
pub(crate) const READ_EVERY: Duration = Duration::from_millis(250);

/// The orders as last read; `None` until the first read succeeded.
pub(crate) type OrdersSeen = watch::Receiver<Option<Orders>>;

/// Reads the orders for `term` until `done`, publishing every change on `seen`. A
/// failed read changes nothing (the lease keeper reports a primary that does not
/// answer, and ends the term if it lasts); a read that finds the term gone neither.
pub(crate) async fn read_orders(
    lease: LeaseStore,
    term: Term,
    seen: watch::Sender<Option<Orders>>,
    done: CancellationToken,
) {
    let mut tick = tokio::time::interval(READ_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = done.cancelled() => return,
            _ = tick.tick() => {}
        }
        // A primary that does not answer must not hold up the term's end.
        let read = tokio::select! {
            () = done.cancelled() => return,
            read = lease.orders(term.number()) => read,
        };
        match read {
            Ok(Some(orders)) => {
                seen.send_if_modified(|last| {
                    let changed = last.as_ref() != Some(&orders);
                    *last = Some(orders.clone());
                    changed
                });
            }
            Ok(None) => {}
            Err(error) => tracing::debug!(%error, "cannot read the operators' orders; trying again"),
        }
    }
}
