//! The status of an outbox row: the `status` column's closed set of values.

/// `outbox_event.status`; serialized by its name (`"FAILED"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
#[repr(u8)]
pub enum RowStatus {
    /// Waiting to be published (new, or a retry booked with `next_retry_at`).
    Pending = 0,
    /// Claimed by a sweeper until `lease_until`.
    Sending = 1,
    /// The broker answered SEND_OK; `msg_id` and `sent_at` are set.
    Sent = 2,
    /// Can never be sent as it is (or gave up after `max_retry`); `last_error` says why.
    Failed = 3,
    /// A FAILED event an operator decided not to send: its key is released.
    Skipped = 4,
}

impl RowStatus {
    /// Every status, in column-value order.
    pub const ALL: [RowStatus; 5] =
        [RowStatus::Pending, RowStatus::Sending, RowStatus::Sent, RowStatus::Failed, RowStatus::Skipped];

    /// The column value.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The status a column value stands for, if any.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.code() == code)
    }

    /// The name operators see (PENDING, SENDING, SENT, FAILED).
    pub const fn name(self) -> &'static str {
        match self {
            RowStatus::Pending => "PENDING",
            RowStatus::Sending => "SENDING",
            RowStatus::Sent => "SENT",
            RowStatus::Failed => "FAILED",
            RowStatus::Skipped => "SKIPPED",
        }
    }
}

impl std::fmt::Display for RowStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::RowStatus;

    #[test]
    fn column_values_are_fixed() {
        assert_eq!(RowStatus::ALL.map(RowStatus::code), [0, 1, 2, 3, 4]);
        assert_eq!(RowStatus::from_code(2), Some(RowStatus::Sent));
        assert_eq!(RowStatus::from_code(9), None);
        for status in RowStatus::ALL {
            assert_eq!(serde_json::to_value(status).ok(), Some(serde_json::Value::from(status.name())));
        }
        assert_eq!(RowStatus::Failed.to_string(), "FAILED");
    }
}
