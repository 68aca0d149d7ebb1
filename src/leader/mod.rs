//! One publisher per outbox table: the leader lease and what a term means.
//!
//! Every instance of a fleet runs the same checks and keeps its connections warm,
//! but only the holder of the lease in `outbox_relay_lease` runs the pipeline. A
//! standby tries to take the lease a few times a second ([`standby`]); the leader
//! renews it three times per term ([`keeper`]) and reads operators' orders (pause,
//! hand over) a few times a second ([`orders`]). The [`Term`] is the leader's own view
//! of its lease: it ends at a local deadline safely before the database's
//! `lease_until` (see [`TermTiming`]), and every send batch and every checkpoint
//! checks it first. Writes on the primary do not trust that view: they are fenced by
//! the term in SQL.

mod keeper;
mod orders;
mod standby;
mod term;

pub(crate) use keeper::{keep, Keeper};
pub(crate) use orders::{read_orders, OrdersSeen};
pub(crate) use standby::{wait_for_lease, Standby};
pub(crate) use term::{Term, TermTiming};
