//! The harness against the real stack: the bounded schedule (every fault kind once,
//! under load) passes, and a relay broken on purpose fails the verdict, naming the
//! loss. The two runs disturb the shared stack, so they take turns.

use std::process::Command;
use std::sync::Mutex;

use outbox_chaos::FaultKind;

static ONE_RUN_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs the harness; its exit code and report (stdout), with its progress (stderr)
/// for assertion messages.
fn chaos(args: &[&str]) -> (Option<i32>, String, String) {
    let _turn = ONE_RUN_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-chaos")).args(args).output().expect("run outbox-chaos");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

#[test]
fn the_bounded_schedule_passes_with_every_fault_kind_exercised() {
    let bounds = ["--recover-secs", "60", "--settle-secs", "120"];
    let (code, report, progress) =
        chaos(&[&["--seed", "20261201", "--cycles", "1", "--kills", "1"][..], &bounds].concat());
    assert_eq!(code, Some(0), "{report}\n{progress}");
    for kind in FaultKind::ALL {
        assert!(report.contains(&format!("| {} | 1 |", kind.name())), "{kind:?} not injected once:\n{report}");
    }
    assert!(
        report.contains("verdict: lost 0, phantom 0, order violations 0, keys split 0, overlapping terms 0"),
        "{report}"
    );
}

#[test]
fn a_relay_that_marks_unsent_events_sent_fails_the_verdict() {
    let args = ["--seed", "7", "--cycles", "0", "--duration", "10", "--settle-secs", "30", "--break-relay"];
    let (code, report, progress) = chaos(&args);
    assert_eq!(code, Some(1), "{report}\n{progress}");
    assert!(report.contains("VIOLATION: lost (committed, never delivered)"), "{report}");
    assert!(report.ends_with("FAIL\n"), "{report}");
}
