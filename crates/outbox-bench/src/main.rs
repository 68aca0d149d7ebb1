//! `outbox-bench`: how fast the relay is, measured against the local stack, every case
//! side by side in one run so the ratios mean something.
//!
//! - `raw`: the broker's ceiling for this workload: the same events sent from memory
//!   with the relay's own publish code (one ordered sender per queue, same batches).
//! - `drain`: N rows committed while the relay is stopped, then the relay started.
//! - `latency`: a fixed offered load of single-row transactions; commit to SEND_OK.
//! - `held` (asked for by name): `latency` while 100,000 other keys are held behind
//!   FAILED rows: what an incident that fails many keys costs the keys it does not.
//! - `sweep-drain` (asked for by name): `drain` of a first start, whose full sweep sends
//!   the backlog: the fallback's rate beside the binlog path's.
//! - `bigtx`: one transaction of many rows, then a backlog of a million, with peak RSS.
//! - `retention` (asked for by name): retiring millions of expired rows by batch DELETE
//!   and by partition DROP under a steady load.
//!
//! `drain` and `latency` run in binlog mode and in poll mode (the seed's 500 ms / 100
//! rows). Prints a table and one JSON line per result (`scripts/bench`, BENCHMARKS.md).

#![recursion_limit = "512"]

mod cases;
mod cpu;
mod disk;
mod options;
mod report;
mod rig;
mod workload;

use std::process::ExitCode;

use clap::Parser;

use options::{Case, Options};
use report::Measurement;
use rig::Rig;

#[tokio::main]
async fn main() -> ExitCode {
    let options = Options::parse();
    match run(options).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("outbox-bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(options: Options) -> anyhow::Result<()> {
    let rig = Rig::new(options.clone()).await?;
    let mut results: Vec<Measurement> = Vec::new();
    let measured = measure(&rig, &options, &mut results).await;
    report::add_ratios(&mut results);
    print!("{}", report::table(&results, &rig.describe()));
    for result in &results {
        println!("{}", serde_json::to_string(result)?);
    }
    measured
}

/// Every case in turn into `results`, stopping at the first that fails (what was
/// measured before it is still reported).
async fn measure(rig: &Rig, options: &Options, results: &mut Vec<Measurement>) -> anyhow::Result<()> {
    for case in &options.cases {
        if let Some(stack_dir) = &options.stack_dir {
            disk::ensure_room(stack_dir)?;
        }
        let measured = run_case(rig, *case).await.inspect_err(|_| rig.keep_scratch())?;
        for mut measurement in measured {
            eprintln!("outbox-bench: {}", measurement.summary());
            measurement.label.clone_from(&options.label);
            results.push(measurement);
        }
    }
    Ok(())
}

/// One case, in every mode it runs in.
async fn run_case(rig: &Rig, case: Case) -> anyhow::Result<Vec<Measurement>> {
    Ok(match case {
        Case::Raw => vec![cases::raw::run(rig).await?],
        Case::Drain => cases::drain::run_modes(rig).await?,
        Case::Latency => cases::latency::run_modes(rig, 0).await?,
        Case::Held => cases::latency::run_modes(rig, rig.options.held_keys).await?,
        Case::SweepDrain => vec![cases::drain::first_start(rig).await?],
        Case::Bigtx => cases::bigtx::run(rig).await?,
        Case::Retention => cases::retention::run(rig).await?,
    })
}
