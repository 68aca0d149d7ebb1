//! What operators run besides the relay itself, one module per command family:
//! `check` (every start-up check in one report), `position` (show and set the binlog
//! position), `manual` (list, requeue and skip FAILED rows; delete SENT rows past their
//! retention), `orders` (pause, resume and hand over the leader), `retention` (the leader's schedule that bounds the table: row deletes, or
//! partitions added ahead and expired ones dropped), `report` (`status` from the
//! primary), `probe` (a running relay's own account), `reconcile` (the outbox against a
//! consumer's dedup table), `verify` (SENT rows looked up on the broker, also on the
//! leader's schedule) and `admin` (topics and test sends on the broker). Each
//! holds its own queries; the data path imports nothing from here.

pub mod admin;
pub mod check;
pub mod manual;
pub mod orders;
pub mod position;
pub mod probe;
pub mod reconcile;
pub mod report;
pub(crate) mod retention;
pub mod verify;
