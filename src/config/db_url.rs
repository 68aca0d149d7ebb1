//! A database URL whose password never reaches a log line or a config dump.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A `mysql://user:password@host:port/db` URL. `Display`, `Debug` and `Serialize`
/// show it with the password replaced by `***`; only [`DbUrl::expose`] gives the
/// real string, for the one place that opens the connection.
#[derive(Clone, PartialEq, Eq)]
pub struct DbUrl(String);

impl DbUrl {
    /// Wraps a URL string (not validated here; see `config::validate`).
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The URL with its password, for opening a connection only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `host:port` part, for error messages that must name the address.
    pub fn address(&self) -> &str {
        let after_scheme = self.0.split_once("://").map_or(self.0.as_str(), |(_, rest)| rest);
        let after_user = after_scheme.rsplit_once('@').map_or(after_scheme, |(_, host)| host);
        after_user.split(['/', '?']).next().unwrap_or(after_user)
    }

    /// The user name in the URL, if any.
    pub fn user(&self) -> Option<&str> {
        let after_scheme = self.0.split_once("://").map_or(self.0.as_str(), |(_, rest)| rest);
        let userinfo = after_scheme.rsplit_once('@')?.0;
        Some(userinfo.split_once(':').map_or(userinfo, |(user, _)| user))
    }

    /// The database named in the URL path, if any.
    pub fn database(&self) -> Option<&str> {
        let after_scheme = self.0.split_once("://").map_or(self.0.as_str(), |(_, rest)| rest);
        let after_user = after_scheme.rsplit_once('@').map_or(after_scheme, |(_, host)| host);
        let path = after_user.split_once('/')?.1;
        let db = path.split('?').next().unwrap_or(path);
        (!db.is_empty()).then_some(db)
    }

    /// The URL with `password` as its password (percent-encoded, so any byte is
    /// allowed); `None` when the URL has no user name to attach it to.
    pub fn with_password(&self, password: &str) -> Option<DbUrl> {
        let (scheme, rest) = self.0.split_once("://")?;
        let (userinfo, host) = rest.rsplit_once('@')?;
        let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
        (!user.is_empty()).then(|| DbUrl(format!("{scheme}://{user}:{}@{host}", percent_encode(password))))
    }

    /// The URL with the password (if any) replaced by `***`.
    pub fn redacted(&self) -> String {
        let Some((scheme, rest)) = self.0.split_once("://") else {
            return self.0.clone();
        };
        let Some((userinfo, host)) = rest.rsplit_once('@') else {
            return self.0.clone();
        };
        match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
            None => self.0.clone(),
        }
    }
}

/// Every byte outside the URL's unreserved characters as `%XX`.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl fmt::Display for DbUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for DbUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DbUrl({})", self.redacted())
    }
}

impl Serialize for DbUrl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.redacted())
    }
}

impl<'de> Deserialize<'de> for DbUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(DbUrl)
    }
}
