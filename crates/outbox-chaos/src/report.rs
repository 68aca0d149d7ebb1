//! The run's report: per fault kind, how often it was injected, how long the relays
//! took to lead and be ready again, unplanned relay exits and the duplicates it caused;
//! then the verdict's counts and every violation by name.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use crate::schedule::FaultKind;
use crate::verdict::Verdict;

/// What happened around the faults of one kind.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tally {
    pub(crate) injected: usize,
    pub(crate) worst_recovery: Duration,
    /// Faults after which no relay led and was ready within the deadline.
    pub(crate) unrecovered: usize,
    /// Relays that exited on their own after such a fault (a violation: an outage must
    /// be waited out, a supervisor restarting the relay is no excuse).
    pub(crate) relay_exits: usize,
}

/// The report text, and whether the run passed.
/// `stopped` says why the schedule ended before its last fault, if it did.
pub(crate) fn render(
    header: &str,
    tallies: &BTreeMap<FaultKind, Tally>,
    verdict: &Verdict,
    stopped: Option<&str>,
) -> (String, bool) {
    let mut out = String::new();
    let _ = writeln!(out, "{header}\n");
    let _ = writeln!(out, "| fault | injected | worst recovery | not recovered | relay exits | duplicates |");
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for kind in FaultKind::ALL {
        let tally = tallies.get(&kind).cloned().unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} s | {} | {} | {} |",
            kind.name(),
            tally.injected,
            tally.worst_recovery.as_secs_f64(),
            tally.unrecovered,
            tally.relay_exits,
            verdict.duplicates.get(&Some(kind)).copied().unwrap_or(0)
        );
    }
    let _ = writeln!(
        out,
        "| (before any fault) | - | - | - | - | {} |",
        verdict.duplicates.get(&None).copied().unwrap_or(0)
    );
    let _ = writeln!(
        out,
        "\nevents: committed {}, rolled back {}, commit outcome unknown {}, delivered {} (consumer redeliveries through its retry topic: {})",
        verdict.committed, verdict.rolled_back, verdict.unknown, verdict.delivered, verdict.redeliveries
    );
    let _ = writeln!(
        out,
        "verdict: lost {}, phantom {}, order violations {}, keys split {}, overlapping terms {}, SENDING {}, PENDING {}, SENT without msg_id {}, FAILED {}",
        verdict.lost.len(),
        verdict.phantom.len(),
        verdict.order_violations.len(),
        verdict.split_keys.len(),
        verdict.overlapping_terms.len(),
        verdict.sending_rows,
        verdict.pending_rows,
        verdict.sent_without_msg_id,
        verdict.failed_rows
    );
    let mut violations = verdict.violations();
    let unrecovered: usize = tallies.values().map(|t| t.unrecovered).sum();
    if unrecovered > 0 {
        violations.push(format!("no ready leader within the recovery deadline after {unrecovered} fault(s)"));
    }
    let exits: usize = tallies.values().map(|t| t.relay_exits).sum();
    if exits > 0 {
        violations.push(format!(
            "relays that exited on their own: {exits} (their exit codes and logs are in the progress lines)"
        ));
    }
    violations.extend(stopped.map(str::to_owned));
    if violations.is_empty() {
        let _ = writeln!(out, "PASS");
    } else {
        for violation in &violations {
            let _ = writeln!(out, "VIOLATION: {violation}");
        }
        let _ = writeln!(out, "FAIL");
    }
    (out, violations.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_violation_fails_the_report_and_is_named() {
        let verdict = Verdict { lost: vec!["e1".into()], ..Default::default() };
        let (text, passed) = render("run", &BTreeMap::new(), &verdict, None);
        assert!(!passed);
        assert!(text.contains("VIOLATION: lost (committed, never delivered): 1 [\"e1\"]"), "{text}");
        assert!(text.ends_with("FAIL\n"), "{text}");
    }

    #[test]
    fn an_unrecovered_fault_fails_the_report() {
        let tallies =
            BTreeMap::from([(FaultKind::BrokerKill, Tally { injected: 1, unrecovered: 1, ..Default::default() })]);
        let (text, passed) = render("run", &tallies, &Verdict::default(), None);
        assert!(!passed);
        assert!(text.contains("| broker-a SIGKILL | 1 | 0.0 s | 1 | 0 | 0 |"), "{text}");
    }

    #[test]
    fn a_relay_that_exits_on_its_own_fails_the_report() {
        let tallies =
            BTreeMap::from([(FaultKind::BrokerKill, Tally { injected: 1, relay_exits: 2, ..Default::default() })]);
        let (text, passed) = render("run", &tallies, &Verdict::default(), None);
        assert!(!passed);
        assert!(text.contains("VIOLATION: relays that exited on their own: 2"), "{text}");
    }

    #[test]
    fn a_clean_run_passes() {
        let (text, passed) = render("run", &BTreeMap::new(), &Verdict::default(), None);
        assert!(passed && text.ends_with("PASS\n"), "{text}");
    }

    #[test]
    fn a_schedule_stopped_early_fails_the_report() {
        let (text, passed) = render("run", &BTreeMap::new(), &Verdict::default(), Some("fault 3 failed"));
        assert!(!passed);
        assert!(text.contains("VIOLATION: fault 3 failed"), "{text}");
    }
}
