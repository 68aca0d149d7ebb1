//! The `outbox-chaos` command: parses the options, runs the harness (its progress on
//! stderr through tracing, `RUST_LOG` to change what is shown), prints the report.
//! Exit code 0: every criterion held; 1: a violation (named in the report); 2: the
//! harness itself could not run.

// The RocketMQ client's futures are deep.
#![recursion_limit = "512"]

use clap::Parser;

fn main() -> std::process::ExitCode {
    let options = outbox_chaos::Options::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("outbox_chaos=info"));
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(colour)
        .init();
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
