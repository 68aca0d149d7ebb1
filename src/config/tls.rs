//! TLS settings of one database connection (`[primary.tls]`, `[source.tls]`).
//!
//! The modes follow the MySQL client's `--ssl-mode` so an operator can carry the
//! setting over unchanged; the default is `preferred`, as in the MySQL client. Only
//! the shape is checked here (which files a mode needs); the files are read when a
//! connection opens, so a renewed certificate is picked up by the next connection.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// How a connection uses TLS.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TlsMode {
    /// Plaintext only.
    Disabled,
    /// TLS without certificate checks when the server offers it, else plaintext.
    #[default]
    Preferred,
    /// TLS without certificate checks; a server without TLS is refused.
    Required,
    /// TLS; the server's certificate must chain to `ca_file` (its host name is not checked).
    VerifyCa,
    /// TLS; the certificate must chain to `ca_file` and be issued for the URL's host.
    VerifyIdentity,
}

impl TlsMode {
    /// The mode as it is written in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Disabled => "disabled",
            TlsMode::Preferred => "preferred",
            TlsMode::Required => "required",
            TlsMode::VerifyCa => "verify_ca",
            TlsMode::VerifyIdentity => "verify_identity",
        }
    }

    /// Whether the server's certificate is checked against `ca_file`.
    pub fn verifies(self) -> bool {
        matches!(self, TlsMode::VerifyCa | TlsMode::VerifyIdentity)
    }
}

/// The `tls` sub-table of a database section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    pub mode: TlsMode,
    /// PEM file with the CA certificate(s) the server's certificate must chain to;
    /// required by (and only used by) `verify_ca` and `verify_identity`.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (chain) for servers that require one; needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#1, PKCS#8 or SEC1) of `cert_file`.
    pub key_file: Option<PathBuf>,
}

impl TlsConfig {
    /// Checks that the files given fit the mode; `section` is `primary` or `source`.
    pub(super) fn validate(&self, section: &str) -> Result<(), ConfigError> {
        let key = |name: &str| format!("{section}.tls.{name}");
        if self.mode.verifies() && self.ca_file.is_none() {
            return Err(ConfigError::invalid(
                &key("ca_file"),
                "nothing",
                &format!(
                    "the PEM file of the CA that signed the server's certificate when {} = \"{}\"",
                    key("mode"),
                    self.mode.as_str()
                ),
            ));
        }
        if !self.mode.verifies() && self.ca_file.is_some() {
            return Err(ConfigError::invalid(
                &key("ca_file"),
                format!("a CA file with {} = \"{}\"", key("mode"), self.mode.as_str()),
                &format!(
                    "{} = \"verify_ca\" or \"verify_identity\" (the only modes that check the certificate), or no ca_file",
                    key("mode")
                ),
            ));
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(ConfigError::Invalid {
                key: format!("{} / {}", key("cert_file"), key("key_file")),
                message: "a client certificate needs both keys (the certificate and its private key), or neither"
                    .to_owned(),
            });
        }
        if self.mode == TlsMode::Disabled && self.cert_file.is_some() {
            return Err(ConfigError::invalid(
                &key("cert_file"),
                format!("a client certificate with {} = \"disabled\"", key("mode")),
                &format!("a TLS mode other than \"disabled\" for {}, or no client certificate", key("mode")),
            ));
        }
        Ok(())
    }
}
