//! Publishing to RocketMQ: the broker client ([`rocketmq`]), per queue the ordered
//! sender ([`lane`]), and how each event's end is made durable ([`recorder`]).

pub mod lane;
pub mod recorder;
pub mod rocketmq;
