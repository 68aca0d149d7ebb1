//! Injecting one planned fault: what each kind does to the stack or the relays, how
//! long it holds, and how it ends. Waiting for the relays to recover is the run's.

use std::time::Duration;

use crate::fleet::Fleet;
use crate::schedule::{FaultKind, Planned};
use crate::stack::{Stack, StackProcess};

/// Injects `fault` and ends it (the killed process restarted, the thread started).
pub async fn inject(stack: &Stack, fleet: &mut Fleet, fault: &Planned) -> anyhow::Result<()> {
    let hold = || tokio::time::sleep(fault.hold);
    match fault.kind {
        FaultKind::RelayKill => {
            let slot = target(fleet);
            fleet.kill(slot)?;
            hold().await;
            fleet.start(slot)?;
        }
        FaultKind::RelayPause => {
            let slot = target(fleet);
            fleet.signal(slot, "STOP")?;
            hold().await;
            fleet.signal(slot, "CONT")?;
        }
        FaultKind::BrokerKill => restart(stack, StackProcess::Broker, fault.hold).await?,
        FaultKind::NamesrvRestart => restart(stack, StackProcess::NameServer, fault.hold).await?,
        FaultKind::PrimaryKill => restart(stack, StackProcess::Primary, fault.hold).await?,
        FaultKind::ReplicaSqlStop => {
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
            stack.sql(source, "FLUSH BINARY LOGS").await?;
            stack.sql(source, "PURGE BINARY LOGS BEFORE NOW()").await?;
            running.into_iter().try_for_each(|slot| fleet.start(slot))?;
        }
        FaultKind::CheckpointDeleted => {
            let slot = target(fleet);
            fleet.kill(slot)?;
            fleet.delete_checkpoint(slot)?;
            hold().await;
            fleet.start(slot)?;
        }
        FaultKind::Crowd => crowd(fleet, fault.hold).await?,
        FaultKind::SourceSwitch => fleet.switch_source()?,
    }
    Ok(())
}

/// The relay a fault hits: the leader, or the first running one while none leads.
fn target(fleet: &Fleet) -> usize {
    fleet.leader().or_else(|| fleet.running().first().copied()).unwrap_or(0)
}

/// SIGKILL of a stack process; `scripts/stack up` after `down`.
async fn restart(stack: &Stack, process: StackProcess, down: Duration) -> anyhow::Result<()> {
    stack.kill(process).await?;
    tokio::time::sleep(down).await;
    stack.up().await
}

/// Two relays started at the same instant beside the leader (standbys are killed
/// first to make room); after `hold`, the fleet shrinks back to its baseline.
async fn crowd(fleet: &mut Fleet, hold: Duration) -> anyhow::Result<()> {
    let mut standbys = fleet.standbys();
    while fleet.running().len() > 1 {
        match standbys.pop() {
            Some(slot) => fleet.kill(slot)?,
            None => break,
        }
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
