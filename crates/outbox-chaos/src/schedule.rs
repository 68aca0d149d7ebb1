//! The fault kinds and the schedule drawn from a seed: rounds in which every kind
//! happens once, plus a number of relay kills, in a random order, each after a
//! random stretch of load and lasting a random time.

use std::time::Duration;

use crate::relay_config::TAKEOVER_AFTER;
use crate::rng::Rng;

/// Every fault the harness can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL of the leader relay, restarted after a moment.
    RelayKill,
    /// SIGSTOP of the leader for longer than its lease, then SIGCONT.
    RelayPause,
    /// SIGKILL of broker-a of the two RocketMQ brokers, restarted after a moment.
    BrokerKill,
    /// SIGKILL of broker-b, the other broker of the cluster, restarted after a while:
    /// its queues wait, the other broker's keep flowing.
    BrokerBKill,
    /// SIGKILL of the NameServer, restarted after a moment.
    NamesrvRestart,
    /// SIGKILL of the MariaDB primary (mid-COMMIT for some writers), restarted.
    PrimaryKill,
    /// The source replica's SQL thread stopped for a while, then started.
    ReplicaSqlStop,
    /// The source replica's SQL thread stopped for twice the sweep's takeover delay:
    /// a replica lagging for longer than the relay would wait for a dead binlog path.
    ReplicaLag,
    /// Every relay down while the source flushes and purges its binary logs.
    PurgeWhileDown,
    /// The leader killed and its RocksDB checkpoint directory deleted before restart.
    CheckpointDeleted,
    /// More relays started at the same instant (up to three running).
    Crowd,
    /// Every relay restarted on the other replica as its binlog source.
    SourceSwitch,
    /// An operator pauses the fleet (`outbox-relay pause`) and resumes it after a while.
    OperatorPause,
    /// An operator hands the leadership to a standby (`outbox-relay handover`).
    Handover,
    /// An operator sets the position to where the mirror says the relay stands, with
    /// `--force` while the leader runs (`outbox-relay position set --force`): its term
    /// ends, and the next one does not know which unsent rows it will read again.
    PositionForce,
    /// Every relay killed, every checkpoint (local and mirror) deleted, the fleet
    /// started: a first start, whose leader is killed again a moment into its full sweep.
    FirstStartCut,
    /// The primary's time zone moved an hour for a while (`SET GLOBAL time_zone`):
    /// connections opened meanwhile read its clock an hour off.
    TimeZoneShift,
    /// SIGKILL of broker-a's slave, restarted after a while: broker-a, a SYNC_MASTER,
    /// cannot have its sends confirmed meanwhile, so its keys wait.
    SlaveKill,
    /// SIGSTOP of broker-a's slave, then SIGCONT: a slave whose store falls behind
    /// and catches up.
    SlaveStall,
}

impl FaultKind {
    pub const ALL: [FaultKind; 19] = [
        FaultKind::RelayKill,
        FaultKind::RelayPause,
        FaultKind::BrokerKill,
        FaultKind::BrokerBKill,
        FaultKind::NamesrvRestart,
        FaultKind::PrimaryKill,
        FaultKind::ReplicaSqlStop,
        FaultKind::ReplicaLag,
        FaultKind::PurgeWhileDown,
        FaultKind::CheckpointDeleted,
        FaultKind::Crowd,
        FaultKind::SourceSwitch,
        FaultKind::OperatorPause,
        FaultKind::Handover,
        FaultKind::PositionForce,
        FaultKind::FirstStartCut,
        FaultKind::TimeZoneShift,
        FaultKind::SlaveKill,
        FaultKind::SlaveStall,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::RelayKill => "relay SIGKILL",
            FaultKind::RelayPause => "relay SIGSTOP past lease",
            FaultKind::BrokerKill => "broker-a SIGKILL",
            FaultKind::BrokerBKill => "broker-b SIGKILL",
            FaultKind::NamesrvRestart => "nameserver restart",
            FaultKind::PrimaryKill => "primary SIGKILL",
            FaultKind::ReplicaSqlStop => "replica SQL thread stop",
            FaultKind::ReplicaLag => "replica lag past takeover",
            FaultKind::PurgeWhileDown => "binlog purge, relays down",
            FaultKind::CheckpointDeleted => "RocksDB deleted",
            FaultKind::Crowd => "2nd+3rd relay at once",
            FaultKind::SourceSwitch => "source switch",
            FaultKind::OperatorPause => "operator pause/resume",
            FaultKind::Handover => "operator handover",
            FaultKind::PositionForce => "position set --force",
            FaultKind::FirstStartCut => "first start's sweep killed",
            FaultKind::TimeZoneShift => "primary time zone +1 h",
            FaultKind::SlaveKill => "broker-a's slave SIGKILL",
            FaultKind::SlaveStall => "broker-a's slave SIGSTOP",
        }
    }

    /// How long the fault lasts (the process down, the thread stopped), in ms;
    /// `lease` is the relay's leader lease, which a pause must outlast.
    fn hold_millis(self, lease: Duration) -> std::ops::RangeInclusive<u64> {
        let lease = lease.as_millis() as u64;
        match self {
            FaultKind::RelayKill => 0..=3_000,
            FaultKind::RelayPause => lease + 1_000..=lease + 3_000,
            FaultKind::BrokerKill | FaultKind::PrimaryKill => 2_000..=6_000,
            FaultKind::BrokerBKill => 5_000..=20_000,
            FaultKind::NamesrvRestart => 1_000..=4_000,
            FaultKind::ReplicaSqlStop => 2_000..=8_000,
            FaultKind::ReplicaLag => {
                let takeover = TAKEOVER_AFTER.as_millis() as u64;
                2 * takeover..=2 * takeover + 5_000
            }
            FaultKind::PurgeWhileDown => 2_000..=5_000,
            FaultKind::CheckpointDeleted => 0..=2_000,
            FaultKind::Crowd => 3_000..=8_000,
            FaultKind::SourceSwitch | FaultKind::Handover | FaultKind::PositionForce => 0..=0,
            FaultKind::OperatorPause => 1_000..=5_000,
            // How far into its first start the leader is killed.
            FaultKind::FirstStartCut => 500..=3_000,
            FaultKind::TimeZoneShift => 5_000..=15_000,
            FaultKind::SlaveKill => 5_000..=20_000,
            FaultKind::SlaveStall => 3_000..=10_000,
        }
    }
}

/// Load between two faults, in ms.
const LOAD_BEFORE_MILLIS: std::ops::RangeInclusive<u64> = 1_000..=4_000;

/// One fault of the schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Planned {
    pub(crate) kind: FaultKind,
    /// Load to run before it starts.
    pub(crate) after: Duration,
    /// How long it lasts.
    pub(crate) hold: Duration,
}

/// The faults of one run, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Schedule {
    pub(crate) faults: Vec<Planned>,
}

impl Schedule {
    /// `rounds` rounds, each with every kind once and `kills` relay kills in all,
    /// shuffled within the round.
    pub(crate) fn draw(seed: u64, rounds: u32, kills: u32, lease: Duration) -> Self {
        let mut rng = Rng::new(seed);
        let mut faults = Vec::new();
        for _ in 0..rounds {
            let mut round: Vec<FaultKind> = FaultKind::ALL.into_iter().filter(|k| *k != FaultKind::RelayKill).collect();
            round.extend((0..kills).map(|_| FaultKind::RelayKill));
            rng.shuffle(&mut round);
            faults.extend(round.into_iter().map(|kind| Planned {
                kind,
                after: rng.millis(LOAD_BEFORE_MILLIS),
                hold: rng.millis(kind.hold_millis(lease)),
            }));
        }
        Self { faults }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(4);

    impl Schedule {
        fn count(&self, kind: FaultKind) -> usize {
            self.faults.iter().filter(|f| f.kind == kind).count()
        }
    }

    #[test]
    fn a_seed_replays_the_same_schedule() {
        assert_eq!(Schedule::draw(42, 2, 3, LEASE), Schedule::draw(42, 2, 3, LEASE));
        assert_ne!(Schedule::draw(42, 2, 3, LEASE), Schedule::draw(43, 2, 3, LEASE));
    }

    #[test]
    fn every_round_has_every_kind_and_its_kills() {
        let schedule = Schedule::draw(5, 10, 10, LEASE);
        assert_eq!(schedule.count(FaultKind::RelayKill), 100);
        for kind in FaultKind::ALL.into_iter().filter(|k| *k != FaultKind::RelayKill) {
            assert_eq!(schedule.count(kind), 10, "{kind:?}");
        }
        let one_round = Schedule::draw(5, 1, 1, LEASE);
        assert_eq!(one_round.faults.len(), FaultKind::ALL.len());
    }

    #[test]
    fn a_pause_outlasts_the_lease() {
        let schedule = Schedule::draw(9, 20, 0, LEASE);
        let pauses = schedule.faults.iter().filter(|f| f.kind == FaultKind::RelayPause);
        assert!(pauses.clone().count() == 20 && pauses.into_iter().all(|f| f.hold > LEASE));
    }
}
