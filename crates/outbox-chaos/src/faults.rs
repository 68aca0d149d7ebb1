//! Injecting one planned fault: what each kind does to the stack or the relays, how
//! long it holds, and how it ends. Waiting for the relays to recover is the run's.

use std::time::Duration;

use anyhow::Context;
use mysql_async::prelude::Queryable;
use outbox_test_support::relay::Signal;

use crate::fleet::Fleet;
use crate::schedule::{FaultKind, Planned};
use crate::stack::{Stack, StackProcess};

/// Injects `fault` and ends it (the killed process restarted, the thread started).
pub(crate) async fn inject(stack: &Stack, fleet: &mut Fleet, fault: &Planned) -> anyhow::Result<()> {
    let hold = || tokio::time::sleep(fault.hold);
    match fault.kind {
        FaultKind::RelayKill => {
            let slot = target(fleet)?;
            fleet.kill(slot)?;
            hold().await;
            fleet.start(slot)?;
        }
        FaultKind::RelayPause => {
            let slot = target(fleet)?;
            fleet.signal(slot, Signal::Stop)?;
            hold().await;
            fleet.signal(slot, Signal::Cont)?;
        }
        FaultKind::BrokerKill => restart(stack, StackProcess::Broker, fault.hold).await?,
        FaultKind::BrokerBKill => restart(stack, StackProcess::BrokerB, fault.hold).await?,
        FaultKind::NamesrvRestart => restart(stack, StackProcess::NameServer, fault.hold).await?,
        FaultKind::PrimaryKill => restart(stack, StackProcess::Primary, fault.hold).await?,
        FaultKind::SlaveKill => restart(stack, StackProcess::BrokerASlave, fault.hold).await?,
        FaultKind::SlaveStall => {
            stack.signal(StackProcess::BrokerASlave, "-STOP").await?;
            hold().await;
            stack.signal(StackProcess::BrokerASlave, "-CONT").await?;
        }
        FaultKind::ReplicaSqlStop | FaultKind::ReplicaLag => {
            let source = &stack.replicas[fleet.source()].root_url;
            stack.sql(source, "STOP SLAVE SQL_THREAD").await?;
            hold().await;
            stack.sql(source, "START SLAVE SQL_THREAD").await?;
        }
        FaultKind::PurgeWhileDown => {
            let running = fleet.running();
            fleet.kill_all()?;
            let source = &stack.replicas[fleet.source()].root_url;
            stack.sql(source, "FLUSH BINARY LOGS").await?;
            hold().await;
            purge_all_but_the_current_log(source).await?;
            running.into_iter().try_for_each(|slot| fleet.start(slot))?;
        }
        FaultKind::CheckpointDeleted => {
            let slot = target(fleet)?;
            fleet.kill(slot)?;
            fleet.delete_checkpoint(slot)?;
            hold().await;
            fleet.start(slot)?;
        }
        FaultKind::Crowd => crowd(fleet, fault.hold).await?,
        FaultKind::SourceSwitch => fleet.switch_source()?,
        FaultKind::OperatorPause => {
            fleet.operator(&["pause"]).await?;
            hold().await;
            fleet.operator(&["resume"]).await?;
        }
        FaultKind::Handover => fleet.operator(&["handover", "--within-secs", "30"]).await?,
        FaultKind::PositionForce => {
            let gtid = mirrored_gtid(stack, fleet).await?;
            fleet.operator(&["position", "set", "--gtid", &gtid, "--force"]).await?;
        }
        FaultKind::FirstStartCut => first_start_cut(stack, fleet, fault.hold).await?,
        FaultKind::TimeZoneShift => {
            let url = &stack.primary_root_url;
            let zone = stack.value(url, "SELECT @@global.time_zone").await?.context("the primary's time zone")?;
            let shifted = if zone == "+01:00" { "-01:00" } else { "+01:00" };
            stack.sql(url, &format!("SET GLOBAL time_zone = '{shifted}'")).await?;
            hold().await;
            stack.sql(url, &format!("SET GLOBAL time_zone = '{zone}'")).await?;
        }
    }
    Ok(())
}

/// The GTID position of the fleet's checkpoint mirror row on the primary.
async fn mirrored_gtid(stack: &Stack, fleet: &Fleet) -> anyhow::Result<String> {
    let (schema, _) = fleet.table().split_once('.').context("the table as schema.table")?;
    let sql = format!("SELECT gtid FROM `{schema}`.outbox_relay_checkpoint WHERE source_id = '{}'", fleet.table());
    stack.value(&stack.primary_root_url, &sql).await?.context("the mirror row has no GTID position")
}

/// A first start cut short: every relay killed, every checkpoint deleted (each
/// slot's RocksDB directory and the mirror row), the relays started again, and the
/// first of them to lead killed `after` it does, in its full sweep, then restarted.
async fn first_start_cut(stack: &Stack, fleet: &mut Fleet, after: Duration) -> anyhow::Result<()> {
    let running = fleet.running();
    fleet.kill_all()?;
    (0..crate::fleet::SLOTS).try_for_each(|slot| fleet.delete_checkpoint(slot))?;
    let (schema, _) = fleet.table().split_once('.').context("the table as schema.table")?;
    let sql = format!("DELETE FROM `{schema}`.outbox_relay_checkpoint WHERE source_id = '{}'", fleet.table());
    stack.sql(&stack.primary_root_url, &sql).await?;
    running.iter().try_for_each(|slot| fleet.start(*slot))?;
    let leader = wait_for_a_leader(fleet, FIRST_LEADER_WITHIN).await?;
    tokio::time::sleep(after).await;
    fleet.kill(leader)?;
    fleet.start(leader)
}

/// How long a fleet started without checkpoints may take to elect a leader.
const FIRST_LEADER_WITHIN: Duration = Duration::from_secs(30);

/// The slot that leads (ready or not), once one does.
async fn wait_for_a_leader(fleet: &Fleet, within: Duration) -> anyhow::Result<usize> {
    let until = tokio::time::Instant::now() + within;
    loop {
        if let Some(slot) = fleet.leader() {
            return Ok(slot);
        }
        anyhow::ensure!(tokio::time::Instant::now() < until, "no relay led within {within:?} of a first start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The relay a fault hits: the leader, or the first running one while none leads.
fn target(fleet: &Fleet) -> anyhow::Result<usize> {
    fleet.leader().or_else(|| fleet.running().first().copied()).context("no relay runs to hit")
}

/// Starts a new binary log on the replica at `url` and purges every older one; fails
/// unless only the new one is left within `PURGE_WITHIN` (a purge the server refused
/// would leave the relays' position in place, and the fault would prove nothing). The
/// server keeps a log a binlog dump thread still reads; the dump threads of killed
/// relays end once the server notices, so the purge is repeated until then.
async fn purge_all_but_the_current_log(url: &str) -> anyhow::Result<()> {
    let mut conn = mysql_async::Conn::from_url(url).await.context("connect to the source replica")?;
    conn.query_drop("FLUSH BINARY LOGS").await.context("FLUSH BINARY LOGS")?;
    let status: Option<mysql_async::Row> =
        conn.query_first("SHOW MASTER STATUS").await.context("SHOW MASTER STATUS")?;
    let current: String =
        status.and_then(|row| row.get(0)).context("SHOW MASTER STATUS returned no file: is the binary log on?")?;
    let until = tokio::time::Instant::now() + PURGE_WITHIN;
    loop {
        conn.query_drop(format!("PURGE BINARY LOGS TO '{current}'")).await.context("PURGE BINARY LOGS")?;
        let logs: Vec<mysql_async::Row> = conn.query("SHOW BINARY LOGS").await.context("SHOW BINARY LOGS")?;
        let logs: Vec<String> = logs.into_iter().filter_map(|row| row.get(0)).collect();
        if logs == [current.clone()] {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < until,
            "binary logs older than {current} survived the purge for {PURGE_WITHIN:?}: {logs:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    conn.disconnect().await?;
    Ok(())
}

/// How long a purge may wait for the dump threads of killed relays to end.
const PURGE_WITHIN: Duration = Duration::from_secs(30);

/// SIGKILL of a stack process; `scripts/stack up` after `down`.
async fn restart(stack: &Stack, process: StackProcess, down: Duration) -> anyhow::Result<()> {
    stack.kill(process).await?;
    tokio::time::sleep(down).await;
    stack.up().await
}

/// Two relays started at the same instant beside the leader (standbys are stopped
/// first to make room); after `hold`, the fleet shrinks back to its baseline.
async fn crowd(fleet: &mut Fleet, hold: Duration) -> anyhow::Result<()> {
    for slot in fleet.standbys() {
        fleet.stop(slot)?;
    }
    fleet.start_idle()?;
    tokio::time::sleep(hold).await;
    let mut extra = fleet.running().len().saturating_sub(fleet.baseline());
    let mut standbys = fleet.standbys();
    while extra > 0 {
        let Some(slot) = standbys.pop() else { break };
        fleet.stop(slot)?;
        extra -= 1;
    }
    Ok(())
}
