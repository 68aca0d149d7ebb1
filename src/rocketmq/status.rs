//! How a broker answered one synchronous send: RocketMQ's four send statuses, or an
//! error instead of a status. Only SEND_OK means the message is stored as configured;
//! the others arrive as a successful call and are never taken for it.

use std::fmt;

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum SendStatus {
    SendOk,
    FlushDiskTimeout,
    FlushSlaveTimeout,
    SlaveNotAvailable,
    /// The send raised an error (refused, timed out, unreachable): no status.
    Error,
}

impl SendStatus {
    pub const ALL: [SendStatus; 5] = [
        SendStatus::SendOk,
        SendStatus::FlushDiskTimeout,
        SendStatus::FlushSlaveTimeout,
        SendStatus::SlaveNotAvailable,
        SendStatus::Error,
    ];

    /// RocketMQ's own spelling.
    pub fn name(self) -> &'static str {
        match self {
            SendStatus::SendOk => "SEND_OK",
            SendStatus::FlushDiskTimeout => "FLUSH_DISK_TIMEOUT",
            SendStatus::FlushSlaveTimeout => "FLUSH_SLAVE_TIMEOUT",
            SendStatus::SlaveNotAvailable => "SLAVE_NOT_AVAILABLE",
            SendStatus::Error => "ERROR",
        }
    }

    /// Whether the master stored the message and its slave did not confirm it: the
    /// slave is down, or too far behind.
    pub fn slave_unconfirmed(self) -> bool {
        matches!(self, SendStatus::FlushSlaveTimeout | SendStatus::SlaveNotAvailable)
    }

    /// What a status other than SEND_OK means for the message.
    pub(crate) fn meaning(self) -> &'static str {
        match self {
            SendStatus::SendOk => "stored",
            SendStatus::FlushDiskTimeout => "the broker did not flush it to disk in time, so it is not confirmed stored",
            SendStatus::FlushSlaveTimeout | SendStatus::SlaveNotAvailable => {
                "the master stored it but its slave did not confirm it (the slave is down or behind), so it is not confirmed stored"
            }
            SendStatus::Error => "no answer",
        }
    }
}

impl fmt::Display for SendStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_slaves_answers_count_as_unconfirmed_by_the_slave() {
        let slave: Vec<SendStatus> = SendStatus::ALL.into_iter().filter(|s| s.slave_unconfirmed()).collect();
        assert_eq!(slave, [SendStatus::FlushSlaveTimeout, SendStatus::SlaveNotAvailable]);
    }
}
