//! The relay binary as a command (not a running relay): `outbox-relay ARGS` on a
//! test's outbox table, as an operator runs it.

use std::path::PathBuf;
use std::process::{Command, Output};

use super::outbox::TestOutbox;
use super::Stack;

/// Runs `outbox-relay ARGS --config config/relay.toml` on `outbox`'s table; it must succeed.
pub fn cli(stack: &Stack, outbox: &TestOutbox, args: &[&str]) -> Output {
    let output = cli_with(stack, outbox, &[], args);
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output
}

/// Runs `outbox-relay ARGS --config config/relay.toml` on `outbox`'s table with the
/// variables `env` besides; whatever its exit.
pub fn cli_with(stack: &Stack, outbox: &TestOutbox, env: &[(&str, String)], args: &[&str]) -> Output {
    let config = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/config/relay.toml"));
    Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env("OUTBOX_RELAY__PRIMARY__URL", &stack.writer_url)
        .env("OUTBOX_RELAY__OUTBOX__TABLE", outbox.name())
        .env("NO_COLOR", "1")
        .envs(env.iter().map(|(key, value)| (*key, value)))
        .output()
        .expect("run outbox-relay")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}
