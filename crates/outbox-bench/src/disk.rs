//! The disk under the stack, as the RocketMQ broker counts it, checked before every
//! case: a suite that commits millions of rows fills it, and the broker then refuses
//! every write, so a case would time out (or measure an outage) instead of a relay.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, ensure, Context};

/// The broker refuses every write above this share of its disk used...
const REFUSED_ABOVE_PERCENT: f64 = 90.0;
/// ...and takes writes again only below this one, where the bench stops.
const MOST_USED_PERCENT: f64 = 85.0;

/// Fails, naming the fix, when the disk holding `stack_dir` is too full for the broker.
pub fn ensure_room(stack_dir: &Path) -> anyhow::Result<()> {
    let used = used_percent(stack_dir)?;
    ensure!(
        used < MOST_USED_PERCENT,
        "the disk holding {} is {used:.0}% used as the RocketMQ broker counts it (1 - available/size): \
         above {REFUSED_ABOVE_PERCENT}% the broker refuses every write and takes them again only below \
         {MOST_USED_PERCENT}%; free space (old cargo target dirs, or the stack's data: scripts/stack reset) \
         and run the bench again",
        stack_dir.display()
    );
    Ok(())
}

/// `1 - available/size` of the file system holding `dir`, in percent. Blocks reserved
/// for root count as used, as the broker counts them (`df`'s Use% leaves them out).
fn used_percent(dir: &Path) -> anyhow::Result<f64> {
    let output = Command::new("df")
        .args(["-B1", "--output=size,avail"])
        .arg(dir)
        .output()
        .with_context(|| format!("run df on {}", dir.display()))?;
    if !output.status.success() {
        bail!("df {}: {}", dir.display(), String::from_utf8_lossy(&output.stderr).trim());
    }
    parse_df(&String::from_utf8_lossy(&output.stdout))
        .with_context(|| format!("read df's answer for {}", dir.display()))
}

/// The percentage from `df --output=size,avail`: a header line, then size and available.
fn parse_df(text: &str) -> anyhow::Result<f64> {
    let line = text.lines().nth(1).context("no line after the header")?;
    let numbers: Vec<f64> =
        line.split_whitespace().map(str::parse).collect::<Result<_, _>>().with_context(|| format!("{line:?}"))?;
    match numbers[..] {
        [size, available] if size > 0.0 => Ok(100.0 * (1.0 - available / size)),
        _ => bail!("expected a size and the space available, got {line:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_blocks_count_as_used() {
        let used = parse_df("     1B-blocks      Avail\n 1000 100\n").expect("parsed");
        assert!((used - 90.0).abs() < 1e-9, "{used}");
    }

    #[test]
    fn an_answer_without_numbers_is_an_error() {
        assert!(parse_df("1B-blocks Avail\n").is_err());
        assert!(parse_df("1B-blocks Avail\n0 0\n").is_err());
        assert!(parse_df("1B-blocks Avail\nlots few\n").is_err());
    }
}
