//! TLS on the relay's database connections: the one place that turns a [`DbUrl`] and
//! its [`TlsConfig`] into connection options, the second attempt two modes need,
//! and the errors that say which setting to change.
//!
//! Every mode except `disabled` first tries TLS. Two modes may need a second try:
//! - `preferred`: a server that does not offer TLS gets a plaintext connection (the
//!   driver itself knows only "TLS or fail"). Like the MySQL client's `PREFERRED`,
//!   this cannot tell a server without TLS from an attacker who strips it.
//! - `verify_ca`: the driver's switch to ignore the host name has no effect with
//!   the TLS library in use (it looks for an error text the library no longer
//!   writes). The first attempt checks chain and name; when only the name fails,
//!   the chain has already verified against the CA, and the second attempt checks
//!   against a name the certificate itself holds, so every connection still
//!   verifies the chain. A certificate without a subjectAltName cannot be used so.
//!
//! A TLS connection stays on TCP: the driver's switch to a local Unix socket (which
//! it makes for loopback addresses) would leave the checked connection behind.
//!
//! MariaDB answers a plaintext login to a server that accepts only TLS with "access
//! denied", as for a wrong password; under `disabled` that error names both causes
//! (see [`explain`]).

use std::future::Future;
use std::path::Path;

use mysql_async::{ClientIdentity, Opts, OptsBuilder, SslOpts};

use super::DbError;
use crate::config::{DbUrl, TlsConfig, TlsMode};
use crate::said_once;

/// How one connection attempt talks to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Transport {
    Plain,
    /// TLS; the certificate is checked against `host` instead of the URL's host.
    Tls {
        host: Option<String>,
    },
}

/// Runs `attempt` with options for `url` and `tls`, once more when the mode allows a
/// second try (see the module doc); a failure comes back classified.
pub(super) async fn establish<T, F, Fut>(
    role: &'static str,
    url: &DbUrl,
    tls: &TlsConfig,
    attempt: F,
) -> Result<T, DbError>
where
    F: Fn(Opts) -> Fut,
    Fut: Future<Output = Result<T, mysql_async::Error>>,
{
    let mut transport = match tls.mode {
        TlsMode::Disabled => Transport::Plain,
        _ => Transport::Tls { host: None },
    };
    let mut retried = false;
    loop {
        let error = match attempt(options(role, url, tls, &transport)?).await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        let next = if retried { None } else { second_try(role, url, tls, &transport, &error)? };
        match next {
            Some(next) => {
                transport = next;
                retried = true;
            }
            None => return Err(explain(role, url, tls, error)),
        }
    }
}

/// The classified error of the last attempt. MariaDB refuses a plaintext login to a
/// server that accepts only TLS as "access denied", like a wrong password; under
/// `disabled` the error says so. It does not log in again over TLS to find out: that
/// would count a second failed login against the account, and send the password over
/// a connection the operator chose not to use.
fn explain(role: &'static str, url: &DbUrl, tls: &TlsConfig, error: mysql_async::Error) -> DbError {
    match classify(role, url, tls, error) {
        DbError::AccessDenied { role, address, user, env_key, reason } if tls.mode == TlsMode::Disabled => {
            let section = section(role);
            DbError::AccessDenied {
                role,
                address,
                user,
                env_key,
                reason: format!(
                    "{reason}; or, if the server accepts only TLS connections (a MariaDB with require_secure_transport refuses a plaintext login this way), set {section}.tls.mode = \"required\", \"verify_ca\" or \"verify_identity\" instead of \"disabled\""
                ),
            }
        }
        other => other,
    }
}

/// The options of one attempt: the URL's, with TLS as `transport` says.
fn options(role: &'static str, url: &DbUrl, tls: &TlsConfig, transport: &Transport) -> Result<Opts, DbError> {
    let opts = Opts::from_url(url.expose()).map_err(|e| DbError::Unreachable {
        role,
        address: url.address().to_owned(),
        reason: e.to_string(),
    })?;
    let builder = OptsBuilder::from_opts(opts);
    Ok(match transport {
        Transport::Plain => builder.ssl_opts(None::<SslOpts>),
        Transport::Tls { host } => builder.ssl_opts(ssl_opts(role, tls, host.as_deref())?).prefer_socket(false),
    }
    .into())
}

fn ssl_opts(role: &'static str, tls: &TlsConfig, host: Option<&str>) -> Result<SslOpts, DbError> {
    let section = section(role);
    let mut ssl = SslOpts::default();
    match (tls.mode, &tls.ca_file) {
        (TlsMode::VerifyCa | TlsMode::VerifyIdentity, Some(ca_file)) => {
            ssl = ssl
                .with_root_certs(vec![read(section, "ca_file", ca_file)?.into()])
                .with_disable_built_in_roots(true)
                .with_danger_skip_domain_validation(tls.mode == TlsMode::VerifyCa);
        }
        _ => ssl = ssl.with_danger_accept_invalid_certs(true),
    }
    if let Some(host) = host {
        ssl = ssl.with_danger_tls_hostname_override(Some(host.to_owned()));
    }
    if let (Some(cert_file), Some(key_file)) = (&tls.cert_file, &tls.key_file) {
        let identity = ClientIdentity::new(
            read(section, "cert_file", cert_file)?.into(),
            read(section, "key_file", key_file)?.into(),
        );
        ssl = ssl.with_client_identity(Some(identity));
    }
    Ok(ssl)
}

/// The config section whose `tls` applies to `role` (a consumer database and
/// `migrate --admin-url` use the primary's).
fn section(role: &str) -> &'static str {
    if role == "source" {
        "source"
    } else {
        "primary"
    }
}

fn read(section: &str, name: &str, path: &Path) -> Result<Vec<u8>, DbError> {
    std::fs::read(path).map_err(|e| DbError::TlsFile {
        key: format!("{section}.tls.{name}"),
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// What to try after `error`, if the mode allows another attempt.
fn second_try(
    role: &'static str,
    url: &DbUrl,
    tls: &TlsConfig,
    transport: &Transport,
    error: &mysql_async::Error,
) -> Result<Option<Transport>, DbError> {
    match (tls.mode, transport) {
        (TlsMode::Preferred, Transport::Tls { .. }) if offers_no_tls(error) => {
            if said_once::first_time(format!("plaintext {role} {}", url.address())) {
                tracing::warn!(role, address = %url.address(), "the database server offers no TLS: connecting in plaintext, now and on every reconnect ({}.tls.mode = \"preferred\"; set \"disabled\" to say so, or \"required\" to refuse)", section(role));
            }
            Ok(Some(Transport::Plain))
        }
        (TlsMode::VerifyCa, Transport::Tls { host: None }) => match rustls_error(error) {
            Some(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForNameContext {
                presented,
                ..
            })) => match presented.iter().find_map(|name| usable_name(name)) {
                Some(host) => {
                    tracing::debug!(role, address = %url.address(), %host, "verify_ca: the chain verified; checking the certificate against a name it holds");
                    Ok(Some(Transport::Tls { host: Some(host) }))
                }
                None => Err(DbError::TlsSetup {
                    role,
                    address: url.address().to_owned(),
                    reason: "the server's certificate chains to the CA but names no host in a subjectAltName, which this client needs to check it".to_owned(),
                    fix: format!("reissue the server certificate with a subjectAltName (DNS name or IP address), or set {}.tls.mode = \"required\" (encryption without certificate checks)", section(role)),
                }),
            },
            _ => Ok(None),
        },
        _ => Ok(None),
    }
}

/// A name from the TLS library's list of the names a certificate holds
/// (`DnsName("db.example")`, `IpAddress(10.0.0.1)`), as a host to check against.
/// A wildcard name gives a host it covers.
fn usable_name(presented: &str) -> Option<String> {
    let dns = presented.strip_prefix("DnsName(\"").and_then(|rest| rest.strip_suffix("\")"));
    let ip = presented.strip_prefix("IpAddress(").and_then(|rest| rest.strip_suffix(')'));
    let name = match (dns, ip) {
        (Some(dns), _) => dns.strip_prefix("*.").map_or_else(|| dns.to_owned(), |rest| format!("relay.{rest}")),
        (None, Some(ip)) => ip.parse::<std::net::IpAddr>().ok()?.to_string(),
        (None, None) => return None,
    };
    rustls::pki_types::ServerName::try_from(name.as_str()).is_ok().then_some(name)
}

/// The server's greeting did not offer TLS.
fn offers_no_tls(error: &mysql_async::Error) -> bool {
    matches!(error, mysql_async::Error::Driver(mysql_async::DriverError::NoClientSslFlagFromServer))
}

/// The TLS library's error inside a driver error, if it is one.
fn rustls_error(error: &mysql_async::Error) -> Option<&rustls::Error> {
    match error {
        mysql_async::Error::Io(mysql_async::IoError::Io(io)) => io.get_ref()?.downcast_ref::<rustls::Error>(),
        mysql_async::Error::Io(mysql_async::IoError::Tls(mysql_async::TlsError::Tls(tls))) => Some(tls),
        _ => None,
    }
}

/// MySQL's error for a plaintext login to a server with `require_secure_transport = ON`
/// (MariaDB answers "access denied" instead, see [`explain`]).
const SECURE_TRANSPORT_REQUIRED: u16 = 3159;

/// A TLS-specific reading of a failed attempt, else the usual one.
fn classify(role: &'static str, url: &DbUrl, tls: &TlsConfig, error: mysql_async::Error) -> DbError {
    let section = section(role);
    let address = url.address().to_owned();
    if offers_no_tls(&error) {
        return DbError::TlsUnavailable { role, address, mode: tls.mode.as_str(), section };
    }
    if let mysql_async::Error::Server(e) = &error {
        if e.code == SECURE_TRANSPORT_REQUIRED {
            return DbError::TlsRequiredByServer { role, address, reason: e.message.clone(), section };
        }
    }
    let Some(tls_error) = rustls_error(&error) else {
        return DbError::connect(role, url, error);
    };
    let reason = tls_error.to_string();
    match (tls_error, &tls.ca_file) {
        (
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName | rustls::CertificateError::NotValidForNameContext { .. },
            ),
            _,
        ) => DbError::TlsHostMismatch { role, address, reason, section },
        (rustls::Error::InvalidCertificate(_), Some(ca_file)) => {
            DbError::CertificateRejected { role, address, ca_file: ca_file.display().to_string(), reason, section }
        }
        _ => DbError::TlsSetup {
            role,
            address,
            reason,
            fix: format!(
                "check that {section}.tls.ca_file, cert_file and key_file hold PEM certificates and a PEM private key, and that the server's TLS setup works (e.g. with the mysql client and the same mode)"
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::usable_name;

    #[test]
    fn names_from_the_certificate_become_hosts() {
        assert_eq!(usable_name("DnsName(\"db.internal\")").as_deref(), Some("db.internal"));
        assert_eq!(usable_name("DnsName(\"*.db.internal\")").as_deref(), Some("relay.db.internal"));
        assert_eq!(usable_name("IpAddress(10.1.2.3)").as_deref(), Some("10.1.2.3"));
        assert_eq!(usable_name("UniformResourceIdentifier(\"spiffe://x\")"), None);
        assert_eq!(usable_name("DirectoryName"), None);
    }
}
