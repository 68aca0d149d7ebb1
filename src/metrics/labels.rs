//! The label values of the relay's metrics: closed sets, each an enum, so a typo
//! cannot make a new series and every value can be shown (as 0) before it happens.

use std::fmt::Write;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

use crate::rocketmq::{ErrorClass, SendStatus};

/// Writes a label value by its name.
macro_rules! label_value {
    ($type:ty) => {
        impl EncodeLabelValue for $type {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                encoder.write_str(self.name())
            }
        }
    };
}

/// Which path brought an event to the broker.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Path {
    /// Read from the binlog.
    Binlog,
    /// Claimed by the polling sweep.
    Sweep,
}

impl Path {
    pub const ALL: [Path; 2] = [Path::Binlog, Path::Sweep];

    pub fn name(self) -> &'static str {
        match self {
            Path::Binlog => "binlog",
            Path::Sweep => "sweep",
        }
    }
}
label_value!(Path);

label_value!(SendStatus);

/// Why an event was marked FAILED.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum FailReason {
    /// Its message is over the broker's size limit.
    TooLarge,
    /// The broker refused the message itself (illegal body or properties).
    Rejected,
    /// Sends failed for an unknown reason `retry.max_retry` times.
    RetriesExhausted,
    /// Its topic is neither on the cluster nor configured.
    NoTopic,
    /// The row cannot be read as an event.
    Malformed,
}

impl FailReason {
    pub const ALL: [FailReason; 5] = [
        FailReason::TooLarge,
        FailReason::Rejected,
        FailReason::RetriesExhausted,
        FailReason::NoTopic,
        FailReason::Malformed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FailReason::TooLarge => "too_large",
            FailReason::Rejected => "rejected",
            FailReason::RetriesExhausted => "retries_exhausted",
            FailReason::NoTopic => "no_topic",
            FailReason::Malformed => "malformed",
        }
    }
}
label_value!(FailReason);

/// Why a row of the outbox was not changed as a write meant to change it.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum WriteMiss {
    /// A SENT write-back found the row SENT or SKIPPED already: an event published
    /// again after a restart or a takeover. Expected; not alerted on.
    SentAlready,
    /// A SENT write-back left a row unsent (no longer this relay's, or its leader
    /// term ended): it is published again.
    SentUnchanged,
    /// A SENT write-back failed every attempt.
    SentGaveUp,
    /// A SENT write-back panicked (a bug; the relay stops).
    SentPanicked,
    /// The SENT writer had stopped (the pipeline is stopping).
    SentWriterStopped,
    /// A FAILED mark changed fewer rows than it was given.
    FailedUnchanged,
}

impl WriteMiss {
    pub const ALL: [WriteMiss; 6] = [
        WriteMiss::SentAlready,
        WriteMiss::SentUnchanged,
        WriteMiss::SentGaveUp,
        WriteMiss::SentPanicked,
        WriteMiss::SentWriterStopped,
        WriteMiss::FailedUnchanged,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WriteMiss::SentAlready => "sent_already",
            WriteMiss::SentUnchanged => "sent_unchanged",
            WriteMiss::SentGaveUp => "sent_gave_up",
            WriteMiss::SentPanicked => "sent_panicked",
            WriteMiss::SentWriterStopped => "sent_writer_stopped",
            WriteMiss::FailedUnchanged => "failed_unchanged",
        }
    }
}

label_value!(WriteMiss);

label_value!(ErrorClass);

/// Which outbox status a row count is of, in lower case (`pending`, `sent`, ...).
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub struct RowStatusValue(pub outbox_kit::RowStatus);

impl EncodeLabelValue for RowStatusValue {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(&self.0.name().to_ascii_lowercase())
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabel {
    pub path: Path,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SendStatusLabel {
    pub status: SendStatus,
}

/// A broker and one of its answers.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BrokerAnswerLabel {
    pub broker: String,
    pub status: SendStatus,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    pub class: ErrorClass,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: FailReason,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MissLabel {
    pub miss: WriteMiss,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RowStatusLabel {
    pub status: RowStatusValue,
}

/// One lane: a queue of a topic on a broker.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub topic: String,
    pub broker: String,
    pub queue: u32,
}

/// A broker of the cluster, by its name.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BrokerLabel {
    pub broker: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabel {
    pub version: &'static str,
}
