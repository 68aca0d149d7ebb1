//! The `outbox-relay` command: parses arguments, sets up logging, calls the library,
//! and turns a failure into one readable line and an exit code (see `exit`). One
//! dispatch: the relay itself, the set-up commands (`migrate`, `config`, `admin`), and
//! the operator commands, which run on a runtime of their own and print a report.

mod args;
mod commands;
mod library_repeats;
mod logging;
mod serve;
mod setup;
mod table;

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser};
use outbox_relay::config::{self, Config, LogFormat};
use outbox_relay::exit;

use args::{Cli, Command};
use logging::{init_logging, LOGGING};

/// Runs the command the arguments name; the process's exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let log_format = cli.log_format;
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let code = exit::code_for(error.as_ref());
            // A failure before logging was set up (the configuration) is logged as
            // asked for on the command line; plain text needs no logger.
            if LOGGING.get().is_none() && log_format == Some(LogFormat::Json) {
                init_logging("error", LogFormat::Json);
            }
            if LOGGING.get().is_some() {
                tracing::error!(exit_code = code, "{error:#}");
            } else {
                eprintln!("outbox-relay: error: {error:#}");
            }
            ExitCode::from(code)
        }
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    let Cli { command, config, json, log_format } = cli;
    let load = || load_config(&config, log_format);
    match command {
        Command::Admin(command) => {
            // The configuration is optional here: its NameServer and ACL keys, if it exists.
            let config = if config.exists() { Some(load()?) } else { None };
            if config.is_none() {
                init_logging("warn", log_format.unwrap_or(LogFormat::Text));
            }
            runtime()?.block_on(setup::admin(command, config.as_ref(), json))
        }
        Command::Run => serve::run(&load()?),
        Command::Config => setup::print_config(&load()?),
        Command::Migrate(args) => runtime()?.block_on(setup::migrate(&load()?, args)),
        Command::Check => runtime()?.block_on(commands::check(&load()?, json)),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "outbox-relay", &mut std::io::stdout());
            Ok(())
        }
        Command::Man => {
            clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()).context("cannot write the man page")
        }
        Command::Operator(command) => runtime()?.block_on(commands::run(&load()?, command, json)),
    }
}

/// Loads the configuration and sets up logging: `log_format` (from the command line)
/// over the file's `log.format`.
fn load_config(path: &Path, log_format: Option<LogFormat>) -> anyhow::Result<Config> {
    let config = config::load(path)?;
    init_logging(&config.log.level, log_format.unwrap_or(config.log.format));
    Ok(config)
}

/// The runtime of every command but `run` (which runs on the RocketMQ client's).
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Runtime::new().context("cannot start the async runtime")
}
