//! A relay whose ACL credentials a broker refuses can send nothing: it stops at start
//! with the access key named, instead of leading with every queue held.

use std::collections::BTreeSet;

use crate::config::Config;
use crate::error::RelayError;
use crate::rocketmq::{PublishError, Publisher};

/// Asks every broker of the first configured topic that has a route for a queue's
/// offset, a request a broker that enforces ACL authenticates like a send. A refusal
/// of the credentials stops the start; anything else (a broker down, no route yet) is
/// left to the lanes, which hold their queues until the broker answers.
pub(super) async fn check(publisher: &Publisher, config: &Config) -> Result<(), RelayError> {
    let producer = publisher.producer();
    for topic in config.rocketmq.topics.keys() {
        let Ok(queues) = producer.live_queues(topic).await else {
            continue;
        };
        let brokers: BTreeSet<String> = queues.iter().map(|queue| queue.broker_name().to_string()).collect();
        for broker in brokers {
            if let Err(error) = producer.reach(topic, &broker).await {
                if refused(&error) {
                    return Err(RelayError::Environment(refusal(config, &broker, topic)));
                }
            }
        }
        return Ok(());
    }
    Ok(())
}

/// Whether a broker refused a read because of who asked: NO_PERMISSION, which a read
/// gets only from a broker that enforces ACL and does not accept the credentials (or
/// the user's rights), or an answer whose text says the credentials were refused.
fn refused(error: &PublishError) -> bool {
    error.credentials_refused() || error.no_permission()
}

/// The start's refusal, naming the access key (never the secret) and the fix.
fn refusal(config: &Config, broker: &str, topic: &str) -> String {
    let key = config.rocketmq.access_key.as_deref().unwrap_or("(none: rocketmq.access_key is not set)");
    format!(
        "broker {broker} refused the relay's credentials, access key {key} (NO_PERMISSION to read a queue offset of topic {topic}): the broker enforces ACL and does not accept this key with rocketmq.secret_key (or secret_key_file), or the user has no right to the topic; set them to a user of the cluster (mqadmin getUser -u {key} shows one)"
    )
}
