//! The RocketMQ side: a synchronous producer that sends batches to one queue and
//! reports SEND_OK or a classified error, never a silent "no exception = sent".

mod client_host;
mod error;
mod message;
mod producer;

pub use client_host::ClientHost;
pub use error::{full_message, PublishError, Retry};

/// Client settings shared by producers and consumers: the NameServer list, and no
/// VIP channel (it would dial listenPort-2, which a minimal broker may not serve).
pub fn client_config(namesrv: &str) -> rocketmq_client_rust::ClientConfig {
    rocketmq_client_rust::ClientConfig {
        namesrv_addr: Some(namesrv.to_owned().into()),
        vip_channel_enabled: false,
        ..Default::default()
    }
}
pub use message::{check_size, prepare, to_message, Prepared, PROPERTY_BIZ_KEY, PROPERTY_EVENT_ID};
pub use producer::{Producer, ProducerSettings, SendReceipt};
