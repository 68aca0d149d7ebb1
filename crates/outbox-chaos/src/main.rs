//! `outbox-chaos`: the fault-injection harness. It runs the real stack and one to
//! three relay processes, a load generator and an independent consumer, injects a
//! seeded schedule of faults (relay kills and pauses, broker, NameServer and primary
//! kills, a stopped replica SQL thread, binlog purges, a deleted checkpoint, a crowd of
//! relays, a source switch) and judges the run from the database and the consumer's
//! records. Exit code 0: every criterion held; 1: a violation (named in the report);
//! 2: the harness itself could not run.

// The RocketMQ client's futures are deep.
#![recursion_limit = "512"]

mod consumer;
mod faults;
mod fleet;
mod load;
mod options;
mod relay_config;
mod report;
mod rng;
mod run;
mod schedule;
mod stack;
mod verdict;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let options = options::Options::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("outbox-chaos: cannot start the async runtime: {error}");
            return std::process::ExitCode::from(2);
        }
    };
    match runtime.block_on(run::run(options)) {
        Ok(outcome) => {
            print!("{}", outcome.report);
            std::process::ExitCode::from(if outcome.passed { 0 } else { 1 })
        }
        Err(error) => {
            eprintln!("outbox-chaos: error: {error:#}");
            std::process::ExitCode::from(2)
        }
    }
}
