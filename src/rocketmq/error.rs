//! What went wrong with a send, and which of three classes it belongs to.
//!
//! - [`ErrorClass::Outage`]: the broker cannot take anything right now (connection
//!   refused or reset, timeout, no route, no permission while it is read-only, busy,
//!   flush or replica timeouts, any answer other than SEND_OK). Trying again later
//!   will work; it says nothing about the event, so it never counts toward
//!   `retry.max_retry` and never makes an event FAILED.
//! - [`ErrorClass::Event`]: this event can never be sent as it is (body over the
//!   broker's limit, an illegal message). It fails alone, at once.
//! - [`ErrorClass::Unknown`]: anything else. Repeated `retry.max_retry` times, it
//!   fails the event.
//!
//! RocketMQ's non-OK statuses (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,
//! SLAVE_NOT_AVAILABLE) arrive as a successful call; they are outages here. A timeout
//! may have stored the message: sending again is right (a duplicate is accepted, loss
//! is not).

use outbox_kit::{full_message, ClientError as KitClientError};
use rocketmq_client_rust::ClientError;
use rocketmq_error::CanonicalCondition;

use super::layout::LayoutChanged;
use super::SendStatus;

/// What a failed send says about the broker and the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// The broker cannot take anything now; the event is fine.
    Outage,
    /// The event can never be sent as it is.
    Event,
    /// Neither is known.
    Unknown,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 3] = [ErrorClass::Outage, ErrorClass::Event, ErrorClass::Unknown];

    /// The label value in metrics.
    pub fn name(self) -> &'static str {
        match self {
            ErrorClass::Outage => "outage",
            ErrorClass::Event => "event",
            ErrorClass::Unknown => "unknown",
        }
    }
}

/// A send that did not end in SEND_OK.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PublishError {
    #[error("broker answered {status} (not SEND_OK): {}", status.meaning())]
    NotSendOk { status: SendStatus },
    #[error(
        "topic {topic} does not exist on the cluster: create it with {queue_count} queues, or fix the row's topic"
    )]
    TopicMissing { topic: String, queue_count: u32 },
    #[error("message body of event {event_id} is {size} bytes, over the broker limit of {limit} bytes (rocketmq.max_message_bytes)")]
    BodyTooLarge { event_id: String, size: usize, limit: usize },
    #[error("topic {topic} has {live} writable queues but queue_count is pinned to {pinned}: a broker of the cluster may be down (the route leaves out its queues) or the topic has other queues than pinned; never change queue_count to match (keys would move to other queues): restart the missing broker, or create the topic with {pinned} queues")]
    QueueCountMismatch { topic: String, pinned: u32, live: usize },
    #[error("topic {topic}'s queue layout changed on a broker that is up: {change}; routing by another layout would move keys to other queues and break their order: restore the topic's queues on that broker as pinned, or, once every event of the topic is delivered, pin the new layout (docs/operations.md, \"Changing a topic's queues\")")]
    LayoutChanged { topic: String, change: LayoutChanged },
    /// The time a send was given (its leader term's) ran out before the request was
    /// written: nothing reached the broker.
    #[error("the leader term had no time left to send in: not sent")]
    NoTimeLeft,
    /// The cluster's brokers do not fit what was asked of them (an operator command).
    #[error("{detail}")]
    Cluster { detail: String },
    #[error(
        "RocketMQ {operation} failed{}: {detail}{}",
        code.map(|c| format!(" (broker code {c})")).unwrap_or_default(),
        code.and_then(|code| codes::hint(code, detail)).map(|hint| format!("; {hint}")).unwrap_or_default()
    )]
    Client {
        operation: &'static str,
        code: Option<i32>,
        detail: String,
        class: ErrorClass,
        /// The failure was a connection to a broker that could not be made.
        unreachable: bool,
    },
}

/// Broker response codes with a known class.
mod codes {
    pub const SYSTEM_BUSY: i32 = 2;
    pub const FLUSH_DISK_TIMEOUT: i32 = 10;
    pub const SLAVE_NOT_AVAILABLE: i32 = 11;
    pub const FLUSH_SLAVE_TIMEOUT: i32 = 12;
    pub const MESSAGE_ILLEGAL: i32 = 13;
    pub const SERVICE_NOT_AVAILABLE: i32 = 14;
    pub const NO_PERMISSION: i32 = 16;
    pub const TOPIC_NOT_EXIST: i32 = 17;
    /// A topic that has gone missing mid-run is held like an outage: it was there
    /// when its lanes started (the coordinator decides about topics it never saw).
    pub const OUTAGE: [i32; 8] = [
        SYSTEM_BUSY,
        FLUSH_DISK_TIMEOUT,
        SLAVE_NOT_AVAILABLE,
        FLUSH_SLAVE_TIMEOUT,
        SERVICE_NOT_AVAILABLE,
        NO_PERMISSION,
        TOPIC_NOT_EXIST,
        // The client's own "no route to the topic" and "broker not found".
        10_003,
    ];

    /// Whether an answer's text is what a broker that enforces ACL (Apache RocketMQ
    /// 5.x) says, under NO_PERMISSION, of a request whose credentials it does not accept:
    /// a wrong secret, no keys, an unknown or disabled user. (The client reports some
    /// refusals with the code in the text only, so the text decides.)
    pub fn refuses_credentials(detail: &str) -> bool {
        let user_refused =
            detail.contains("User:") && (detail.contains("is not found") || detail.contains("is disabled"));
        detail.contains("check signature failed") || detail.contains("username cannot be null") || user_refused
    }

    /// What an operator can do about an answer whose own text says little (the broker
    /// answers a full store disk with a bare "operation failed").
    pub fn hint(code: i32, detail: &str) -> Option<&'static str> {
        match code {
            _ if refuses_credentials(detail) => Some(
                "the broker enforces ACL and does not accept the relay's credentials: set rocketmq.access_key and rocketmq.secret_key (or secret_key_file) to a user of the cluster (mqadmin getUser -u KEY shows one)",
            ),
            SYSTEM_BUSY | SERVICE_NOT_AVAILABLE => Some(
                "the broker refuses writes for now: most often its store disk counts as full (used = 1 - available/size, over diskSpaceWarningLevelRatio, 90% by default; it takes writes again below 85%), else its page cache is busy; free space on the broker's store disk and read the broker's log",
            ),
            NO_PERMISSION => {
                Some("the broker or the topic is not writable (brokerPermission, or the topic's perm): make both writable")
            }
            _ => None,
        }
    }
}

impl From<KitClientError> for PublishError {
    /// A client that could not be set up.
    fn from(error: KitClientError) -> Self {
        PublishError::Client {
            operation: error.operation,
            code: error.code,
            detail: error.detail,
            class: ErrorClass::Unknown,
            unreachable: false,
        }
    }
}

impl PublishError {
    /// What this failure says about the broker and the event.
    pub fn class(&self) -> ErrorClass {
        match self {
            PublishError::NotSendOk { .. }
            | PublishError::TopicMissing { .. }
            | PublishError::QueueCountMismatch { .. }
            | PublishError::LayoutChanged { .. }
            | PublishError::Cluster { .. }
            | PublishError::NoTimeLeft => ErrorClass::Outage,
            PublishError::BodyTooLarge { .. } => ErrorClass::Event,
            PublishError::Client { class, .. } => *class,
        }
    }

    /// Classifies a client error from `operation`.
    pub fn from_client(operation: &'static str, error: &ClientError) -> Self {
        let code = error.broker_response_code();
        let descriptor = error.descriptor();
        let condition = descriptor.condition();
        let detail = format!("{} [{}]", full_message(error), condition.as_str());
        let unreachable = code.is_none()
            && matches!(condition, CanonicalCondition::Unavailable | CanonicalCondition::DeadlineExceeded);
        let class = classify(code, descriptor.code().as_str(), condition);
        PublishError::Client { operation, code, detail, class, unreachable }
    }

    /// Whether the broker answered NO_PERMISSION: a broker or topic that is not
    /// writable, or (on a read, which nothing makes unwritable) an ACL refusal.
    pub fn no_permission(&self) -> bool {
        matches!(self, PublishError::Client { code: Some(codes::NO_PERMISSION), .. })
    }

    /// Whether a broker that enforces ACL refused the request's credentials.
    pub fn credentials_refused(&self) -> bool {
        matches!(self, PublishError::Client { detail, .. } if codes::refuses_credentials(detail))
    }

    /// The failure with the broker's own words added (the client keeps only the code).
    pub(crate) fn with_remark(mut self, remark: Option<&str>) -> Self {
        if let (PublishError::Client { detail, .. }, Some(remark)) = (&mut self, remark.filter(|r| !r.is_empty())) {
            detail.push_str(&format!("; the broker says: {remark}"));
        }
        self
    }

    /// The failure, judged to be of `class` by what the broker said.
    pub(crate) fn with_class(mut self, judged: ErrorClass) -> Self {
        if let PublishError::Client { class, .. } = &mut self {
            *class = judged;
        }
        self
    }

    /// Whether the failure was a connection to a broker that could not be made.
    pub fn unreachable(&self) -> bool {
        matches!(self, PublishError::Client { unreachable: true, .. })
    }

    /// The class of this failure of a send to a broker, given how many of that
    /// broker's queues got an answer of unknown class since its last confirmed send. An
    /// answer of the broker itself (a response code) that more than one of its queues
    /// gets is the broker's trouble, not an event's: an outage, held and never FAILED.
    /// Seen on one queue alone it counts against the batch (and `retry.max_retry`), so
    /// one bad event cannot hold its queue for ever.
    pub fn class_on_broker(&self, refusing_queues: usize) -> ErrorClass {
        match (self.class(), self) {
            (ErrorClass::Unknown, PublishError::Client { code: Some(_), .. }) if refusing_queues > 1 => {
                ErrorClass::Outage
            }
            (class, _) => class,
        }
    }
}

/// The client's own error codes that blame the message itself (its body, its
/// properties): the same message can never be sent.
const EVENT_ERRORS: [&str; 4] =
    ["core.argument.invalid", "broker.message.invalid", "protocol.body.invalid", "protocol.message.property.invalid"];

/// The class of a client error: the broker's answer code first, then the client's
/// error code (`descriptor`) for what blames the message, then the client's general
/// description of what happened.
pub fn classify(code: Option<i32>, descriptor: &str, condition: CanonicalCondition) -> ErrorClass {
    match code {
        Some(codes::MESSAGE_ILLEGAL) => ErrorClass::Event,
        Some(code) if codes::OUTAGE.contains(&code) => ErrorClass::Outage,
        _ if EVENT_ERRORS.contains(&descriptor) => ErrorClass::Event,
        _ => match condition {
            CanonicalCondition::Unavailable
            | CanonicalCondition::DeadlineExceeded
            | CanonicalCondition::ResourceExhausted
            | CanonicalCondition::PermissionDenied
            | CanonicalCondition::NotFound
            | CanonicalCondition::Aborted
            | CanonicalCondition::Cancelled => ErrorClass::Outage,
            _ => ErrorClass::Unknown,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unavailable_broker_is_an_outage_whatever_it_answers() {
        for code in [2, 10, 11, 12, 14, 16, 17] {
            assert_eq!(classify(Some(code), "x.y.z", CanonicalCondition::Internal), ErrorClass::Outage, "code {code}");
        }
        for condition in [CanonicalCondition::Unavailable, CanonicalCondition::DeadlineExceeded] {
            assert_eq!(classify(None, "transport.connection.failed", condition), ErrorClass::Outage, "{condition:?}");
        }
        assert_eq!(PublishError::NotSendOk { status: SendStatus::FlushDiskTimeout }.class(), ErrorClass::Outage);
    }

    #[test]
    fn only_what_the_event_itself_causes_is_event_class() {
        assert_eq!(classify(Some(13), "x.y.z", CanonicalCondition::Internal), ErrorClass::Event);
        let too_large_for_the_client = classify(None, "core.argument.invalid", CanonicalCondition::InvalidArgument);
        assert_eq!(too_large_for_the_client, ErrorClass::Event);
        let shrunk_queues = classify(None, "broker.queue.id_out_of_range", CanonicalCondition::InvalidArgument);
        assert_eq!(shrunk_queues, ErrorClass::Unknown, "not the event's fault");
        let too_large = PublishError::BodyTooLarge { event_id: "e".into(), size: 5, limit: 4 };
        assert_eq!(too_large.class(), ErrorClass::Event);
    }

    #[test]
    fn a_bare_refusal_names_the_likely_cause_and_the_fix() {
        let refused = |code| PublishError::Client {
            operation: "send",
            code: Some(code),
            detail: "broker.operation.failed: Broker operation failed [internal]".into(),
            class: ErrorClass::Outage,
            unreachable: false,
        };
        let full_disk = refused(2).to_string();
        for needed in [
            "(broker code 2)",
            "Broker operation failed",
            "1 - available/size",
            "diskSpaceWarningLevelRatio",
            "free space",
        ] {
            assert!(full_disk.contains(needed), "{needed} missing from: {full_disk}");
        }
        assert!(refused(16).to_string().contains("brokerPermission"));
        let signature = PublishError::Client {
            operation: "send",
            code: Some(16),
            detail: "broker.operation.failed: check signature failed. [permission_denied]".into(),
            class: ErrorClass::Outage,
            unreachable: false,
        };
        assert!(signature.credentials_refused());
        assert!(signature.to_string().contains("rocketmq.secret_key"), "{signature}");
        assert!(!refused(16).credentials_refused(), "a read-only broker refuses no credentials");
        assert!(!refused(1).to_string().contains("; "), "no hint where none is known: {}", refused(1));
    }

    #[test]
    fn an_unknown_answer_several_queues_of_a_broker_get_is_an_outage_of_the_broker() {
        let answered = |code| PublishError::Client {
            operation: "send",
            code,
            detail: "SYSTEM_ERROR".into(),
            class: ErrorClass::Unknown,
            unreachable: false,
        };
        assert_eq!(answered(Some(1)).class_on_broker(2), ErrorClass::Outage, "two of the broker's queues get it");
        assert_eq!(answered(Some(1)).class_on_broker(1), ErrorClass::Unknown, "one queue alone: the batch's");
        assert_eq!(answered(None).class_on_broker(3), ErrorClass::Unknown, "no answer of the broker: unknown");
        let illegal = PublishError::BodyTooLarge { event_id: "e".into(), size: 5, limit: 4 };
        assert_eq!(illegal.class_on_broker(3), ErrorClass::Event, "about the event whatever the broker does");
    }

    #[test]
    fn the_rest_is_unknown() {
        assert_eq!(classify(Some(1), "x.y.z", CanonicalCondition::Internal), ErrorClass::Unknown);
        assert_eq!(classify(None, "x.y.z", CanonicalCondition::DataLoss), ErrorClass::Unknown);
    }
}
