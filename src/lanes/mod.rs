//! The lanes: one ordered sender per queue ([`lane`]), how each event's end is made
//! durable before it is reported ([`recorder`]), and the keys held behind a FAILED
//! event ([`held`]). The coordinator routes events in and takes the [`outcome`]s back.

mod held;
mod lane;
mod outage;
mod outcome;
mod recorder;

pub(crate) use held::{HeldKey, HeldKeys, Waiting};
pub(crate) use lane::{run_failing, Lane, LaneInput, LaneSettings};
pub(crate) use outage::OutageFlag;
pub(crate) use outcome::{Attempts, LaneEvent, LaneReport, Outcome, QueueSlot};
pub(crate) use recorder::Recorder;
