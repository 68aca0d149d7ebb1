//! What went wrong with a send, and whether trying again can help.
//!
//! RocketMQ's non-OK statuses (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,
//! SLAVE_NOT_AVAILABLE) arrive as a successful call; they are errors here. A timeout
//! may have stored the message: it is retryable (a duplicate is accepted, loss is not).
//! Only what can never succeed by retrying (missing topic, oversized body, no
//! permission) is non-retryable, so the row goes FAILED at once.

use outbox_kit::{full_message, ClientError as KitClientError};
use rocketmq_client_rust::ClientError;

/// Whether the same send can succeed later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    Retryable,
    NonRetryable,
}

/// A send that did not end in SEND_OK.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PublishError {
    #[error("broker answered {status} (not SEND_OK): the message is not confirmed stored")]
    NotSendOk { status: String },
    #[error(
        "topic {topic} does not exist on the cluster: create it with {queue_count} queues, or fix the row's topic"
    )]
    TopicMissing { topic: String, queue_count: u32 },
    #[error("message body of event {event_id} is {size} bytes, over the broker limit of {limit} bytes (rocketmq.max_message_bytes)")]
    BodyTooLarge { event_id: String, size: usize, limit: usize },
    #[error("topic {topic} has {live} writable queues but queue_count is pinned to {pinned}: fix rocketmq.topics.{topic}.queue_count or the topic")]
    QueueCountMismatch { topic: String, pinned: u32, live: usize },
    #[error("RocketMQ {operation} failed{}: {detail}", code.map(|c| format!(" (broker code {c})")).unwrap_or_default())]
    Client { operation: &'static str, code: Option<i32>, detail: String, retry: Retry },
}

/// Broker response codes that retrying cannot fix.
mod codes {
    pub const MESSAGE_ILLEGAL: i32 = 13;
    pub const NO_PERMISSION: i32 = 16;
    pub const TOPIC_NOT_EXIST: i32 = 17;
}

impl From<KitClientError> for PublishError {
    /// A client that could not be set up: nothing to retry.
    fn from(error: KitClientError) -> Self {
        PublishError::Client {
            operation: error.operation,
            code: error.code,
            detail: error.detail,
            retry: Retry::NonRetryable,
        }
    }
}

impl PublishError {
    /// Whether the same send can succeed later.
    pub fn retry(&self) -> Retry {
        match self {
            PublishError::NotSendOk { .. } => Retry::Retryable,
            PublishError::TopicMissing { .. }
            | PublishError::BodyTooLarge { .. }
            | PublishError::QueueCountMismatch { .. } => Retry::NonRetryable,
            PublishError::Client { retry, .. } => *retry,
        }
    }

    /// Classifies a client error from `operation`.
    pub fn from_client(operation: &'static str, error: &ClientError) -> Self {
        let code = error.broker_response_code();
        let detail = full_message(error);
        let non_retryable =
            matches!(code, Some(codes::MESSAGE_ILLEGAL | codes::NO_PERMISSION | codes::TOPIC_NOT_EXIST));
        let retry = if non_retryable { Retry::NonRetryable } else { Retry::Retryable };
        PublishError::Client { operation, code, detail, retry }
    }
}
