//! Secrets in the configuration: values that never reach a log line, a config dump
//! or an error, and the `*_file` keys that read them from files (Docker and
//! Kubernetes secrets are mounted as files).
//!
//! Two secrets exist: a database password and the RocketMQ ACL secret key.
//! - `primary.password_file` / `source.password_file`: the file holds the password
//!   alone; it replaces the password in `url` (the URL keeps host, user and
//!   database in the reviewed config file, only the password comes from the secret).
//! - `rocketmq.secret_key_file`: the file holds the secret key (instead of
//!   `rocketmq.secret_key`; both at once is an error).
//!
//! One trailing line break (`\n` or `\r\n`, as editors and `echo` leave it) is
//! stripped; every other byte is part of the secret.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Config, ConfigError, DbUrl};

/// A secret string: `Debug`, `Display` and `Serialize` show `***`; only
/// [`Secret::expose`] gives the value, for the one place that uses it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for signing or connecting only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str("***")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret)
    }
}

/// Reads every `*_file` secret of `config` into place.
pub(super) fn resolve(config: &mut Config) -> Result<(), ConfigError> {
    if let Some(path) = config.primary.password_file.clone() {
        config.primary.url = with_password("primary", &config.primary.url, &path)?;
    }
    if let Some(source) = config.source.as_mut() {
        if let Some(path) = source.password_file.clone() {
            source.url = with_password("source", &source.url, &path)?;
        }
    }
    let mq = &mut config.rocketmq;
    if let Some(path) = mq.secret_key_file.clone() {
        if mq.secret_key.is_some() {
            return Err(ConfigError::Invalid {
                key: "rocketmq.secret_key / rocketmq.secret_key_file".to_owned(),
                message: "both are set; give the secret key one way (the file, or the key)".to_owned(),
            });
        }
        mq.secret_key = Some(read("rocketmq.secret_key_file", &path)?);
    }
    Ok(())
}

/// `url` with its password replaced by the content of `path` (`{section}.password_file`).
fn with_password(section: &str, url: &DbUrl, path: &Path) -> Result<DbUrl, ConfigError> {
    url_with_password_file(url, &format!("{section}.url"), path, &format!("{section}.password_file"))
}

/// `url` (named `url_key` in errors) with its password replaced by the content of
/// `path` (named `key`).
pub fn url_with_password_file(url: &DbUrl, url_key: &str, path: &Path, key: &str) -> Result<DbUrl, ConfigError> {
    let password = read(key, path)?;
    url.with_password(password.expose()).ok_or_else(|| {
        ConfigError::invalid(
            url_key,
            url,
            &format!("a URL with a user name (mysql://user@host:port/database) when {key} is set"),
        )
    })
}

/// The secret in `path`, named `key` in errors, without its trailing line break.
fn read(key: &str, path: &Path) -> Result<Secret, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::SecretFile {
        key: key.to_owned(),
        path: path.to_owned(),
        source,
    })?;
    let value = text.strip_suffix('\n').map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
    if value.is_empty() {
        return Err(ConfigError::invalid(
            key,
            format!("an empty file {}", path.display()),
            "a file holding the secret",
        ));
    }
    Ok(Secret(value.to_owned()))
}
