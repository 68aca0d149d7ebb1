//! The calendar of a partitioned outbox table: one partition per day, hour or minute
//! of `created_at`, named for the period it holds (`p20261206`, `p2026120613`,
//! `p202612061305`), so that the name alone tells the period and where it starts.
//! Times are the database's own DATETIMEs (its session time zone), as `created_at`
//! holds them.

use std::fmt;
use std::str::FromStr;

use chrono::{Duration, NaiveDateTime, Timelike};
use serde::{Deserialize, Serialize};

/// How much of `created_at` one partition holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PartitionPeriod {
    Daily,
    Hourly,
    /// For tests and demos: a partition boundary every minute.
    Minutely,
}

impl PartitionPeriod {
    pub const ALL: [Self; 3] = [Self::Daily, Self::Hourly, Self::Minutely];

    pub fn name(self) -> &'static str {
        match self {
            Self::Daily => "daily",
            Self::Hourly => "hourly",
            Self::Minutely => "minutely",
        }
    }

    pub fn length(self) -> Duration {
        match self {
            Self::Daily => Duration::days(1),
            Self::Hourly => Duration::hours(1),
            Self::Minutely => Duration::minutes(1),
        }
    }

    /// The start of the period `at` falls in.
    pub fn start_of(self, at: NaiveDateTime) -> NaiveDateTime {
        let minute = at.date().and_hms_opt(at.hour(), at.minute(), 0).unwrap_or(at);
        match self {
            Self::Daily => at.date().and_hms_opt(0, 0, 0).unwrap_or(at),
            Self::Hourly => minute.with_minute(0).unwrap_or(minute),
            Self::Minutely => minute,
        }
    }

    /// The partition name of the period starting at `start`.
    pub fn partition_name(self, start: NaiveDateTime) -> String {
        let digits = match self {
            Self::Daily => "%Y%m%d",
            Self::Hourly => "%Y%m%d%H",
            Self::Minutely => "%Y%m%d%H%M",
        };
        format!("p{}", start.format(digits))
    }

    /// The period and start a partition name stands for; `None` for a name the relay
    /// did not give.
    pub fn of_partition(name: &str) -> Option<(Self, NaiveDateTime)> {
        let digits = name.strip_prefix('p').filter(|d| d.chars().all(|c| c.is_ascii_digit()))?;
        let (period, padded) = match digits.len() {
            8 => (Self::Daily, format!("{digits}0000")),
            10 => (Self::Hourly, format!("{digits}00")),
            12 => (Self::Minutely, digits.to_owned()),
            _ => return None,
        };
        let start = NaiveDateTime::parse_from_str(&padded, "%Y%m%d%H%M").ok()?;
        Some((period, start))
    }
}

impl fmt::Display for PartitionPeriod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PartitionPeriod {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|period| period.name() == text)
            .ok_or_else(|| format!("{text:?}: give daily, hourly or minutely"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").expect("a test time")
    }

    #[test]
    fn a_period_starts_at_its_boundary() {
        let t = at("2026-12-06 13:05:59.999");
        assert_eq!(PartitionPeriod::Daily.start_of(t), at("2026-12-06 00:00:00"));
        assert_eq!(PartitionPeriod::Hourly.start_of(t), at("2026-12-06 13:00:00"));
        assert_eq!(PartitionPeriod::Minutely.start_of(t), at("2026-12-06 13:05:00"));
    }

    #[test]
    fn names_give_back_their_period_and_start() {
        let start = at("2026-12-06 13:05:00");
        for period in PartitionPeriod::ALL {
            let start = period.start_of(start);
            let name = period.partition_name(start);
            assert_eq!(PartitionPeriod::of_partition(&name), Some((period, start)), "{name}");
        }
        assert_eq!(PartitionPeriod::Daily.partition_name(start), "p20261206");
        assert_eq!(PartitionPeriod::of_partition("pfuture"), None);
        assert_eq!(PartitionPeriod::of_partition("p2026"), None);
        assert_eq!(PartitionPeriod::of_partition("p20261399"), None);
    }

    #[test]
    fn periods_parse_by_name_and_a_typo_names_the_choices() {
        assert_eq!("hourly".parse(), Ok(PartitionPeriod::Hourly));
        assert!("weekly".parse::<PartitionPeriod>().unwrap_err().contains("daily, hourly or minutely"));
    }
}
