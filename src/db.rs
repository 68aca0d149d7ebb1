//! Opening the two database connections (`source` and `primary`) with errors that
//! name the role, the address and the config key to fix. Every connection opens
//! through [`tls`], which applies the section's TLS settings.

mod tls;

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Pool, PoolConstraints, PoolOpts};

use crate::config::{DbUrl, TlsConfig};

/// How long opening the first connection may take before the database counts as down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a database could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("cannot reach the {role} database at {address} (config key {role}.url): {reason}; check that the server is up and the address and credentials are right")]
    Unreachable { role: &'static str, address: String, reason: String },
    #[error("access denied for user '{user}' on the {role} database at {address} (config key {role}.url): {reason}; fix the user name and password in {role}.url (or {env_key})")]
    AccessDenied { role: &'static str, address: String, user: String, env_key: String, reason: String },
    #[error("user '{user}' may not use database '{database}' on the {role} database server at {address} (config key {role}.url): {reason}; check that the database exists (create it, then `outbox-relay migrate`) and that the user has privileges on it, or fix the database name in {role}.url")]
    DatabaseDenied { role: &'static str, address: String, user: String, database: String, reason: String },
    #[error("the {role} database server at {address} has no database '{database}' (config key {role}.url, user '{user}'): create it (then `outbox-relay migrate`), or fix the database name in {role}.url")]
    UnknownDatabase { role: &'static str, address: String, user: String, database: String },
    #[error("{role} database at {address}: {source}")]
    Query { role: &'static str, address: String, source: mysql_async::Error },
    #[error("the {role} database server at {address} does not offer TLS, and {section}.tls.mode = \"{mode}\" requires it: enable TLS on the server (ssl_cert, ssl_key), or set {section}.tls.mode = \"preferred\" (TLS when offered) or \"disabled\"")]
    TlsUnavailable { role: &'static str, address: String, mode: &'static str, section: &'static str },
    #[error("the {role} database server at {address} accepts only TLS connections ({reason}): set {section}.tls.mode = \"required\", \"verify_ca\" or \"verify_identity\" (with {section}.tls.ca_file), or \"preferred\"")]
    TlsRequiredByServer { role: &'static str, address: String, reason: String, section: &'static str },
    #[error("the TLS certificate of the {role} database server at {address} does not verify against the CA file {ca_file} ({section}.tls.ca_file): {reason}; set {section}.tls.ca_file to the CA that signed the server's certificate")]
    CertificateRejected { role: &'static str, address: String, ca_file: String, reason: String, section: &'static str },
    #[error("the TLS certificate of the {role} database server at {address} is not issued for the host in {role}.url: {reason}; connect by a name the certificate holds, or set {section}.tls.mode = \"verify_ca\" (chain only)")]
    TlsHostMismatch { role: &'static str, address: String, reason: String, section: &'static str },
    #[error("cannot read {key} {path}: {reason}; fix the path, or let the relay's user read the file")]
    TlsFile { key: String, path: String, reason: String },
    #[error("TLS to the {role} database server at {address} failed: {reason}; {fix}")]
    TlsSetup { role: &'static str, address: String, reason: String, fix: String },
}

/// Server error codes that mean the credentials or the database name are wrong.
mod codes {
    pub const DB_ACCESS_DENIED: u16 = 1044;
    pub const ACCESS_DENIED: u16 = 1045;
    pub const UNKNOWN_DATABASE: u16 = 1049;
}

/// A pool for a bare URL (tools and tests), with the default TLS mode (`preferred`).
pub async fn connect(role: &'static str, url: &DbUrl, pool_max: usize) -> Result<Pool, DbError> {
    connect_with(role, url, &TlsConfig::default(), pool_max, &[]).await
}

/// How long a connection may stay idle in a pool before it is closed.
const IDLE_CONNECTION_TTL: Duration = Duration::from_secs(60);
/// How long a pooled connection lives at most before it is replaced.
pub(crate) const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// A pool for one database role with its TLS settings, checked with a round trip
/// before it is returned; `setup` statements run on every new connection.
///
/// The pool keeps its connections between uses: without an idle lifetime it closes
/// every connection handed back, so each FAILED write-back, mirror write and probe
/// would open a new connection (handshake, login, `setup`). A connection also goes
/// back as it is, not reset: the relay keeps no session state beyond `setup` (a
/// transaction begun with `start_transaction` and left open is rolled back on return,
/// a connection dropped mid-query is discarded), and a reset would cost two round
/// trips per use and drop the connection's prepared statements. Connections are
/// renewed after [`CONNECTION_LIFETIME`], so a primary moved behind the same name is
/// reached within that time even while the old one still answers.
pub async fn connect_with(
    role: &'static str,
    url: &DbUrl,
    tls: &TlsConfig,
    pool_max: usize,
    setup: &[&str],
) -> Result<Pool, DbError> {
    let constraints = PoolConstraints::new(0, pool_max.max(1)).unwrap_or_default();
    let opened = tls::establish(role, url, tls, |opts| async move {
        let opts = OptsBuilder::from_opts(opts)
            .pool_opts(
                PoolOpts::default()
                    .with_constraints(constraints)
                    .with_inactive_connection_ttl(IDLE_CONNECTION_TTL)
                    .with_abs_conn_ttl(Some(CONNECTION_LIFETIME))
                    .with_reset_connection(false),
            )
            .setup(setup.to_vec());
        let pool = Pool::new(opts);
        let mut conn = pool.get_conn().await?;
        conn.ping().await?;
        drop(conn);
        Ok(pool)
    });
    within_timeout(role, url, opened).await
}

/// One connection (not pooled) for `role`, with its TLS settings: the binlog stream's.
pub async fn open_conn(role: &'static str, url: &DbUrl, tls: &TlsConfig) -> Result<Conn, DbError> {
    tls::establish(role, url, tls, Conn::new::<mysql_async::Opts>).await
}

async fn within_timeout<T>(
    role: &'static str,
    url: &DbUrl,
    opening: impl std::future::Future<Output = Result<T, DbError>>,
) -> Result<T, DbError> {
    tokio::time::timeout(CONNECT_TIMEOUT, opening).await.unwrap_or_else(|_| {
        Err(DbError::Unreachable {
            role,
            address: url.address().to_owned(),
            reason: format!("no answer within {CONNECT_TIMEOUT:?}"),
        })
    })
}

impl DbError {
    /// Classifies a failure to open a connection: wrong credentials and a missing
    /// database are the environment's fault (a restart cannot help), the rest is
    /// "unreachable".
    pub fn connect(role: &'static str, url: &DbUrl, error: mysql_async::Error) -> Self {
        let address = url.address().to_owned();
        let user = url.user().unwrap_or_default().to_owned();
        let database = url.database().unwrap_or_default().to_owned();
        match &error {
            mysql_async::Error::Server(e) if e.code == codes::ACCESS_DENIED => DbError::AccessDenied {
                role,
                address,
                user,
                env_key: format!("{}{}__URL", crate::config::ENV_PREFIX, role.to_uppercase()),
                reason: e.message.clone(),
            },
            mysql_async::Error::Server(e) if e.code == codes::DB_ACCESS_DENIED => {
                DbError::DatabaseDenied { role, address, user, database, reason: e.message.clone() }
            }
            mysql_async::Error::Server(e) if e.code == codes::UNKNOWN_DATABASE => {
                DbError::UnknownDatabase { role, address, user, database }
            }
            _ => DbError::Unreachable { role, address, reason: error.to_string() },
        }
    }

    /// Wraps a query failure on `role`'s database.
    pub fn query(role: &'static str, url: &DbUrl, source: mysql_async::Error) -> Self {
        DbError::Query { role, address: url.address().to_owned(), source }
    }
}
