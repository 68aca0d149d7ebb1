//! The RocketMQ side: a synchronous producer that sends batches to one queue and
//! reports SEND_OK or a classified error, never a silent "no exception = sent".
//! The client runtime and settings are the kit's, shared with its consumer.

mod batch;
mod brokers;
mod error;
mod layout;
mod message;
mod msg_id;
mod prepared;
mod producer;
mod publisher;
mod request;
mod status;

pub use error::{classify, ErrorClass, PublishError};
pub use layout::{LayoutChanged, QueueLayout, Resolved};
pub use message::{check_delivery_time, check_size};
pub use outbox_kit::{client_config, full_message, ClientHost};
pub use prepared::{prepare, Prepared};
pub use producer::{Producer, ProducerSettings, SendReceipt};
pub use publisher::{Publisher, PROBE_EVERY};
pub use status::SendStatus;
