//! The send request for one attempt of a prepared batch, and what the broker's answer
//! to it means.
//!
//! The relay builds the request itself instead of going through the client's producer
//! layer, which per send looks the message over again, rebuilds its properties text from
//! a map, runs hooks and decodes a result the relay does not use. The client still
//! connects, signs (ACL), correlates and times the request out.
//!
//! Both shapes use the compact header (single-letter field names): SEND_MESSAGE_V2 (310)
//! for one message, SEND_BATCH_MESSAGE (320) for a batch. A broker decodes it into the
//! same header as the long form of SEND_MESSAGE (10). The request names no namespace
//! and the address is the broker's own port, never its VIP channel: the relay's client
//! configuration sets neither.

use cheetah_string::CheetahString;
use rocketmq_client_rust::ClientError;
use rocketmq_model::common::topic::TopicValidator;
use rocketmq_protocol::code::request_code::RequestCode;
use rocketmq_protocol::code::response_code::ResponseCode;
use rocketmq_protocol::protocol::header::message_operation_header::send_message_request_header_v2::SendMessageRequestHeaderV2;
use rocketmq_protocol::protocol::remoting_command::RemotingCommand;
use rocketmq_protocol::rpc::rpc_request_header::RpcRequestHeader;
use rocketmq_protocol::rpc::topic_request_header::TopicRequestHeader;

use super::prepared::{Prepared, Shape};
use super::{ErrorClass, PublishError, SendStatus};

/// The queue count a broker would give a topic it creates on first send; the relay's
/// topics exist beforehand, so the broker never uses it.
const DEFAULT_TOPIC_QUEUE_NUMS: i32 = 4;

/// Where one attempt goes: the producer group it is sent as, and the queue.
pub(super) struct Destination<'a> {
    pub group: &'a CheetahString,
    pub broker: &'a CheetahString,
    pub queue_id: i32,
}

/// The request that sends `batch` to `to` now.
pub(super) fn send_request(batch: &Prepared, to: &Destination<'_>) -> RemotingCommand {
    let (code, is_batch) = match batch.shape {
        Shape::Single => (RequestCode::SendMessageV2, false),
        Shape::Batch => (RequestCode::SendBatchMessage, true),
    };
    let header = SendMessageRequestHeaderV2 {
        a: to.group.clone(),
        b: batch.topic.clone(),
        c: CheetahString::from_static_str(TopicValidator::AUTO_CREATE_TOPIC_KEY_TOPIC),
        d: DEFAULT_TOPIC_QUEUE_NUMS,
        e: to.queue_id,
        // No flag: bodies are never compressed, consumers see them as the application wrote them.
        f: 0,
        g: super::msg_id::now_millis(),
        h: 0,
        i: Some(batch.properties.clone()),
        j: Some(0),
        k: Some(false),
        l: None,
        m: Some(is_batch),
        n: Some(to.broker.clone()),
        topic_request_header: Some(TopicRequestHeader {
            rpc_request_header: Some(RpcRequestHeader { broker_name: Some(to.broker.clone()), ..Default::default() }),
            lo: None,
        }),
    };
    RemotingCommand::create_request_command(code, header).set_body(batch.body.clone())
}

/// The remark of a master that refuses a write before storing it because fewer of its
/// replicas are in sync than it must wait for (a broker with `enableSlaveActingMaster`
/// or in controller mode whose slave is down), under a bare SYSTEM_ERROR code.
const IN_SYNC_REPLICAS_NOT_ENOUGH: &str = "in-sync replicas not enough";

/// What an Apache RocketMQ broker says, under a bare SYSTEM_ERROR, of a send whose
/// encoded size is over its `maxMessageSize` (a batch holding an oversized event):
/// the events' fault, as MESSAGE_ILLEGAL is, so the batch is split to find them.
const BODY_SIZE_EXCEEDED: &str = "message body size exceeded";

/// `Ok` only on SEND_OK. The store's and replica's timeouts are answers, not errors,
/// and are reported as such, as is a master refusing for want of in-sync replicas;
/// any other code is the broker's refusal, classified.
pub(super) fn answer(code: i32, remark: Option<&str>, broker_address: &str) -> Result<(), PublishError> {
    let status = match ResponseCode::from(code) {
        ResponseCode::Success => return Ok(()),
        ResponseCode::FlushDiskTimeout => SendStatus::FlushDiskTimeout,
        ResponseCode::FlushSlaveTimeout => SendStatus::FlushSlaveTimeout,
        ResponseCode::SlaveNotAvailable => SendStatus::SlaveNotAvailable,
        ResponseCode::SystemError if remark == Some(IN_SYNC_REPLICAS_NOT_ENOUGH) => SendStatus::SlaveNotAvailable,
        _ => {
            let refusal = ClientError::broker_operation_failed("BROKER_OPERATION", code, remark.unwrap_or_default())
                .with_broker_addr(broker_address);
            let error = PublishError::from_client("send", &refusal).with_remark(remark);
            let oversized = remark.is_some_and(|said| said.contains(BODY_SIZE_EXCEEDED));
            return Err(if oversized { error.with_class(ErrorClass::Event) } else { error });
        }
    };
    Err(PublishError::NotSendOk { status })
}

#[cfg(test)]
mod tests {
    use rocketmq_protocol::protocol::header::message_operation_header::send_message_request_header::parse_request_header;

    use super::*;
    use crate::rocketmq::message::tests::event;
    use crate::rocketmq::{prepare, ErrorClass};

    fn destination() -> (CheetahString, CheetahString) {
        (CheetahString::from_static_str("relay-group"), CheetahString::from_static_str("broker-a"))
    }

    #[test]
    fn one_event_goes_as_a_plain_message_and_several_as_a_batch() {
        let (group, broker) = destination();
        let to = Destination { group: &group, broker: &broker, queue_id: 3 };
        let single = send_request(&prepare([&event(1)], None).expect("prepared"), &to);
        assert_eq!(single.code(), RequestCode::SendMessageV2 as i32);
        assert_eq!(single.body(), Some(&event(1).payload));
        let events = [event(1), event(2)];
        let batch = prepare(&events, None).expect("prepared");
        let request = send_request(&batch, &to);
        assert_eq!(request.code(), RequestCode::SendBatchMessage as i32);
        assert_eq!(request.body(), Some(&batch.body));
    }

    #[test]
    fn the_broker_reads_the_group_topic_queue_broker_and_properties_from_the_header() {
        let (group, broker) = destination();
        let events = [event(1), event(2)];
        for (prepared, code, is_batch) in [
            (prepare([&events[0]], Some(7)).expect("prepared"), RequestCode::SendMessageV2, false),
            (prepare(&events, Some(7)).expect("prepared"), RequestCode::SendBatchMessage, true),
        ] {
            let mut request = send_request(&prepared, &Destination { group: &group, broker: &broker, queue_id: 3 });
            request.make_custom_header_to_net();
            let header = parse_request_header(&request, code).expect("the broker's decoding");
            assert_eq!(header.producer_group, group);
            assert_eq!(header.topic.as_str(), "t");
            assert_eq!(header.queue_id, 3);
            assert_eq!(header.properties.as_ref(), Some(&prepared.properties));
            assert_eq!(header.batch, Some(is_batch));
            assert_eq!(header.sys_flag, 0);
            assert!(header.born_timestamp > 0);
            let named = header.topic_request_header.as_ref().and_then(|h| h.rpc_request_header.as_ref());
            assert_eq!(named.and_then(|h| h.broker_name.as_ref()), Some(&broker));
        }
    }

    #[test]
    fn only_success_is_ok_and_every_other_answer_is_classified() {
        assert!(answer(0, None, "b:10911").is_ok());
        for (code, status) in [(10, "FLUSH_DISK_TIMEOUT"), (11, "SLAVE_NOT_AVAILABLE"), (12, "FLUSH_SLAVE_TIMEOUT")] {
            let error = answer(code, None, "b:10911").err().expect("not SEND_OK");
            assert!(error.to_string().contains(status), "{error}");
            assert_eq!(error.class(), ErrorClass::Outage);
        }
        for code in [11, 12] {
            let error = answer(code, None, "b:10911").err().expect("not SEND_OK").to_string();
            assert!(error.contains("its slave did not confirm it"), "{error}");
        }
        let no_replicas = answer(1, Some("in-sync replicas not enough"), "b:10911").err().expect("refused");
        assert!(no_replicas.to_string().contains("SLAVE_NOT_AVAILABLE"), "{no_replicas}");
        assert_eq!(no_replicas.class(), ErrorClass::Outage);
        let illegal = answer(13, Some("the message is illegal"), "b:10911").err().expect("refused");
        assert_eq!(illegal.class(), ErrorClass::Event);
        assert!(illegal.to_string().contains("(broker code 13)"), "{illegal}");
        let busy = answer(2, Some("busy"), "b:10911").err().expect("refused");
        assert_eq!(busy.class(), ErrorClass::Outage);
        assert!(busy.to_string().contains("diskSpaceWarningLevelRatio"), "{busy}");
        assert_eq!(answer(1, Some("?"), "b:10911").err().map(|e| e.class()), Some(ErrorClass::Unknown));
        let too_large = "java.lang.RuntimeException: message body size exceeded, org.apache.rocketmq.store.MessageExtEncoder.encode";
        let oversized = answer(1, Some(too_large), "b:10911").err().expect("refused");
        assert_eq!(oversized.class(), ErrorClass::Event, "{oversized}");
        let refused = answer(16, Some("check signature failed."), "b:10911").err().expect("refused");
        assert!(refused.credentials_refused(), "{refused}");
        assert!(refused.to_string().contains("the broker says: check signature failed."), "{refused}");
    }
}
