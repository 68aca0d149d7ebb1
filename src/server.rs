//! What the relay learns about a database server when it connects: its family
//! (MariaDB or MySQL differ in GTIDs, compression and status statements), version and
//! identity. Both the binlog path and the operator's checks read these facts.

/// Which server family: they differ in GTIDs, compression and status statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    MariaDb,
    MySql,
}

impl Flavor {
    /// The family of a server reporting `version` (`SELECT VERSION()`).
    pub fn of_version(version: &str) -> Self {
        if version.contains("MariaDB") {
            Flavor::MariaDb
        } else {
            Flavor::MySql
        }
    }
}

/// What the relay learned about the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    pub flavor: Flavor,
    pub version: String,
    /// MySQL `server_uuid`, or MariaDB `server_id@hostname:port` (MariaDB has no uuid).
    pub identity: String,
}
