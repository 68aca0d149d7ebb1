//! Publishing to RocketMQ: the broker client ([`rocketmq`]) and, per queue, the
//! ordered sender ([`lane`]).

pub mod lane;
pub mod rocketmq;
