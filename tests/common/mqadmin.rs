//! Apache RocketMQ's own admin tool, mqadmin, as the judge of what the brokers hold:
//! run through `scripts/stack mqadmin` against the stack's NameServer.

use std::process::Command;

/// One message mqadmin found by key: its id, queue and offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub msg_id: String,
    pub queue_id: u32,
    pub offset: u64,
}

/// `mqadmin deleteTopic -c DefaultCluster -t TOPIC`: the topic deleted from every
/// master of the stack's cluster and from the NameServer.
pub fn delete_topic(topic: &str) {
    let text = mqadmin(&["deleteTopic", "-c", "DefaultCluster", "-t", topic]);
    assert!(text.contains("delete topic [") && text.contains("success"), "mqadmin deleteTopic failed:\n{text}");
}

/// `mqadmin queryMsgByKey -t TOPIC -k KEY`: every message of `topic` whose KEYS hold
/// `key` (none when mqadmin answers that the query found no message).
pub fn query_msg_by_key(topic: &str, key: &str) -> Vec<Found> {
    let text = mqadmin(&["queryMsgByKey", "-t", topic, "-k", key]);
    if text.contains("query message by key finished, but no message") {
        return Vec::new();
    }
    assert!(!text.contains("Exception"), "mqadmin queryMsgByKey failed:\n{text}");
    text.lines().filter(|line| !line.starts_with('#')).filter_map(found).collect()
}

/// A result line: message id, queue id, offset, index key.
fn found(line: &str) -> Option<Found> {
    let mut fields = line.split_whitespace();
    let msg_id = fields.next()?.to_owned();
    let queue_id = fields.next()?.parse().ok()?;
    let offset = fields.next()?.parse().ok()?;
    Some(Found { msg_id, queue_id, offset })
}

/// Runs mqadmin with `args`; what it printed (it exits 0 whether the command worked
/// or not, so callers judge by the text).
fn mqadmin(args: &[&str]) -> String {
    let stack = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/stack");
    let output = Command::new(stack).arg("mqadmin").args(args).output().expect("run scripts/stack mqadmin");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "scripts/stack mqadmin {args:?} failed:\n{text}");
    text
}
