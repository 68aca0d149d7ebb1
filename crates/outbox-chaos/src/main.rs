//! The `outbox-chaos` command: parses the options, runs the harness, prints the report.
//! Exit code 0: every criterion held; 1: a violation (named in the report); 2: the
//! harness itself could not run.

// The RocketMQ client's futures are deep.
#![recursion_limit = "512"]

use clap::Parser;

fn main() -> std::process::ExitCode {
    let options = outbox_chaos::Options::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("outbox-chaos: cannot start the async runtime: {error}");
            return std::process::ExitCode::from(2);
        }
    };
    match runtime.block_on(outbox_chaos::run(options)) {
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
