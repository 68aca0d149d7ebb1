//! The operator commands of the `outbox-relay` binary: `status`, `failed list`,
//! `requeue`, `skip` and `cleanup` over the library's `store`. Human output by default
//! (aligned columns), `--json` for scripts; every change needs `--operator` and
//! `--reason`, which go into its audit row, and `--dry-run` shows what would change.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use outbox_relay::config::Config;
use outbox_relay::db;
use outbox_relay::relay::outbox_table;
use outbox_relay::store::{status_report, Change, FailedFilter, LeaseStore, Manual, Operator, StatusReport, Target};

/// Who makes the change and why; both are recorded in `outbox_relay_audit`.
#[derive(Args)]
pub struct ByWhom {
    /// Your name, as the audit row should show it.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    operator: String,
    /// Why (a ticket, an incident), as the audit row should show it.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    reason: String,
    /// Show what would change, change nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Which FAILED rows.
#[derive(Args)]
#[group(required = true, multiple = false)]
pub struct Which {
    /// Row ids (the `id` column), one or more.
    #[arg(long = "id", num_args = 1..)]
    pub ids: Vec<u64>,
    /// Every FAILED row.
    #[arg(long)]
    pub all_failed: bool,
}

/// What a manual command does, once its arguments are read.
pub enum Action {
    Status,
    List { limit: usize, topic: Option<String>, key: Option<String> },
    Requeue { which: Which, by: ByWhom },
    Skip { ids: Vec<u64>, by: ByWhom },
    Cleanup { retention: Duration, batch: usize, pace: Duration, by: ByWhom },
}

/// Runs `action` against the primary and outbox table of `config`; prints the result.
pub async fn run(config: &Config, action: Action, json: bool) -> anyhow::Result<()> {
    let pool = db::connect("primary", &config.primary.url, 2).await?;
    let manual = Manual::new(pool.clone(), outbox_table(config));
    let table = outbox_table(config).qualified();
    // A server error (a missing table, a missing grant) classifies as exit 4.
    let on_primary = |e| db::DbError::query("primary", &config.primary.url, e);
    let done = async {
        match action {
            Action::Status => {
                let lease = LeaseStore::new(pool.clone(), &outbox_table(config).schema, &config.lease_name());
                let report =
                    status_report(&pool, &outbox_table(config), &lease).await.map_err(on_primary).with_context(
                        || format!("reading the status of {table} (does it exist? `outbox-relay migrate` creates it)"),
                    )?;
                if json {
                    println!("{}", serde_json::to_string(&report)?);
                } else {
                    print_status(&report);
                }
                Ok(())
            }
            Action::List { limit, topic, key } => {
                let rows = manual
                    .failed(&FailedFilter { limit, topic, biz_key: key })
                    .await
                    .map_err(on_primary)
                    .with_context(|| format!("listing FAILED rows of {table}"))?;
                if json {
                    println!("{}", serde_json::to_string(&rows)?);
                } else {
                    print_table(
                        &["id", "event_id", "biz_key", "topic", "retries", "created_at", "last_error"],
                        rows.iter()
                            .map(|r| {
                                vec![
                                    r.id.to_string(),
                                    r.event_id.clone(),
                                    r.biz_key.clone(),
                                    r.topic.clone(),
                                    r.retry_count.to_string(),
                                    r.created_at.clone(),
                                    r.last_error.chars().take(80).collect(),
                                ]
                            })
                            .collect(),
                    );
                }
                Ok(())
            }
            Action::Requeue { which, by } => {
                let target = if which.all_failed { Target::AllFailed } else { Target::Ids(which.ids) };
                let change = manual.requeue(&target, &operator(&by), by.dry_run).await;
                report_change(change.map_err(on_primary).with_context(|| format!("requeue in {table}"))?, json)
            }
            Action::Skip { ids, by } => {
                let change = manual.skip(&Target::Ids(ids), &operator(&by), by.dry_run).await;
                report_change(change.map_err(on_primary).with_context(|| format!("skip in {table}"))?, json)
            }
            Action::Cleanup { retention, batch, pace, by } => {
                let interactive = std::io::IsTerminal::is_terminal(&std::io::stderr());
                let progress = |deleted: u64| {
                    if interactive {
                        eprint!("\rdeleted {deleted} rows");
                    }
                };
                let cleaned = manual
                    .cleanup(retention, batch, pace, &operator(&by), by.dry_run, progress)
                    .await
                    .map_err(on_primary)
                    .with_context(|| format!("cleanup of {table}"))?;
                if interactive && !by.dry_run {
                    eprintln!();
                }
                if json {
                    println!("{}", serde_json::to_string(&cleaned)?);
                } else if cleaned.dry_run {
                    println!("dry run: would delete {} SENT rows older than {}s", cleaned.deleted, retention.as_secs());
                } else {
                    println!(
                        "deleted {} SENT rows older than {}s in {} batches",
                        cleaned.deleted,
                        retention.as_secs(),
                        cleaned.batches
                    );
                }
                Ok(())
            }
        }
    }
    .await;
    pool.disconnect().await.ok();
    done
}

fn operator(by: &ByWhom) -> Operator {
    Operator { name: by.operator.clone(), reason: by.reason.clone() }
}

fn report_change(change: Change, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(&change)?);
        return Ok(());
    }
    let list = |ids: &[u64]| ids.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    match (change.dry_run, change.ids.is_empty()) {
        (_, true) => println!("{}: no FAILED row to change; nothing to do", change.action),
        (true, false) => println!("dry run: would {} {} rows: {}", change.action, change.ids.len(), list(&change.ids)),
        (false, false) => {
            println!("{}: {} rows changed (audited): {}", change.action, change.ids.len(), list(&change.ids))
        }
    }
    if !change.not_failed.is_empty() {
        println!("not FAILED, left alone: {}", list(&change.not_failed));
    }
    Ok(())
}

/// Prints the status report as labelled lines.
fn print_status(report: &StatusReport) {
    let leader = match &report.leader {
        Some(l) if l.lease_remaining_ms >= 0 => {
            format!("{} (term {}, lease {:.1} s left)", l.holder, l.term, l.lease_remaining_ms as f64 / 1e3)
        }
        Some(l) => {
            format!("none: the lease of term {} ran out {:.1} s ago", l.term, -l.lease_remaining_ms as f64 / 1e3)
        }
        None => "none: no instance has held the lease yet".to_owned(),
    };
    let position = report.position.as_ref().map_or_else(
        || "none mirrored yet".to_owned(),
        |p| {
            let gtid = p.gtid.as_deref().map(|g| format!(" gtid {g}")).unwrap_or_default();
            let server = p.server.as_deref().unwrap_or("?");
            format!("{}:{}{gtid} (server {server}, term {}, at {})", p.file, p.pos, p.term, p.updated_at)
        },
    );
    let rows: Vec<String> = report.rows.iter().map(|(name, n)| format!("{name} {n}")).collect();
    print_table(
        &["", ""],
        vec![
            vec!["table".into(), report.table.clone()],
            vec!["leader".into(), leader],
            vec!["position".into(), position],
            vec!["rows".into(), rows.join(", ")],
            vec!["waiting".into(), format!("{} (oldest {:.1} s)", report.waiting, report.oldest_waiting_seconds)],
            vec!["failed keys".into(), report.failed_keys.to_string()],
        ],
    );
}

/// Prints `rows` under `header` in aligned columns (no header line when it is blank).
fn print_table(header: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", padded.join("  ").trim_end());
    };
    if header.iter().any(|h| !h.is_empty()) {
        line(header.iter().map(|h| h.to_uppercase()).collect());
    }
    for row in rows {
        line(row);
    }
}

/// `7d`, `24h`, `30m`, `90s` (or a bare number of seconds) as a duration.
pub fn parse_retention(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let seconds_per = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(format!("{text:?}: use a number with s, m, h or d, e.g. 7d")),
    };
    let number: u64 = number.parse().map_err(|_| format!("{text:?}: use a number with s, m, h or d, e.g. 7d"))?;
    Ok(Duration::from_secs(number.saturating_mul(seconds_per)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_reads_days_hours_minutes_and_seconds() {
        assert_eq!(parse_retention("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_retention("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_retention("90"), Ok(Duration::from_secs(90)));
        assert!(parse_retention("7w").is_err() && parse_retention("d").is_err());
    }
}
