//! Loading: TOML file, then `OUTBOX_RELAY__…` environment overrides, then validation.
//!
//! Every failure is a [`ConfigError`] whose one-line message names the file or
//! variable, the key, the bad value and what is expected, so an operator can fix
//! it without reading code.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::{Table, Value};

use super::{secret, validate, Config};

/// Prefix of environment overrides: `OUTBOX_RELAY__SOURCE__URL` sets `source.url`.
pub const ENV_PREFIX: &str = "OUTBOX_RELAY__";

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source} (pass an existing file with --config or OUTBOX_RELAY_CONFIG; the container image holds none: mount yours there)")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax { path: String, message: String },
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("config key `{key}`: {message}")]
    Invalid { key: String, message: String },
    #[error("config key `{key}`: cannot read {path}: {source} (fix the path, or let the relay's user read the file)")]
    SecretFile { key: String, path: PathBuf, source: std::io::Error },
}

impl ConfigError {
    /// A value error for `key`: what was given and what is expected.
    pub fn invalid(key: &str, value: impl std::fmt::Display, expected: &str) -> Self {
        ConfigError::Invalid { key: key.to_owned(), message: format!("got {value}, expected {expected}") }
    }
}

/// Loads `path`, applies environment overrides from the process environment, validates.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    load_from_str(&text, &path.display().to_string(), std::env::vars())
}

/// Parses `text` (named `origin` in errors), applies `env` overrides, validates.
pub fn load_from_str(
    text: &str,
    origin: &str,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Config, ConfigError> {
    let mut table: Table = text.parse().map_err(|e: toml::de::Error| ConfigError::Syntax {
        path: origin.to_owned(),
        message: e.message().to_owned() + &line_hint(text, e.span()),
    })?;
    let mut overrides = Vec::new();
    for (var, value) in env {
        if let Some(path) = var.strip_prefix(ENV_PREFIX) {
            overrides.push(apply_override(&mut table, &var, path, &value)?);
        }
    }
    let mut config = deserialize(table, &overrides)?;
    secret::resolve(&mut config)?;
    validate::validate(&config)?;
    Ok(config)
}

/// The configuration in `table`. An override read as a number, boolean or array
/// whose key wants a string (a password of digits) is taken as the string it was.
fn deserialize(mut table: Table, overrides: &[Override]) -> Result<Config, ConfigError> {
    loop {
        let error = match serde_path_to_error::deserialize(Value::Table(table.clone())) {
            Ok(config) => return Ok(config),
            Err(error) => error,
        };
        let path = error.path().to_string();
        match overrides.iter().find(|o| o.typed && o.keys.join(".") == path) {
            Some(wanted_string) if wanted_string.set(&mut table, Value::String(wanted_string.raw.clone())) => {}
            _ => return Err(describe(if path == "." { None } else { Some(path) }, &error.into_inner().to_string())),
        }
    }
}

/// One line naming the full key: "missing field `x`" at `a` becomes key `a.x`.
fn describe(path: Option<String>, message: &str) -> ConfigError {
    let message = message.lines().next().unwrap_or_default();
    let missing = message.strip_prefix("missing field `").and_then(|rest| rest.strip_suffix('`'));
    match (missing, path) {
        (Some(field), Some(path)) => {
            ConfigError::Invalid { key: format!("{path}.{field}"), message: "is required but missing".into() }
        }
        (Some(field), None) => {
            ConfigError::Invalid { key: field.to_owned(), message: "is required but missing".into() }
        }
        (None, path) => {
            ConfigError::Invalid { key: path.unwrap_or_else(|| "(top level)".into()), message: message.to_owned() }
        }
    }
}

fn line_hint(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    span.map(|s| format!(" (line {})", text[..s.start.min(text.len())].lines().count().max(1))).unwrap_or_default()
}

/// One `OUTBOX_RELAY__…` variable: the key it sets and the text it gave.
struct Override {
    keys: Vec<String>,
    raw: String,
    /// Whether the text was read as a TOML value other than a string.
    typed: bool,
}

impl Override {
    /// Puts `value` at this override's key; `false` if it was given as a string already.
    fn set(&self, table: &mut Table, value: Value) -> bool {
        let Some((last, parents)) = self.keys.split_last() else { return false };
        let node = parents.iter().try_fold(table, |node, key| node.get_mut(key)?.as_table_mut());
        match node.and_then(|node| node.get_mut(last)) {
            Some(slot) if !slot.is_str() => {
                *slot = value;
                true
            }
            _ => false,
        }
    }
}

/// Sets `a.b.c` (from `A__B__C`) in `table`; the value is read as TOML when it parses
/// (numbers, booleans, arrays), else taken as a plain string (URLs, names).
fn apply_override(table: &mut Table, var: &str, path: &str, raw: &str) -> Result<Override, ConfigError> {
    let keys: Vec<String> = path.split("__").map(str::to_ascii_lowercase).collect();
    let Some((last, parents)) = keys.split_last().filter(|_| !keys.iter().any(String::is_empty)) else {
        return Err(ConfigError::Env {
            var: var.to_owned(),
            message: "empty key segment; use OUTBOX_RELAY__SECTION__KEY".to_owned(),
        });
    };
    let mut node = table;
    for key in parents {
        let entry = node.entry(key.clone()).or_insert_with(|| Value::Table(Table::new()));
        node = entry.as_table_mut().ok_or_else(|| ConfigError::Env {
            var: var.to_owned(),
            message: format!("`{key}` is a value, not a section"),
        })?;
    }
    let value = parse_scalar(raw);
    let typed = !value.is_str();
    node.insert(last.clone(), value);
    Ok(Override { keys, raw: raw.to_owned(), typed })
}

fn parse_scalar(raw: &str) -> Value {
    #[derive(Deserialize)]
    struct One {
        v: Value,
    }
    toml::from_str::<One>(&format!("v = {raw}")).map_or_else(|_| Value::String(raw.to_owned()), |one| one.v)
}
